"""FlashMLA's interface (hopattn.flash_mla: flash_mla_with_kvcache, get_mla_metadata) on NumPy arrays
(CPU reference backend): q and the cache hold the latent columns, which are also v, then the rotary
ones; the scores are q . k over all of them. Checked against the float64 oracle of plain attention
with q over k_cache and v = k_cache's latent columns, paged and dense, with and without causal."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close

HEAD_DIM_V, ROPE = 32, 16
HEAD_DIM = HEAD_DIM_V + ROPE


def paged_case(rng, dtype, *, batch=3, seqlen_q=1, heads_q=8, heads_k=1, page=16, pages_per_seq=5):
    """q, a paged cache whose pages are shuffled over the pool, its block_table and cache_seqlens
    (one sequence without keys, one ending inside a page, one whole); the pool's other rows NaN."""
    pool = batch * pages_per_seq + 2
    k_cache = np.full((pool, page, heads_k, HEAD_DIM), np.nan, dtype=dtype)
    block_table = rng.permutation(pool)[:batch * pages_per_seq].reshape(batch, pages_per_seq).astype(np.int32)
    cache_seqlens = np.array([0, 37, page * pages_per_seq][:batch], np.int32)
    for b in range(batch):
        for j in range(int(cache_seqlens[b])):
            k_cache[block_table[b, j // page], j % page] = rng.standard_normal((heads_k, HEAD_DIM))
    q = (rng.standard_normal((batch, seqlen_q, heads_q, HEAD_DIM)) * 2).astype(dtype)
    return q, k_cache, block_table, cache_seqlens


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("seqlen_q, causal", [(1, False), (2, True), (3, False)],
                         ids=["decode", "mtp_causal", "three_rows"])
def test_paged_decoding_matches_plain_attention(rng, dtype, seqlen_q, causal):
    q, k_cache, block_table, cache_seqlens = paged_case(rng, dtype, seqlen_q=seqlen_q)
    schedule, num_splits = hopattn.get_mla_metadata(cache_seqlens, q.shape[2], k_cache.shape[2])
    out, lse = hopattn.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, HEAD_DIM_V,
                                              schedule, num_splits, causal=causal)
    assert out.shape == q.shape[:3] + (HEAD_DIM_V,) and out.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == np.float32
    expected_out, expected_lse = reference.kvcache(
        q, k_cache, k_cache[..., :HEAD_DIM_V], cache_seqlens=cache_seqlens, page_table=block_table,
        causal=causal, softmax_scale=HEAD_DIM ** -0.5)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)
    assert np.all(out[0] == 0) and np.all(lse[0] == -np.inf)  # the sequence without keys


def test_dense_cache_and_softmax_scale(rng):
    # block_table None reads k_cache as (batch, seqlen_k, heads_k, head_dim); GQA of 4 query heads per
    # latent head, two latent heads.
    q = rng.standard_normal((2, 1, 8, HEAD_DIM)).astype(np.float32)
    k_cache = rng.standard_normal((2, 29, 2, HEAD_DIM)).astype(np.float32)
    cache_seqlens = np.array([29, 11], np.int32)
    out, lse = hopattn.flash_mla_with_kvcache(q, k_cache, None, cache_seqlens, HEAD_DIM_V, None,
                                              softmax_scale=0.3)
    expected_out, expected_lse = reference.kvcache(q, k_cache, k_cache[..., :HEAD_DIM_V],
                                                   cache_seqlens=cache_seqlens, softmax_scale=0.3)
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)


def test_get_mla_metadata_takes_either_signature():
    old_style = hopattn.get_mla_metadata(np.array([5], np.int32), 16, 1)
    new_style = hopattn.get_mla_metadata()
    for schedule, num_splits in (old_style, new_style):
        assert isinstance(schedule, hopattn.flash_mla.MlaSchedule) and num_splits is None


@pytest.mark.parametrize("name, value", [
    ("is_fp8_kvcache", True), ("indices", np.zeros((1, 1, 4), np.int32)),
    ("attn_sink", np.zeros(8, np.float32)), ("extra_k_cache", np.zeros((1, 16, 1, HEAD_DIM))),
    ("extra_indices_in_kvcache", np.zeros((1, 1, 4), np.int32)),
    ("topk_length", np.zeros(1, np.int32)), ("extra_topk_length", np.zeros(1, np.int32))])
def test_what_flashmla_has_and_hopattn_lacks_is_not_implemented(rng, name, value):
    q, k_cache, block_table, cache_seqlens = paged_case(rng, "float32", batch=1)
    with pytest.raises(NotImplementedError, match=name):
        hopattn.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, HEAD_DIM_V, None,
                                       **{name: value})


@pytest.mark.parametrize("case, error, message", [
    ("head_dim_v 0", ValueError, "head_dim_v"), ("head_dim_v = head_dim", ValueError, "head_dim_v"),
    ("head_dim_v float", TypeError, "head_dim_v"), ("head_dim_v bool", TypeError, "head_dim_v"),
    ("k_cache of another head dim", ValueError, "k_cache"), ("q of rank 3", ValueError, "q")])
def test_malformed_calls_name_the_argument(rng, case, error, message):
    q, k_cache, block_table, cache_seqlens = paged_case(rng, "float32", batch=1)
    head_dim_v = {"head_dim_v 0": 0, "head_dim_v = head_dim": HEAD_DIM, "head_dim_v float": 32.0,
                  "head_dim_v bool": True}.get(case, HEAD_DIM_V)
    if case == "k_cache of another head dim":
        k_cache = k_cache[..., :-8]
    if case == "q of rank 3":
        q = q[:, 0]
    with pytest.raises(error, match=message):
        hopattn.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, None)
