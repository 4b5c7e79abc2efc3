"""attention_chunk (flash-attention 3's chunked attention, Llama 4's local layers) on NumPy arrays
(CPU reference backend) against the float64 oracle: the keys are cut into chunks [0, c), [c, 2c),
... and query i sees only the chunk of its diagonal key i + seqlen_k - seqlen_q, on top of causal
and the window. Every output is poisoned (NaN) before the call, so each element must be written.
Variable-length batches with chunks: test_numpy_varlen_kvcache.py's test_varlen_matches_reference."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close
from test_numpy_dense import DTYPES, random_inputs, random_options
from test_numpy_kvcache_append import build_case, core_calls, run_and_check  # noqa: F401
from test_numpy_varlen_kvcache import random_paged_cache

# seqlen_q 37 over seqlen_k 101: chunks that cut the keys in uneven pieces (16, 7), one key each
# (1), and one longer than all the keys (200: a single chunk).
CHUNKS = [16, 7, 1, 200]
MASKS = {"none": dict(causal=False, window=(-1, -1)), "causal": dict(causal=True, window=(-1, -1)),
         "window": dict(causal=False, window=(9, 4)), "causal window": dict(causal=True, window=(20, -1))}


def options_of(mask, attention_chunk, softcap=0.0, softmax_scale=None):
    """reference.dense's keyword options (also read by flash_attn below)."""
    return dict(MASKS[mask], attention_chunk=attention_chunk, softcap=softcap,
                softmax_scale=softmax_scale)


def flash_attn(q, k, v, options, **kwargs):
    return hopattn.flash_attn_func(q, k, v, softmax_scale=options["softmax_scale"],
                                   causal=options["causal"], window_size=options["window"],
                                   attention_chunk=options["attention_chunk"],
                                   softcap=options["softcap"], **kwargs)


def check_dense(q, k, v, options, dtype):
    """flash_attn_func into a poisoned out, against the oracle; returns (out, lse)."""
    out = np.full(q.shape, np.nan, dtype=q.dtype)
    result, lse = flash_attn(q, k, v, options, return_attn_probs=True, out=out)
    assert result is out
    expected_out, expected_lse = reference.dense(q, k, v, **options)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)
    return out, lse


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_dense_gqa_matches_reference(rng, chunk, mask, dtype):
    q, k, v = random_inputs(rng, 2, 37, 101, 4, 2, int(rng.choice([8, 33, 64])), dtype)
    options = options_of(mask, chunk, softcap=float(rng.choice([0.0, 5.0])))
    check_dense(q, k, v, options, dtype)
    if chunk < 37:  # the chunks must change something, or this test would not test them
        unchunked = reference.dense(q, k, v, **dict(options, attention_chunk=0))[0]
        assert not np.allclose(reference.dense(q, k, v, **options)[0], unchunked)


@pytest.mark.parametrize("mask", ["none", "causal", "window"])
@pytest.mark.parametrize("chunk", [4, 11, 50])
def test_rows_whose_diagonal_lies_before_key_0_see_no_key(rng, chunk, mask):
    # seqlen_q 37 > seqlen_k 11: rows 0..25 have diagonal i - 26 < 0, whose chunk ends at or before
    # key 0, whatever the chunk's length (50 is longer than all the keys): out 0, lse -inf.
    q, k, v = random_inputs(rng, 2, 37, 11, 2, 1, 16, "float32")
    out, lse = check_dense(q, k, v, options_of(mask, chunk), "float32")
    assert (out[:, :26] == 0).all() and np.isneginf(lse[:, :, :26]).all()
    assert np.isfinite(lse[:, :, 26:]).all()  # from the row on key 0 on, each sees key 0 at least


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(10))
def test_random_shapes_match_reference(rng, dtype, case):
    heads_kv = int(rng.integers(1, 4))
    seqlen_q, seqlen_k = int(rng.choice([1, rng.integers(2, 70)])), int(rng.integers(1, 90))
    q, k, v = random_inputs(rng, int(rng.integers(1, 4)), seqlen_q, seqlen_k,
                            heads_kv * int(rng.choice([1, 2, 4])), heads_kv,
                            int(rng.choice([1, 8, 33, 64])), dtype)
    options = dict(random_options(rng, seqlen_q, seqlen_k),
                   attention_chunk=int(rng.integers(1, seqlen_k + 8)))
    print(q.shape, k.shape, options)
    check_dense(q, k, v, options, dtype)


