"""The packed entry points (flash_attn_qkvpacked_func, ..._kvpacked_func and their varlen forms) on
NumPy arrays: strided views of one array, against the float64 oracle, and their shape errors."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close
from test_numpy_dense import DTYPES, random_options
from test_numpy_varlen_kvcache import prefix_sums


def options_kwargs(options):
    return dict(softmax_scale=options["softmax_scale"], causal=options["causal"],
                window_size=options["window"], softcap=options["softcap"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(4))
def test_qkvpacked_matches_reference(rng, dtype, case):
    batch, seqlen, heads, head_dim = int(rng.integers(1, 3)), int(rng.integers(1, 50)), 2, 40
    qkv = rng.standard_normal((batch, seqlen, 3, heads, head_dim)).astype(dtype)
    options = random_options(rng, seqlen, seqlen)
    out, lse = hopattn.flash_attn_qkvpacked_func(qkv, return_attn_probs=True,
                                                 **options_kwargs(options))
    expected_out, expected_lse = reference.dense(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], **options)
    assert out.shape == (batch, seqlen, heads, head_dim)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kvpacked_matches_reference_with_gqa(rng, dtype):
    heads_kv, seqlen_q, seqlen_k = 2, 23, 37
    q = rng.standard_normal((2, seqlen_q, 3 * heads_kv, 64)).astype(dtype)
    kv = rng.standard_normal((2, seqlen_k, 2, heads_kv, 64)).astype(dtype)
    options = random_options(rng, seqlen_q, seqlen_k)
    out = hopattn.flash_attn_kvpacked_func(q, kv, **options_kwargs(options))
    expected_out, _ = reference.dense(q, kv[:, :, 0], kv[:, :, 1], **options)
    assert_close(out, expected_out, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_varlen_packed_match_reference(rng, dtype):
    lengths = np.array([5, 0, 31, 1], dtype=np.int64)
    cu = prefix_sums(lengths)
    total, heads, head_dim = int(cu[-1]), 2, 32
    qkv = rng.standard_normal((total, 3, heads, head_dim)).astype(dtype)
    options = random_options(rng, int(lengths.max()), int(lengths.max()))
    out, lse = hopattn.flash_attn_varlen_qkvpacked_func(qkv, cu, int(lengths.max()),
                                                        return_attn_probs=True, **options_kwargs(options))
    expected_out, expected_lse = reference.varlen(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, **options)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)

    lengths_k = np.array([7, 3, 0, 12], dtype=np.int64)
    cu_k = prefix_sums(lengths_k)
    kv = rng.standard_normal((int(cu_k[-1]), 2, 1, head_dim)).astype(dtype)
    q = qkv[:, 0]
    out = hopattn.flash_attn_varlen_kvpacked_func(q, kv, cu, cu_k, int(lengths.max()),
                                                  int(lengths_k.max()), **options_kwargs(options))
    expected_out, _ = reference.varlen(q, kv[:, 0], kv[:, 1], cu, cu_k, **options)
    assert_close(out, expected_out, dtype)


@pytest.mark.parametrize("function, args, name", [
    (hopattn.flash_attn_qkvpacked_func, lambda x: (x((2, 8, 2, 1, 16)),), "qkv"),  # 2 where 3 belongs
    (hopattn.flash_attn_qkvpacked_func, lambda x: (x((2, 8, 1, 16)),), "qkv"),  # rank 4
    (hopattn.flash_attn_kvpacked_func, lambda x: (x((2, 8, 1, 16)), x((2, 8, 3, 1, 16))), "kv"),
    (hopattn.flash_attn_varlen_qkvpacked_func,
     lambda x: (x((8, 2, 1, 16)), np.array([0, 8], np.int32), 8), "qkv"),
])
def test_wrong_packing_names_the_argument(function, args, name):
    make = lambda shape: np.ones(shape, np.float32)  # noqa: E731
    with pytest.raises(ValueError, match=rf"^{name}: expected .* got shape"):
        function(*args(make))
