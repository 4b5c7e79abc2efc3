"""flash-attention 3's arguments that hopattn takes so that FA3's callers run unchanged, without
implementing them (qv is implemented on host arrays: test_numpy_qv.py; here, its default): qv, sm_margin, scheduler_metadata (and get_scheduler_metadata, which makes one),
and flash_attn_with_kvcache's cu_seqlens_k_new and rotary_seqlens. On NumPy arrays: their
defaults, and the empty schedule get_scheduler_metadata returns, give what a call without them
gives, bit for bit (the cache after an append included); so do cu_seqlens_k_new and
rotary_seqlens of any values in a call without new keys, which flash-attention 3 does not read
either. Other values are refused: test_errors.py, and test_numpy_kvcache_append.py for a cache left
as it was."""

import inspect

import numpy as np
import pytest

import hopattn
from test_numpy_varlen_kvcache import prefix_sums

# What each function takes of them, with its default.
DEFAULTS = dict(qv=None, sm_margin=0, scheduler_metadata=None, cu_seqlens_k_new=None,
                rotary_seqlens=None)
TAKES = {
    "flash_attn_func": ("qv", "sm_margin"),
    "flash_attn_varlen_func": ("qv", "scheduler_metadata", "sm_margin"),
    "flash_attn_with_kvcache": ("qv", "cu_seqlens_k_new", "rotary_seqlens", "scheduler_metadata",
                                "sm_margin"),
    "flash_attn_qkvpacked_func": ("sm_margin",),
    "flash_attn_kvpacked_func": ("sm_margin",),
    "flash_attn_varlen_qkvpacked_func": ("sm_margin",),
    "flash_attn_varlen_kvpacked_func": ("sm_margin",),
}
HEADS_Q, HEADS_KV, HEAD_DIM = 4, 2, 16
LENGTHS_Q, LENGTHS_K = np.array([5, 1, 8]), np.array([9, 14, 8])


