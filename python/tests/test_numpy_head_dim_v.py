"""v with a head dim of its own (flash-attention 3's headdim_v; DeepSeek's attention has q/k 192 and
v 128) on NumPy arrays (CPU reference backend) against the float64 oracle: out ends in v's head dim.
Outputs are poisoned (NaN) before the call, so each element must be written."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close
from test_numpy_dense import DTYPES, random_options, run
from test_numpy_varlen_kvcache import prefix_sums

# (q/k head dim, v head dim): narrower and wider v, DeepSeek's pair, 1-wide extremes.
HEAD_DIMS = [(192, 128), (16, 40), (33, 1), (1, 24)]


def random_qkv(rng, shape_q, shape_k, head_dim_v, dtype):
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    v = rng.standard_normal(shape_k[:-1] + (head_dim_v,)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dims", HEAD_DIMS, ids=lambda dims: f"{dims[0]}-{dims[1]}")
def test_dense_matches_reference(rng, head_dims, dtype):
    head_dim, head_dim_v = head_dims
    q, k, v = random_qkv(rng, (2, 19, 4, head_dim), (2, 37, 2, head_dim), head_dim_v, dtype)
    options = random_options(rng, 19, 37)
    out = np.full((2, 19, 4, head_dim_v), np.nan, dtype=dtype)
    result, lse = run(q, k, v, options, return_attn_probs=True, out=out)
    assert result is out
    expected_out, expected_lse = reference.dense(q, k, v, **options)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)
    allocated = run(q, k, v, options)  # out allocated by hopattn: v's head dim too
    assert allocated.shape == (2, 19, 4, head_dim_v)
    np.testing.assert_array_equal(allocated, out)


@pytest.mark.parametrize("head_dims", HEAD_DIMS, ids=lambda dims: f"{dims[0]}-{dims[1]}")
def test_varlen_matches_reference(rng, head_dims):
    head_dim, head_dim_v = head_dims
    lengths_q, lengths_k = np.array([5, 0, 17]), np.array([9, 4, 30])
    cu_q, cu_k = prefix_sums(lengths_q), prefix_sums(lengths_k)
    q, k, v = random_qkv(rng, (int(cu_q[-1]), 3, head_dim), (int(cu_k[-1]), 1, head_dim), head_dim_v,
                         "float32")
    out, lse = hopattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 17, 30, causal=True,
                                              return_attn_probs=True)
    assert out.shape == (int(cu_q[-1]), 3, head_dim_v)
    expected_out, expected_lse = reference.varlen(q, k, v, cu_q, cu_k, causal=True)
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)


def test_kvcache_cache_batch_idx_with_v_of_its_own_head_dim(rng):
    # cache_batch_idx reads cache rows through pages (or a gathered copy) of each cache's own head dim.
    k_cache = rng.standard_normal((3, 32, 1, 8)).astype(np.float32)
    v_cache = rng.standard_normal((3, 32, 1, 24)).astype(np.float32)
    q = rng.standard_normal((2, 1, 2, 8)).astype(np.float32)
    index, seqlens = np.array([2, 0], np.int32), np.array([9, 32], np.int32)
    out = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                          cache_batch_idx=index)
    assert out.shape == (2, 1, 2, 24)
    expected, _ = reference.kvcache(q, k_cache[index], v_cache[index], cache_seqlens=seqlens)
    assert_close(out, expected, "float32")


@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
def test_kvcache_appends_and_attends_with_v_of_its_own_head_dim(rng, paged):
    # MLA-style decoding: a v cache of another head dim than the k cache; new keys and values are
    # appended, each of its cache's head dim, then attention runs over the grown cache.
    batch, capacity, head_dim, head_dim_v = 2, 32, 24, 40
    k_cache = rng.standard_normal((batch, capacity, 1, head_dim)).astype(np.float32)
    v_cache = rng.standard_normal((batch, capacity, 1, head_dim_v)).astype(np.float32)
    page_table = None
    if paged:  # pages of 16 keys, the second sequence's in reverse order
        k_cache, v_cache = (x.reshape(batch * 2, 16, 1, x.shape[-1]) for x in (k_cache, v_cache))
        page_table = np.array([[0, 1], [3, 2]], np.int32)
    q = rng.standard_normal((batch, 2, 4, head_dim)).astype(np.float32)
    k_new = rng.standard_normal((batch, 2, 1, head_dim)).astype(np.float32)
    v_new = rng.standard_normal((batch, 2, 1, head_dim_v)).astype(np.float32)
    cache_seqlens = np.array([7, 29], np.int32)
    k_before, v_before = k_cache.copy(), v_cache.copy()
    out, lse = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                               cache_seqlens=cache_seqlens, page_table=page_table,
                                               causal=True, return_softmax_lse=True)
    assert out.shape == (batch, 2, 4, head_dim_v)
    # The oracle over the grown caches as hopattn left them (the append is checked in detail by
    # test_numpy_kvcache_append.py; here: every new row landed and nothing else changed).
    used = cache_seqlens + 2
    expected_out, expected_lse = reference.kvcache(q, k_cache, v_cache, cache_seqlens=used,
                                                   page_table=page_table, causal=True)
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)
    assert (k_cache != k_before).any(axis=-1).sum() == 4 and (v_cache != v_before).any(axis=-1).sum() == 4


def test_mismatched_shapes_name_the_argument(rng):
    q, k, v = random_qkv(rng, (1, 5, 2, 16), (1, 7, 2, 16), 8, "float32")
    with pytest.raises(ValueError, match="^out: shape .* with v's head_dim 8 last"):
        hopattn.flash_attn_func(q, k, v, out=np.zeros((1, 5, 2, 16), np.float32))
    with pytest.raises(ValueError, match="^v: shape .* does not match k's"):
        hopattn.flash_attn_func(q, k, v[:, :6])
    k_cache, v_cache = np.zeros((1, 9, 2, 16), np.float32), np.zeros((1, 8, 2, 8), np.float32)
    with pytest.raises(ValueError, match="^v(_cache)?: shape .* (only their head dims|but for its head dim)"):
        hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=3)