@pytest.mark.parametrize("layout", ["dense", "paged"])
@pytest.mark.parametrize("case", range(4))
def test_kvcache_aligns_chunks_to_the_keys_in_use(rng, layout, case):
    # A decoding step (and a few speculative queries) over caches filled to cache_seqlens: the
    # diagonal is the last key in use, so the chunks depend on each sequence's fill. Keys past it
    # are NaN: reading one would show.
    batch, seqlen_q, heads_kv = 3, int(rng.choice([1, 3])), 2
    if layout == "paged":
        k_cache, v_cache, page_table, capacity = random_paged_cache(rng, batch, heads_kv, 16,
                                                                    "float32")
    else:
        capacity, page_table = 45, None
        k_cache, v_cache = (rng.standard_normal((batch, capacity, heads_kv, 16)).astype(np.float32)
                            for _ in range(2))
    cache_seqlens = rng.integers(0, capacity + 1, size=batch).astype(np.int32)
    if page_table is None:
        for b in range(batch):
            k_cache[b, cache_seqlens[b]:] = np.nan
            v_cache[b, cache_seqlens[b]:] = np.nan
    q = rng.standard_normal((batch, seqlen_q, 6, 16)).astype(np.float32)
    options = dict(causal=bool(rng.integers(2)), window=(-1, -1), softcap=0.0, softmax_scale=None,
                   attention_chunk=int(rng.choice([1, 4, 13])))
    print(cache_seqlens, capacity, options)
    out = np.full(q.shape, np.nan, np.float32)
    _, lse = hopattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=cache_seqlens, page_table=page_table,
        causal=options["causal"], attention_chunk=options["attention_chunk"], out=out,
        return_softmax_lse=True)
    expected_out, expected_lse = reference.kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                                   page_table=page_table, **options)
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)


@pytest.mark.parametrize("variant", ["rotary", "rotary causal", "cache_batch_idx", "cache_leftpad",
                                     "cache_leftpad window"])
def test_kvcache_append_with_chunks(rng, core_calls, variant):
    # New keys appended, then attention over the grown cache (run_and_check: the cache byte for byte,
    # q's rotation, out and lse). An attention_chunk is a local mask to flash-attention 3: q is
    # rotated at cache_seqlens + i, as with causal or a window. With cache_leftpad the keys in use,
    # and so the chunks, start at cache_leftpad[b] (the oracle runs over those keys alone).
    leftpad, batch_idx = variant.startswith("cache_leftpad"), variant == "cache_batch_idx"
    c = build_case(rng, "float32", batch=3, seqlen_q=4, seqlen_new=4, heads_q=4, heads_kv=2,
                   head_dim=16, seqlen_cache=29, batch_cache=5 if batch_idx else None,
                   rotary_dim=16, batch_idx=batch_idx, leftpad=leftpad)
    if leftpad:
        c.cache_leftpad[0] = max(c.cache_leftpad[0], min(3, c.cache_seqlens[0]))  # padded too
    options = dict(causal=variant.endswith("causal"),
                   window=(6, 2) if variant.endswith("window") else (-1, -1), softcap=0.0,
                   softmax_scale=None, attention_chunk=int(rng.choice([3, 5])))
    print(c.cache_seqlens, c.cache_leftpad, options)
    run_and_check(c, options, core_calls)


def test_packed_variants_pass_the_chunk_on(rng):
    qkv = rng.standard_normal((2, 23, 3, 2, 8)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    expected = hopattn.flash_attn_func(q, k, v, causal=True, attention_chunk=6)
    assert_close(expected, reference.dense(q, k, v, causal=True, attention_chunk=6)[0], "float32")
    np.testing.assert_array_equal(
        hopattn.flash_attn_qkvpacked_func(qkv, causal=True, attention_chunk=6), expected)
    np.testing.assert_array_equal(
        hopattn.flash_attn_kvpacked_func(q, qkv[:, :, 1:], causal=True, attention_chunk=6), expected)

    cu = np.array([0, 23, 46], np.int32)
    packed = qkv.reshape(46, 3, 2, 8)
    flat = expected.reshape(46, 2, 8)
    np.testing.assert_array_equal(
        hopattn.flash_attn_varlen_qkvpacked_func(packed, cu, 23, causal=True, attention_chunk=6),
        flat)
    np.testing.assert_array_equal(
        hopattn.flash_attn_varlen_kvpacked_func(packed[:, 0], packed[:, 1:], cu, cu, 23, 23,
                                                causal=True, attention_chunk=6),
        flat)


def test_chunk_0_is_no_chunk_and_any_int_is_taken(rng):
    q, k, v = random_inputs(rng, 2, 9, 30, 4, 2, 16, "float32")
    plain = hopattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    for a, b in zip(plain, hopattn.flash_attn_func(q, k, v, causal=True, attention_chunk=0,
                                                   return_attn_probs=True)):
        np.testing.assert_array_equal(a, b)
    chunked = hopattn.flash_attn_func(q, k, v, attention_chunk=8)
    np.testing.assert_array_equal(hopattn.flash_attn_func(q, k, v, attention_chunk=np.int32(8)),
                                  chunked)
    # Any chunk at least seqlen_k long is one chunk; values past the C++ int are clamped to one.
    np.testing.assert_array_equal(hopattn.flash_attn_func(q, k, v, attention_chunk=2**40),
                                  hopattn.flash_attn_func(q, k, v, attention_chunk=30))

    cu_q, cu_k = np.array([0, 4, 9], np.int32), np.array([0, 12, 30], np.int32)
    rows_q, rows_k = q.reshape(18, 4, 16)[:9], k.reshape(60, 2, 16)[:30]
    values = v.reshape(60, 2, 16)[:30]
    np.testing.assert_array_equal(
        hopattn.flash_attn_varlen_func(rows_q, rows_k, values, cu_q, cu_k, 5, 18),
        hopattn.flash_attn_varlen_func(rows_q, rows_k, values, cu_q, cu_k, 5, 18,
                                       attention_chunk=0))
    seqlens = np.array([17, 30], np.int32)
    np.testing.assert_array_equal(
        hopattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True),
        hopattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True,
                                        attention_chunk=0))