def as_bytes(x):
    return np.ascontiguousarray(x).view(np.uint8)


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def make_call(rng, function):
    """`function` on fresh random inputs (GQA, causal, a softcap): call(**extra) returns its outputs
    (out and lse; flash_attn_with_kvcache appends new keys with rotary embedding into its own copy
    of the cache each call, and returns the cache after the append too)."""
    batch, seqlen_q, seqlen_k = 3, 7, 11
    q = normal(rng, batch, seqlen_q, HEADS_Q, HEAD_DIM)
    k, v = (normal(rng, batch, seqlen_k, HEADS_KV, HEAD_DIM) for _ in range(2))
    cu_q, cu_k = prefix_sums(LENGTHS_Q), prefix_sums(LENGTHS_K)
    q_packed = normal(rng, int(cu_q[-1]), HEADS_Q, HEAD_DIM)
    k_packed, v_packed = (normal(rng, int(cu_k[-1]), HEADS_KV, HEAD_DIM) for _ in range(2))
    qkv = normal(rng, batch, seqlen_k, 3, HEADS_KV, HEAD_DIM)
    options = dict(causal=True, softcap=5.0)
    max_q, max_k = int(LENGTHS_Q.max()), int(LENGTHS_K.max())

    def kvcache():
        k_cache, v_cache = (normal(rng, batch, 20, HEADS_KV, HEAD_DIM) for _ in range(2))
        k_new, v_new = (normal(rng, batch, 2, HEADS_KV, HEAD_DIM) for _ in range(2))
        angles = rng.uniform(-np.pi, np.pi, size=(24, HEAD_DIM // 4))
        cache_seqlens = np.array([0, 17, 6], np.int32)

        def call(**extra):
            caches = k_cache.copy(), v_cache.copy()
            out, lse = hopattn.flash_attn_with_kvcache(
                q, *caches, k_new, v_new, cache_seqlens=cache_seqlens, rotary_cos=np.cos(angles),
                rotary_sin=np.sin(angles), return_softmax_lse=True, **options, **extra)
            return (out, lse) + caches

        return call

    calls = {
        "flash_attn_func": lambda **extra: hopattn.flash_attn_func(
            q, k, v, return_attn_probs=True, **options, **extra),
        "flash_attn_varlen_func": lambda **extra: hopattn.flash_attn_varlen_func(
            q_packed, k_packed, v_packed, cu_q, cu_k, max_q, max_k, return_attn_probs=True,
            **options, **extra),
        "flash_attn_with_kvcache": kvcache(),
        "flash_attn_qkvpacked_func": lambda **extra: hopattn.flash_attn_qkvpacked_func(
            qkv, return_attn_probs=True, **options, **extra),
        "flash_attn_kvpacked_func": lambda **extra: hopattn.flash_attn_kvpacked_func(
            q, qkv[:, :, 1:], return_attn_probs=True, **options, **extra),
        "flash_attn_varlen_qkvpacked_func": lambda **extra: hopattn.flash_attn_varlen_qkvpacked_func(
            np.stack([k_packed, k_packed, v_packed], axis=1), cu_k, max_k, return_attn_probs=True,
            **options, **extra),
        "flash_attn_varlen_kvpacked_func": lambda **extra: hopattn.flash_attn_varlen_kvpacked_func(
            q_packed, np.stack([k_packed, v_packed], axis=1), cu_q, cu_k, max_q, max_k,
            return_attn_probs=True, **options, **extra),
    }
    return calls[function]


def assert_same_bits(actual, expected, what):
    assert len(actual) == len(expected)
    for i, (a, b) in enumerate(zip(actual, expected)):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: output {i}"
        assert np.array_equal(as_bytes(a), as_bytes(b)), f"{what}: output {i} differs"


@pytest.mark.parametrize("function", TAKES)
def test_defaults_run_as_a_call_without_them(rng, function):
    call = make_call(rng, function)
    expected = call()
    assert not np.isnan(expected[0]).any()
    for name in TAKES[function]:
        assert_same_bits(call(**{name: DEFAULTS[name]}), expected, f"{name}={DEFAULTS[name]!r}")
    given = {name: DEFAULTS[name] for name in TAKES[function]}
    assert_same_bits(call(**given), expected, "all defaults")
    assert_same_bits(call(sm_margin=np.int64(0)), expected, "sm_margin=np.int64(0)")


def test_new_key_lengths_without_new_keys_are_not_read(rng):
    # SGLang's FA3 backend: variable-length queries over a paged cache the engine wrote itself,
    # cache_seqlens the keys in use, cu_seqlens_k_new their prefix sums, no k or v. flash-attention
    # 3 reads cu_seqlens_k_new and rotary_seqlens only when it appends new keys.
    batch, page_size, pages_per_seq, num_pages = 3, 4, 6, 23
    k_cache, v_cache = (normal(rng, num_pages, page_size, HEADS_KV, HEAD_DIM) for _ in range(2))
    page_table = rng.permutation(num_pages)[:batch * pages_per_seq].reshape(batch, pages_per_seq)
    cache_seqlens = np.array([9, 24, 13], np.int32)
    cu_q = prefix_sums(np.array([2, 1, 5]))
    q = normal(rng, int(cu_q[-1]), HEADS_Q, HEAD_DIM)

    def call(**extra):
        return hopattn.flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=cache_seqlens, page_table=page_table.astype(np.int32),
            cu_seqlens_q=cu_q, max_seqlen_q=5, causal=True, softcap=5.0, return_softmax_lse=True,
            **extra)

    expected = call()
    assert not np.isnan(expected[0]).any() and not np.isnan(expected[1]).any()
    assert_same_bits(call(cu_seqlens_k_new=prefix_sums(cache_seqlens)), expected, "SGLang's call")
    unread = rng.integers(-2**31, 2**31, size=batch + 1).astype(np.int32)
    assert_same_bits(call(cu_seqlens_k_new=unread, rotary_seqlens=unread[:batch]), expected,
                     "cu_seqlens_k_new and rotary_seqlens of random values")


def test_defaults_are_flash_attention_3_s():
    for function, names in TAKES.items():
        parameters = inspect.signature(getattr(hopattn, function)).parameters
        for name in names:
            assert parameters[name].default == DEFAULTS[name], f"{function}: {name}"


# flash-attention 3's get_scheduler_metadata(...) parameters, in its order.
FA3_SCHEDULER_PARAMETERS = (
    "batch_size", "max_seqlen_q", "max_seqlen_k", "num_heads_q", "num_heads_kv", "headdim",
    "cache_seqlens", "qkv_dtype", "headdim_v", "cu_seqlens_q", "cu_seqlens_k_new", "cache_leftpad",
    "page_size", "max_seqlen_k_new", "causal", "window_size", "attention_chunk", "has_softcap",
    "num_splits", "pack_gqa", "sm_margin")


def test_get_scheduler_metadata_takes_flash_attention_3_s_arguments():
    parameters = inspect.signature(hopattn.get_scheduler_metadata).parameters
    assert tuple(parameters) == FA3_SCHEDULER_PARAMETERS
    assert "get_scheduler_metadata" in hopattn.__all__
    required = [name for name, p in parameters.items() if p.default is inspect.Parameter.empty]
    assert required == list(FA3_SCHEDULER_PARAMETERS[:7])


def assert_empty_int32(schedule, library=np.ndarray):
    assert isinstance(schedule, library)
    assert schedule.dtype == np.int32 and schedule.shape == (0,)


@pytest.mark.parametrize("cache_seqlens", ["array", "int", "None"])
def test_get_scheduler_metadata_returns_an_empty_int32_array(cache_seqlens):
    seqlens = {"array": np.array([4, 0, 31], np.int32), "int": 31, "None": None}[cache_seqlens]
    # Every argument given, by keyword, as an inference engine planning a decoding step would.
    schedule = hopattn.get_scheduler_metadata(
        batch_size=3, max_seqlen_q=1, max_seqlen_k=32, num_heads_q=32, num_heads_kv=8, headdim=128,
        cache_seqlens=seqlens, qkv_dtype="bfloat16", headdim_v=128,
        cu_seqlens_q=np.array([0, 1, 2, 3], np.int32), cu_seqlens_k_new=None,
        cache_leftpad=np.zeros(3, np.int32), page_size=16, max_seqlen_k_new=1, causal=True,
        window_size=(128, 0), attention_chunk=0, has_softcap=True, num_splits=0, pack_gqa=True,
        sm_margin=0)
    assert_empty_int32(schedule)
    # And positionally, the required arguments only.
    assert_empty_int32(hopattn.get_scheduler_metadata(3, 1, 32, 32, 8, 128, seqlens))


@pytest.mark.parametrize("function", ["flash_attn_varlen_func", "flash_attn_with_kvcache"])
def test_get_scheduler_metadata_s_result_runs_as_none(rng, function):
    call = make_call(rng, function)
    expected = call()
    batch = len(LENGTHS_Q)
    schedule = hopattn.get_scheduler_metadata(batch, 7, 22, HEADS_Q, HEADS_KV, HEAD_DIM,
                                              np.array([0, 17, 6], np.int32), causal=True,
                                              has_softcap=True, max_seqlen_k_new=2)
    assert_same_bits(call(scheduler_metadata=schedule), expected, "scheduler_metadata")
    # It carries nothing, so an empty int32 array of any origin serves alike.
    assert_same_bits(call(scheduler_metadata=np.empty(0, np.int32)), expected, "np.empty")


def test_get_scheduler_metadata_follows_a_jax_cache_seqlens():
    jax = pytest.importorskip("jax")
    seqlens = jax.device_put(np.array([3, 9], np.int32), jax.devices("cpu")[0])
    schedule = hopattn.get_scheduler_metadata(2, 1, 9, 4, 2, 16, seqlens)
    assert isinstance(schedule, jax.Array) and schedule.dtype == np.int32
    assert schedule.shape == (0,) and schedule.devices() == seqlens.devices()
