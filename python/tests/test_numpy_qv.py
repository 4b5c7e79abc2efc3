"""flash-attention 3's qv (DeepSeek's multi-head latent attention, decoding with the projections
absorbed) on NumPy arrays (CPU reference backend): the scores become softmax_scale * (q . k + qv . v),
which is attention with q and qv concatenated over k and v concatenated; the default softmax_scale
is then 1/sqrt(head_dim + v's head_dim). Checked against the float64 oracle on those concatenations."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close
from test_numpy_dense import DTYPES, random_options
from test_numpy_varlen_kvcache import prefix_sums


def joined(q, qv, k, v):
    """q | qv and k | v along the head dim: the queries and keys whose dot products are qv's scores."""
    return np.concatenate([q, qv], axis=-1), np.concatenate([k, v], axis=-1)


def default_scale(head_dim, head_dim_v):
    return float(np.float32(1) / np.sqrt(np.float32(head_dim + head_dim_v)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dims", [(16, 16), (8, 40), (64, 24)], ids=lambda d: f"{d[0]}-{d[1]}")
def test_dense_matches_the_oracle_on_concatenations(rng, head_dims, dtype):
    head_dim, head_dim_v = head_dims
    q = rng.standard_normal((2, 9, 4, head_dim)).astype(dtype)
    qv = rng.standard_normal((2, 9, 4, head_dim_v)).astype(dtype)
    k = rng.standard_normal((2, 21, 2, head_dim)).astype(dtype)
    v = rng.standard_normal((2, 21, 2, head_dim_v)).astype(dtype)
    options = random_options(rng, 9, 21)
    out = np.full((2, 9, 4, head_dim_v), np.nan, dtype=dtype)
    _, lse = hopattn.flash_attn_func(q, k, v, qv=qv, softmax_scale=options["softmax_scale"],
                                     causal=options["causal"], window_size=options["window"],
                                     softcap=options["softcap"], return_attn_probs=True, out=out)
    q_cat, k_cat = joined(q, qv, k, v)
    if options["softmax_scale"] is None:
        options["softmax_scale"] = default_scale(head_dim, head_dim_v)
    expected_out, expected_lse = reference.dense(q_cat, k_cat, v, **options)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)
    # qv changes the scores (the lse; out too, unless each row sees a single key): else no test.
    _, lse_without_qv = hopattn.flash_attn_func(q, k, v, softmax_scale=options["softmax_scale"],
                                                causal=options["causal"], window_size=options["window"],
                                                softcap=options["softcap"], return_attn_probs=True)
    assert not np.allclose(lse, lse_without_qv)


def test_varlen_matches_the_oracle(rng):
    lengths_q, lengths_k = np.array([3, 0, 7]), np.array([5, 2, 11])
    cu_q, cu_k = prefix_sums(lengths_q), prefix_sums(lengths_k)
    q = rng.standard_normal((int(cu_q[-1]), 4, 16)).astype(np.float32)
    qv = rng.standard_normal((int(cu_q[-1]), 4, 32)).astype(np.float32)
    k = rng.standard_normal((int(cu_k[-1]), 1, 16)).astype(np.float32)
    v = rng.standard_normal((int(cu_k[-1]), 1, 32)).astype(np.float32)
    out, lse = hopattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 11, qv=qv, causal=True,
                                              return_attn_probs=True)
    q_cat, k_cat = joined(q, qv, k, v)
    expected_out, expected_lse = reference.varlen(q_cat, k_cat, v, cu_q, cu_k, causal=True,
                                                  softmax_scale=default_scale(16, 32))
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)


@pytest.mark.parametrize("leftpad", [False, True], ids=["", "cache_leftpad"])
def test_kvcache_mla_decoding_step(rng, leftpad):
    # DeepSeek-style decoding: one key head (the latent), a narrow rope part (q, k_cache) and a wide
    # latent part (qv, v_cache); new keys appended first. With cache_leftpad the queries go to the
    # core as packed rows, and qv with them.
    batch, heads, head_dim, head_dim_v, capacity = 2, 8, 16, 64, 24
    k_cache = rng.standard_normal((batch, capacity, 1, head_dim)).astype(np.float32)
    v_cache = rng.standard_normal((batch, capacity, 1, head_dim_v)).astype(np.float32)
    q = rng.standard_normal((batch, 1, heads, head_dim)).astype(np.float32)
    qv = rng.standard_normal((batch, 1, heads, head_dim_v)).astype(np.float32)
    k_new = rng.standard_normal((batch, 1, 1, head_dim)).astype(np.float32)
    v_new = rng.standard_normal((batch, 1, 1, head_dim_v)).astype(np.float32)
    cache_seqlens = np.array([5, 20], np.int32)
    extra = dict(cache_leftpad=np.array([2, 0], np.int32)) if leftpad else {}
    out, lse = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, qv=qv,
                                               cache_seqlens=cache_seqlens, causal=True,
                                               return_softmax_lse=True, **extra)
    assert out.shape == (batch, 1, heads, head_dim_v)
    first = extra["cache_leftpad"] if leftpad else np.zeros(batch, np.int32)
    for b in range(batch):  # the keys in use, after the append: [first[b], cache_seqlens[b] + 1)
        keys = slice(int(first[b]), int(cache_seqlens[b]) + 1)
        q_cat, k_cat = joined(q[b:b + 1], qv[b:b + 1], k_cache[b:b + 1, keys], v_cache[b:b + 1, keys])
        expected_out, expected_lse = reference.dense(q_cat, k_cat, v_cache[b:b + 1, keys], causal=True,
                                                     softmax_scale=default_scale(head_dim, head_dim_v))
        assert_close(out[b:b + 1], expected_out, "float32")
        assert_lse_close(lse[b:b + 1], expected_lse)
