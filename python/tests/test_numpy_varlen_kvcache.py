"""flash_attn_varlen_func and flash_attn_with_kvcache on NumPy arrays against the float64 oracle."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close
from test_numpy_dense import DTYPES, random_options


def prefix_sums(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def random_heads(rng):
    heads_kv = int(rng.integers(1, 3))
    return heads_kv * int(rng.choice([1, 3])), heads_kv, int(rng.choice([1, 16, 40, 64]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunks", [False, True], ids=["", "chunks"])
@pytest.mark.parametrize("rows_used", [False, True], ids=["", "seqused_q"])
@pytest.mark.parametrize("case", range(8))
def test_varlen_matches_reference(rng, dtype, chunks, rows_used, case):
    batch = int(rng.integers(1, 5))
    lengths_q = rng.choice([0, 1, 2, 17, 30], size=batch)
    lengths_q[0] = max(lengths_q[0], 1)  # max_seqlen_q must be >= 1
    lengths_k = rng.integers(0, 26, size=batch)
    heads_q, heads_kv, head_dim = random_heads(rng)
    cu_q, cu_k = prefix_sums(lengths_q), prefix_sums(lengths_k)
    q = rng.standard_normal((cu_q[-1], heads_q, head_dim)).astype(dtype)
    k = rng.standard_normal((cu_k[-1], heads_kv, head_dim)).astype(dtype)
    v = rng.standard_normal((cu_k[-1], heads_kv, head_dim)).astype(dtype)
    seqused_k = None
    if rng.integers(2):
        seqused_k = rng.integers(0, lengths_k + 1).astype(np.int32)
    options = random_options(rng, int(lengths_q.max()), int(lengths_k.max()))
    # attention_chunk counts each sequence's chunks from its own first key (64: longer than any).
    options["attention_chunk"] = int(rng.choice([1, 5, 8, 64])) if chunks else 0
    # seqused_q: each sequence's first rows in use (causal aligns to them); q holds NaN past them,
    # which must not be read, and out keeps its poison there (not written).
    seqused_q, used = None, np.ones(cu_q[-1], bool)
    if rows_used:
        seqused_q = rng.integers(0, lengths_q + 1).astype(np.int32)
        used = np.concatenate([np.arange(n) < u for n, u in zip(lengths_q, seqused_q)]).astype(bool)
        q[~used] = np.nan
    print(lengths_q, lengths_k, seqused_k, seqused_q, heads_q, heads_kv, head_dim, options)
    out = np.full(q.shape, np.nan, dtype=dtype)
    result, lse = hopattn.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, int(lengths_q.max()), int(lengths_k.max()), seqused_k=seqused_k,
        seqused_q=seqused_q, softmax_scale=options["softmax_scale"], causal=options["causal"],
        window_size=options["window"], attention_chunk=options["attention_chunk"],
        softcap=options["softcap"], return_attn_probs=True, out=out)
    assert result is out
    expected_out, expected_lse = reference.varlen(q, k, v, cu_q, cu_k, seqused_k=seqused_k,
                                                  seqused_q=seqused_q, **options)
    assert_close(out[used], expected_out[used], dtype)
    assert_lse_close(lse[:, used], expected_lse[:, used])
    assert np.isnan(out[~used]).all()



def test_seqused_q_rows_past_the_queries_in_use_come_back_as_rows_that_see_no_key(rng):
    # Arrays hopattn allocates (no out=) hold out 0 and lse -inf in the rows past seqused_q (the
    # library writes none of them), never uninitialized memory; the rows in use match the oracle.
    cu_q, cu_k, used = np.array([0, 7, 9], np.int32), np.array([0, 5, 16], np.int32), [3, 2]
    q = rng.standard_normal((9, 2, 16)).astype(np.float32)
    k, v = (rng.standard_normal((16, 1, 16)).astype(np.float32) for _ in range(2))
    out, lse = hopattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 11, causal=True,
                                              seqused_q=np.array(used, np.int32),
                                              return_attn_probs=True)
    rows = np.zeros(9, bool)
    rows[[0, 1, 2, 7, 8]] = True
    assert (out[~rows] == 0).all() and np.isneginf(lse[:, ~rows]).all()
    expected_out, expected_lse = reference.varlen(q, k, v, cu_q, cu_k, seqused_q=used, causal=True)
    assert_close(out[rows], expected_out[rows], "float32")
    assert_lse_close(lse[:, rows], expected_lse[:, rows])


def test_varlen_without_any_key(rng):
    # total_k = 0: k and v are empty arrays (NumPy >= 2.4 gives them all-zero strides).
    q = rng.standard_normal((3, 2, 40)).astype(np.float16)
    k = np.zeros((0, 1, 40), np.float16)
    out = np.full(q.shape, np.nan, np.float16)
    _, lse = hopattn.flash_attn_varlen_func(q, k, k.copy(), np.array([0, 1, 3], np.int32),
                                            np.array([0, 0, 0], np.int32), 2, 0, out=out,
                                            return_attn_probs=True)
    assert (out == 0).all() and np.isneginf(lse).all()

def random_paged_cache(rng, batch, heads_kv, head_dim, dtype):
    page_size = int(rng.choice([1, 3, 16]))
    pages_per_seq = int(rng.integers(1, 5))
    num_pages = batch * pages_per_seq + int(rng.integers(0, 3))
    k_cache = rng.standard_normal((num_pages, page_size, heads_kv, head_dim)).astype(dtype)
    v_cache = rng.standard_normal((num_pages, page_size, heads_kv, head_dim)).astype(dtype)
    # Pages in shuffled order, some pages unused: the table, not the position, decides.
    page_table = rng.permutation(num_pages)[:batch * pages_per_seq].reshape(batch, pages_per_seq)
    return k_cache, v_cache, page_table.astype(np.int32), pages_per_seq * page_size


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(8))
def test_paged_kvcache_matches_reference(rng, dtype, case):
    batch, seqlen_q = int(rng.integers(1, 4)), int(rng.choice([1, 2, 5]))
    heads_q, heads_kv, head_dim = random_heads(rng)
    k_cache, v_cache, page_table, capacity = random_paged_cache(rng, batch, heads_kv, head_dim, dtype)
    cache_seqlens = rng.integers(0, capacity + 1, size=batch).astype(np.int32)
    q = rng.standard_normal((batch, seqlen_q, heads_q, head_dim)).astype(dtype)
    options = random_options(rng, seqlen_q, capacity)
    print(page_table, cache_seqlens, k_cache.shape, heads_q, options)
    out, lse = hopattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=cache_seqlens, page_table=page_table,
        softmax_scale=options["softmax_scale"], causal=options["causal"],
        window_size=options["window"], softcap=options["softcap"], num_splits=int(rng.integers(0, 4)),
        return_softmax_lse=True)
    expected_out, expected_lse = reference.kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                                   page_table=page_table, **options)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)


@pytest.mark.parametrize("cache_seqlens", ["int", "array"])
def test_dense_kvcache_uses_only_cached_keys(rng, cache_seqlens):
    batch, heads_q, heads_kv, head_dim, capacity = 3, 4, 1, 32, 19
    q = rng.standard_normal((batch, 2, heads_q, head_dim)).astype(np.float32)
    k_cache = rng.standard_normal((batch, capacity, heads_kv, head_dim)).astype(np.float32)
    v_cache = rng.standard_normal((batch, capacity, heads_kv, head_dim)).astype(np.float32)
    used = 11 if cache_seqlens == "int" else rng.integers(1, capacity + 1, size=batch).astype(np.int32)
    # Keys past the used count are poison: reading one would put NaN in the output.
    used_per_batch = np.broadcast_to(used, (batch,))
    for b in range(batch):
        k_cache[b, used_per_batch[b]:] = np.nan
        v_cache[b, used_per_batch[b]:] = np.nan
    out = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=used, causal=True)
    expected = reference.kvcache(q, k_cache, v_cache, cache_seqlens=used_per_batch, causal=True)[0]
    assert_close(out, expected, "float32")


def test_varlen_with_block_table_takes_cu_seqlens_k_as_key_counts(rng):
    batch, heads_kv, head_dim = 2, 2, 16
    k_cache, v_cache, page_table, capacity = random_paged_cache(rng, batch, heads_kv, head_dim, "float32")
    lengths_q = np.array([3, 1])
    lengths_k = rng.integers(1, capacity + 1, size=batch)
    cu_q, cu_k = prefix_sums(lengths_q), prefix_sums(lengths_k)
    q = rng.standard_normal((cu_q[-1], 4, head_dim)).astype(np.float32)
    out = hopattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 3, int(lengths_k.max()),
                                         block_table=page_table, causal=True)
    for b in range(batch):
        rows = slice(cu_q[b], cu_q[b + 1])
        k = reference.gather_pages(k_cache, page_table[b], lengths_k[b])
        v = reference.gather_pages(v_cache, page_table[b], lengths_k[b])
        expected = reference.dense(q[None, rows], k[None], v[None], causal=True)[0][0]
        assert_close(out[rows], expected, "float32")
