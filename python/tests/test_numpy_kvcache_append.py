"""flash_attn_with_kvcache's new keys (k, v written into the cache in place), rotary embedding,
cache_batch_idx and cache_leftpad on NumPy arrays, against float64 references built here from
flash-attention's semantics.

Every cache position that no sequence uses is NaN: a read of one would show in the output, and
positions the append must write start as NaN too. Each test checks the cache after the call (the
new rows, every other byte untouched), the q that reached the attention (rotated at the positions
flash-attention's rule gives, against a float64 rotary written from its definition), and the
output and LSE against float64 attention over the grown cache."""

from types import SimpleNamespace

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close
from test_numpy_dense import random_options

try:
    import ml_dtypes
except ImportError:  # bfloat16 needs ml_dtypes (python/run_tests.sh installs it)
    ml_dtypes = None

DTYPES = ["float32", "float16",
          pytest.param("bfloat16", marks=pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes"))]


def np_dtype(name):
    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def as_bytes(x):
    return np.ascontiguousarray(x).view(np.uint8)


@pytest.fixture
def core_calls(monkeypatch):
    """(q, keyword arguments) of every hopattn._core.forward call, q copied (the calls still run)."""
    seen = []
    forward = hopattn._core.forward

    def recording(q, k, v, **kwargs):
        seen.append((np.array(q, copy=True), dict(kwargs, k=k, v=v)))
        return forward(q, k, v, **kwargs)

    monkeypatch.setattr(hopattn._core, "forward", recording)
    return seen


# ---- float64 references from the definitions -------------------------------------------------

def rotary_reference(x, cos, sin, positions, interleaved):
    """x (b, s, h, d) with each pair of rotary features, as the complex number re + i im, turned by
    cos + i sin at its row's position (positions (b, s)); GPT-J pairs (2j, 2j + 1), GPT-NeoX pairs
    (j, j + rotary_dim / 2). float64, not rounded."""
    x = np.asarray(x, dtype=np.float64).copy()
    half = cos.shape[1]
    re = 2 * np.arange(half) if interleaved else np.arange(half)
    im = re + 1 if interleaved else re + half
    turn = np.asarray(cos, np.float64)[positions] + 1j * np.asarray(sin, np.float64)[positions]
    z = (x[..., re] + 1j * x[..., im]) * turn[:, :, None, :]
    x[..., re], x[..., im] = z.real, z.imag
    return x


def cache_index(case, b, positions):
    """Where positions of sequence b lie in the cache: an index into its first two axes."""
    positions = np.asarray(positions, dtype=np.int64)
    if case.page_table is not None:
        page_size = case.k_cache.shape[1]
        return case.page_table[b, positions // page_size], positions % page_size
    row = b if case.cache_batch_idx is None else case.cache_batch_idx[b]
    return np.full_like(positions, row), positions


def query_positions(case, local):
    """flash-attention's rule: with causal, a window or an attention_chunk query i is at
    cache_seqlens + i, else every query at cache_seqlens."""
    seqlen_q = case.q.shape[1]
    steps = np.arange(seqlen_q) if local else np.zeros(seqlen_q, np.int64)
    return case.cache_seqlens[:, None] + steps[None, :]


# ---- cases --------------------------------------------------------------------------------------

def build_case(rng, dtype, *, batch, seqlen_q, seqlen_new, heads_q, heads_kv, head_dim,
               seqlen_cache=None, batch_cache=None, page_size=None, pages_per_seq=None,
               rotary_dim=0, batch_idx=False, leftpad=False, same_seqlens=False):
    dt = np_dtype(dtype)

    def normal(*shape):
        return rng.standard_normal(shape).astype(dt)

    c = SimpleNamespace(dtype=dtype, page_table=None, cache_batch_idx=None, cache_leftpad=None,
                        rotary_cos=None, rotary_sin=None)
    if page_size:
        num_pages = batch * pages_per_seq + int(rng.integers(1, 4))  # some pages no one uses
        table = rng.permutation(num_pages)[:batch * pages_per_seq]  # shuffled pages
        c.page_table = table.reshape(batch, pages_per_seq).astype(np.int32)
        slots, rows, capacity = num_pages, page_size, pages_per_seq * page_size
    else:
        slots, rows, capacity = batch_cache or batch, seqlen_cache, seqlen_cache
    c.capacity = capacity
    c.k_cache, c.v_cache = normal(slots, rows, heads_kv, head_dim), normal(slots, rows, heads_kv, head_dim)
    if batch_idx:
        c.cache_batch_idx = rng.permutation(slots)[:batch].astype(np.int32)
    size = 1 if same_seqlens else batch
    c.cache_seqlens = np.broadcast_to(rng.integers(0, capacity - seqlen_new + 1, size=size),
                                      (batch,)).astype(np.int32)
    if leftpad:
        c.cache_leftpad = rng.integers(0, c.cache_seqlens + 1).astype(np.int32)
    c.q = normal(batch, seqlen_q, heads_q, head_dim)
    c.k, c.v = normal(batch, seqlen_new, heads_kv, head_dim), normal(batch, seqlen_new, heads_kv, head_dim)
    if rotary_dim:
        # Random angles per position and feature pair: a row rotated at a wrong position shows.
        # Queries run to cache_seqlens + seqlen_q - 1, past the cache when seqlen_q > seqlen_new.
        seqlen_ro = max(capacity, int(c.cache_seqlens.max()) + seqlen_q) + int(rng.integers(0, 3))
        angles = rng.uniform(-np.pi, np.pi, size=(seqlen_ro, rotary_dim // 2))
        c.rotary_cos, c.rotary_sin = np.cos(angles).astype(dt), np.sin(angles).astype(dt)
    # Poison: NaN wherever no sequence has a key in use, including where the new rows go.
    live = np.zeros((slots, rows), dtype=bool)
    start = np.zeros(batch, np.int64) if c.cache_leftpad is None else c.cache_leftpad
    for b in range(batch):
        live[cache_index(c, b, np.arange(start[b], c.cache_seqlens[b]))] = True
    c.k_cache[~live] = np.nan
    c.v_cache[~live] = np.nan
    return c


def random_case(rng, dtype, layout):
    heads_kv = int(rng.integers(1, 3))
    head_dim = int(rng.choice([8, 16, 40, 64]))
    shape = dict(batch=int(rng.integers(1, 4)), seqlen_q=int(rng.choice([1, 2, 5])),
                 seqlen_new=int(rng.choice([1, 3, 5])), heads_kv=heads_kv,
                 heads_q=heads_kv * int(rng.choice([1, 3])), head_dim=head_dim,
                 rotary_dim=int(rng.choice([0, 2, head_dim // 2, head_dim])) // 2 * 2)
    if layout == "paged":
        shape.update(page_size=int(rng.choice([1, 3, 16])), pages_per_seq=int(rng.integers(2, 5)))
        shape["pages_per_seq"] = max(shape["pages_per_seq"], -(-shape["seqlen_new"] // shape["page_size"]))
    else:
        shape.update(seqlen_cache=int(rng.choice([7, 19, 32, 48])),
                     batch_idx=bool(rng.integers(2)), leftpad=bool(rng.integers(2)))
        shape["batch_cache"] = shape["batch"] + (int(rng.integers(0, 3)) if shape["batch_idx"] else 0)
    shape["same_seqlens"] = bool(rng.integers(2))
    return shape


def run(case, options, *, interleaved=False, int_seqlens=False, **extra):
    seqlens = int(case.cache_seqlens[0]) if int_seqlens else case.cache_seqlens
    return hopattn.flash_attn_with_kvcache(
        case.q, case.k_cache, case.v_cache, case.k, case.v, cache_seqlens=seqlens,
        page_table=case.page_table, cache_batch_idx=case.cache_batch_idx,
        cache_leftpad=case.cache_leftpad, rotary_cos=case.rotary_cos, rotary_sin=case.rotary_sin,
        rotary_interleaved=interleaved, causal=options["causal"], window_size=options["window"],
        attention_chunk=options.get("attention_chunk", 0), softcap=options["softcap"],
        softmax_scale=options["softmax_scale"], return_softmax_lse=True, **extra)


def run_and_check(case, options, calls, *, interleaved=False, int_seqlens=False, out=None):
    before = SimpleNamespace(**{name: np.array(getattr(case, name), copy=True)
                                for name in ("q", "k", "v", "k_cache", "v_cache", "cache_seqlens")})
    result, lse = run(case, options, interleaved=interleaved, int_seqlens=int_seqlens, out=out)
    assert out is None or result is out
    out = result
    check_inputs_unchanged(case, before)
    check_cache(case, before, interleaved)
    q_used = calls[-1][0].reshape(case.q.shape)  # dense q goes to the core as rows with leftpad
    local = (options["causal"] or tuple(options["window"]) != (-1, -1)
             or options.get("attention_chunk", 0) > 0)
    check_rotated_q(case, q_used, local, interleaved)
    check_attention(case, q_used, out, lse, options)
    return out, lse, calls[-1][1]


def check_inputs_unchanged(case, before):
    for name in ("q", "k", "v", "cache_seqlens"):
        assert np.array_equal(as_bytes(getattr(case, name)), as_bytes(getattr(before, name))), \
            f"{name} was modified"


def check_cache(case, before, interleaved):
    """The new rows at cache_seqlens[b] + i (k rotated there), every other byte as it was."""
    batch, seqlen_new = case.k.shape[:2]
    positions = case.cache_seqlens[:, None] + np.arange(seqlen_new)[None, :]
    new_k = case.k.astype(np.float64) if case.rotary_cos is None else \
        rotary_reference(case.k, case.rotary_cos, case.rotary_sin, positions, interleaved)
    written = np.zeros(case.k_cache.shape[:2], dtype=bool)
    for b in range(batch):
        where = cache_index(case, b, positions[b])
        written[where] = True
        if case.rotary_cos is None:
            assert np.array_equal(as_bytes(case.k_cache[where]), as_bytes(case.k[b])), f"k_cache, sequence {b}"
        else:
            assert_close(case.k_cache[where], new_k[b], case.dtype, what=f"k_cache rows of sequence {b}")
        assert np.array_equal(as_bytes(case.v_cache[where]), as_bytes(case.v[b])), f"v_cache, sequence {b}"
    for name in ("k_cache", "v_cache"):
        after, was = getattr(case, name)[~written], getattr(before, name)[~written]
        assert np.array_equal(as_bytes(after), as_bytes(was)), f"{name}: rows other than the new ones changed"


def check_rotated_q(case, q_used, local, interleaved):
    if case.rotary_cos is None:
        assert np.array_equal(as_bytes(q_used), as_bytes(case.q)), "q reached the attention changed"
        return
    expected = rotary_reference(case.q, case.rotary_cos, case.rotary_sin,
                                query_positions(case, local), interleaved)
    assert_close(q_used, expected, case.dtype, what="rotated q")


def check_attention(case, q_used, out, lse, options):
    """out and lse against float64 attention of q_used over keys [cache_leftpad, cache_seqlens +
    seqlen_new) of the cache as it is after the call."""
    batch, seqlen_new = case.k.shape[:2]
    expected_out = np.zeros(case.q.shape)
    expected_lse = np.zeros((batch, case.q.shape[2], case.q.shape[1]))
    for b in range(batch):
        start = 0 if case.cache_leftpad is None else case.cache_leftpad[b]
        where = cache_index(case, b, np.arange(start, case.cache_seqlens[b] + seqlen_new))
        keys, values = case.k_cache[where], case.v_cache[where]
        o, l = reference.dense(q_used[b:b + 1], keys[None], values[None], **options)
        expected_out[b], expected_lse[b] = o[0], l[0]
    assert out.shape == case.q.shape and out.dtype == case.q.dtype
    assert_close(out, expected_out, case.dtype)
    assert_lse_close(lse, expected_lse)


# ---- tests ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["dense", "paged"])
@pytest.mark.parametrize("case", range(8))
def test_append_matches_reference(rng, core_calls, dtype, layout, case):
    shape = random_case(rng, dtype, layout)
    c = build_case(rng, dtype, **shape)
    options = random_options(rng, c.q.shape[1], c.capacity)
    interleaved = bool(rng.integers(2))
    int_seqlens = shape["same_seqlens"] and bool(rng.integers(2))
    print(shape, options, interleaved, int_seqlens, c.cache_seqlens, c.cache_batch_idx, c.cache_leftpad)
    run_and_check(c, options, core_calls, interleaved=interleaved, int_seqlens=int_seqlens)


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary", ["full", "part", "two"])
@pytest.mark.parametrize("mask", ["none", "causal", "window"])
def test_rotary_positions_follow_flash_attention(rng, core_calls, interleaved, rotary, mask):
    # Queries at cache_seqlens + i with a causal mask or a window, all at cache_seqlens otherwise;
    # rotary_dim below head_dim leaves the other features as they were.
    head_dim = 40
    rotary_dim = {"full": head_dim, "part": 24, "two": 2}[rotary]
    c = build_case(rng, "float32", batch=3, seqlen_q=4, seqlen_new=4, heads_q=4, heads_kv=2,
                   head_dim=head_dim, seqlen_cache=23, rotary_dim=rotary_dim)
    options = dict(causal=mask == "causal", window=(5, 0) if mask == "window" else (-1, -1),
                   softcap=0.0, softmax_scale=None)
    run_and_check(c, options, core_calls, interleaved=interleaved)
    q_used = core_calls[-1][0]
    assert np.array_equal(as_bytes(q_used[..., rotary_dim:]), as_bytes(c.q[..., rotary_dim:]))


@pytest.mark.parametrize("seqlen_cache, head_dim, route",
                         [(32, 16, "rows as pages"), (48, 16, "16-key pages"),
                          (40, 16, "rows as pages of any size"), (40, 136, "gathered"),
                          (32, 16, "sliced, gathered")])
def test_cache_batch_idx_reads_the_indexed_rows(rng, core_calls, seqlen_cache, head_dim, route):
    # Sequence b appends to and reads cache row cache_batch_idx[b]. The rows go to the core as
    # pages (seqlen_cache with a power-of-two divisor >= 16, rows back to back; a row a page of any
    # size where the GPU kernels copy K/V: bf16/fp16 at head dims up to 128) or as a gathered copy.
    c = build_case(rng, "float16", batch=3, seqlen_q=2, seqlen_new=3, heads_q=2, heads_kv=1,
                   head_dim=head_dim, seqlen_cache=seqlen_cache, batch_cache=5, rotary_dim=16,
                   batch_idx=True)
    if route.startswith("sliced"):  # rows not back to back: no paged view exists
        for name in ("k_cache", "v_cache"):
            wider = np.full((5, seqlen_cache + 3, 1, head_dim), np.nan, np.float16)
            wider[:, :seqlen_cache] = getattr(c, name)
            setattr(c, name, wider[:, :seqlen_cache])
    options = dict(causal=True, window=(-1, -1), softcap=0.0, softmax_scale=None)
    _, _, passed = run_and_check(c, options, core_calls)
    if route.startswith("rows as pages"):
        assert passed["page_table"].shape == (3, 1) and passed["k"].shape[1] == seqlen_cache
    elif route == "16-key pages":
        assert passed["page_table"].shape == (3, 3) and passed["k"].shape[1] == 16
    else:
        assert passed["page_table"] is None and passed["k"].shape == (3, seqlen_cache, 1, head_dim)


@pytest.mark.parametrize("variant", ["plain", "with cache_batch_idx", "sliced cache",
                                     "strided out", "window"])
def test_cache_leftpad_starts_each_sequence_at_its_pad(rng, core_calls, variant):
    c = build_case(rng, "float32", batch=4, seqlen_q=3, seqlen_new=2, heads_q=3, heads_kv=1,
                   head_dim=24, seqlen_cache=21, batch_cache=6 if variant == "with cache_batch_idx" else None,
                   rotary_dim=8, batch_idx=variant == "with cache_batch_idx", leftpad=True)
    c.cache_leftpad[0] = max(c.cache_leftpad[0], min(2, c.cache_seqlens[0]))  # sequence 0 padded too
    if variant == "sliced cache":
        for name in ("k_cache", "v_cache"):
            wider = np.full((4, 25, 1, 24), np.nan, np.float32)
            wider[:, 4:] = getattr(c, name)
            setattr(c, name, wider[:, 4:])
    options = dict(causal=variant != "window", window=(4, 1) if variant == "window" else (-1, -1),
                   softcap=0.0, softmax_scale=0.3)
    out = None
    if variant == "strided out":  # out= whose rows are not back to back still gets the result
        storage = np.full((4, 3, 2, 3, 24), np.nan, np.float32)
        out = storage[:, :, 1]
    run_and_check(c, options, core_calls, out=out)
    if out is not None:
        assert np.isnan(storage[:, :, 0]).all(), "out= wrote outside its rows"


def test_varlen_q_reads_through_cache_batch_idx_and_leftpad(rng):
    # No append with cu_seqlens_q, but cache_batch_idx and cache_leftpad apply.
    lengths_q = np.array([2, 0, 3])
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], 2, 16)).astype(np.float32)
    k_cache = rng.standard_normal((4, 20, 1, 16)).astype(np.float32)
    v_cache = rng.standard_normal((4, 20, 1, 16)).astype(np.float32)
    rows = np.array([3, 0, 2], np.int32)
    seqlens = np.array([9, 20, 5], np.int32)
    leftpad = np.array([2, 7, 0], np.int32)
    for use_leftpad in (False, True):
        out, lse = hopattn.flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=seqlens, cache_batch_idx=rows,
            cache_leftpad=leftpad if use_leftpad else None, cu_seqlens_q=cu_q, max_seqlen_q=3,
            causal=True, return_softmax_lse=True)
        for b in range(3):
            start = leftpad[b] if use_leftpad else 0
            keys = slice(start, seqlens[b])
            o, l = reference.dense(q[None, cu_q[b]:cu_q[b + 1]], k_cache[None, rows[b], keys],
                                   v_cache[None, rows[b], keys], causal=True)
            assert_close(out[cu_q[b]:cu_q[b + 1]], o[0], "float32")
            assert_lse_close(lse[:, cu_q[b]:cu_q[b + 1]], l[0])


def test_append_grows_the_cache_call_after_call(rng):
    # Decoding: one new token per step, the caller advancing cache_seqlens; the cache ends up
    # holding every token, and each step sees exactly the tokens so far.
    batch, capacity, steps = 2, 16, 6
    k_cache = np.full((batch, capacity, 1, 8), np.nan, np.float32)
    v_cache = np.full((batch, capacity, 1, 8), np.nan, np.float32)
    seqlens = np.array([0, 4], np.int32)
    k_cache[1, :4] = rng.standard_normal((4, 1, 8))
    v_cache[1, :4] = rng.standard_normal((4, 1, 8))
    for _ in range(steps):
        q, k, v = (rng.standard_normal((batch, 1, heads, 8)).astype(np.float32) for heads in (2, 1, 1))
        out = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens,
                                              causal=True)
        for b in range(batch):
            assert (k_cache[b, seqlens[b]] == k[b, 0]).all() and (v_cache[b, seqlens[b]] == v[b, 0]).all()
            used = slice(0, seqlens[b] + 1)
            expected = reference.dense(q[b:b + 1], k_cache[None, b, used], v_cache[None, b, used],
                                       causal=True)[0]
            assert_close(out[b:b + 1], expected, "float32")
        seqlens = seqlens + 1
    assert not np.isnan(k_cache[0, :steps]).any() and np.isnan(k_cache[0, steps:]).all()


# ---- errors ------------------------------------------------------------------------------------

def small_case(rng, **change):
    shape = dict(batch=2, seqlen_q=1, seqlen_new=2, heads_q=2, heads_kv=1, head_dim=8,
                 seqlen_cache=16, rotary_dim=8)
    shape.update(change)
    return build_case(rng, "float32", **shape)


ERRORS = {
    "k without v": (dict(v=None), ValueError, "^v: required with k"),
    "v without k": (dict(k=None), ValueError, "^k: required with v"),
    "k without cache_seqlens": (dict(cache_seqlens=None), ValueError, "^cache_seqlens: required with k"),
    "rotary without k": (dict(k=None, v=None), ValueError, "^rotary_cos, rotary_sin: rotary embedding is applied only"),
    "rotary_cos alone": (dict(rotary_sin=None), ValueError, "^rotary_sin: required with rotary_cos"),
    "cache_seqlens past the cache": (dict(cache_seqlens=np.array([3, 15], np.int32)), ValueError,
                                     r"^cache_seqlens: entry 1 is 15; with seqlen_new 2 it must be in \[0, 14\]"),
    "negative cache_seqlens": (dict(cache_seqlens=np.array([-1, 0], np.int32)), ValueError,
                               "^cache_seqlens: entry 0 is -1"),
    "int cache_seqlens past the cache": (dict(cache_seqlens=15), ValueError, "^cache_seqlens: 15; with seqlen_new 2"),
    "int64 cache_seqlens": (dict(cache_seqlens=np.array([1, 2])), TypeError,
                            "^cache_seqlens: expected an int32 array, got dtype int64"),
    "k of another dtype": (dict(k="float16"), ValueError, "^k: dtype float16 differs from k_cache's float32"),
    "k of another shape": (dict(k="wider"), ValueError, r"^k: expected shape \(batch, seqlen_new, heads_kv, head_dim\)"),
    "rotary_dim over head_dim": (dict(rotary="wide"), ValueError, "^rotary_cos, rotary_sin: expected one shape"),
    "rotary_cos too short": (dict(rotary="short"), ValueError, "^rotary_cos: has 15 positions; it needs one per key"),
    "cache_batch_idx out of range": (dict(cache_batch_idx=np.array([0, 2], np.int32)), ValueError,
                                     r"^cache_batch_idx: entry 1 is 2; it must be in \[0, 2\)"),
    "cache_leftpad past cache_seqlens": (dict(cache_leftpad="past"), ValueError,
                                         r"^cache_leftpad: entry 0 is \d+; it must be in \[0, cache_seqlens\[b\]\]"),
    "read-only cache": (dict(k_cache="read-only"), ValueError, "^k_cache: read-only"),
    "negative attention_chunk": (dict(attention_chunk=-1), ValueError,
                                 "^attention_chunk: -1 is not allowed; it must be >= 0"),
    "bool attention_chunk": (dict(attention_chunk=True), TypeError, "^attention_chunk: expected an int"),
    "int pack_gqa": (dict(pack_gqa=1), TypeError, r"^pack_gqa: expected None \(automatic\)"),
    # flash-attention 3's arguments that hopattn takes without implementing them.
    "qv of another shape": (dict(qv="q wider"), ValueError, r"^qv: shape \(2, 1, 2, 16\) is not allowed"),
    "qv of another dtype": (dict(qv="q float16"), ValueError, "^qv: dtype float16 is not q's float32"),
    "cu_seqlens_k_new": (dict(cu_seqlens_k_new=np.array([0, 2, 4], np.int32)), NotImplementedError,
                         "^cu_seqlens_k_new: not implemented with new keys k and v"),
    "rotary_seqlens": (dict(rotary_seqlens="cache_seqlens"), NotImplementedError,
                       "^rotary_seqlens: not implemented with new keys k and v"),
    "sm_margin above 0": (dict(sm_margin=8), NotImplementedError, "^sm_margin: 8 is not supported"),
    "negative sm_margin": (dict(sm_margin=-1), ValueError, "^sm_margin: -1 is not allowed"),
    "bool sm_margin": (dict(sm_margin=False), TypeError, "^sm_margin: expected an int"),
    "a schedule": (dict(scheduler_metadata=np.zeros(8, np.int32)), ValueError,
                   r"^scheduler_metadata: shape \(8,\) is not \(0,\); hopattn plans its schedule"),
    "int64 empty schedule": (dict(scheduler_metadata=np.zeros(0, np.int64)), TypeError,
                             "^scheduler_metadata: dtype int64 is not int32"),
}


@pytest.mark.parametrize("error", ERRORS)
def test_rejections_name_the_argument_and_leave_the_cache(rng, error):
    change, kind, message = ERRORS[error]
    c = small_case(rng)
    arguments = dict(k=c.k, v=c.v, cache_seqlens=c.cache_seqlens, rotary_cos=c.rotary_cos,
                     rotary_sin=c.rotary_sin)
    for name, value in change.items():
        if name == "rotary":
            width, rows = (5, 16) if value == "wide" else (4, 15)
            arguments.update(rotary_cos=np.ones((rows, width), np.float32),
                             rotary_sin=np.zeros((rows, width), np.float32))
            continue
        if name == "k_cache":  # "read-only"
            c.k_cache.flags.writeable = False
            continue
        if isinstance(value, str):
            value = {"float16": lambda: c.k.astype(np.float16),
                     "wider": lambda: np.concatenate([c.k, c.k], axis=2),
                     "past": lambda: (c.cache_seqlens + 1).astype(np.int32),
                     "q": lambda: c.q.copy(),
                     "q float16": lambda: c.q.astype(np.float16),
                     "q wider": lambda: np.concatenate([c.q, c.q], axis=-1),
                     "cache_seqlens": lambda: c.cache_seqlens.copy()}[value]()
        arguments[name] = value
    before = [np.array(x, copy=True) for x in (c.k_cache, c.v_cache)]
    with pytest.raises(kind, match=message):
        hopattn.flash_attn_with_kvcache(c.q, c.k_cache, c.v_cache, **arguments)
    for name, was, now in zip(("k_cache", "v_cache"), before, (c.k_cache, c.v_cache)):
        assert np.array_equal(as_bytes(was), as_bytes(now)), f"{name} changed by a rejected call"


def test_varlen_q_with_new_keys_is_refused(rng):
    c = small_case(rng)
    with pytest.raises(ValueError, match=r"^k, v: appending new keys is not supported with "
                                         r"cu_seqlens_q \(varlen q\); it takes dense q"):
        hopattn.flash_attn_with_kvcache(c.q[:, 0], c.k_cache, c.v_cache, c.k, c.v,
                                        cache_seqlens=c.cache_seqlens, max_seqlen_q=1,
                                        cu_seqlens_q=np.array([0, 1, 2], np.int32))


def test_rotary_rows_must_reach_the_last_query(rng):
    # Causal queries sit at cache_seqlens + i: with seqlen_q > seqlen_new past the cache's keys.
    c = small_case(rng, seqlen_q=4, seqlen_new=1)
    c.cache_seqlens[:] = [15, 3]
    c.rotary_cos, c.rotary_sin = c.rotary_cos[:16], c.rotary_sin[:16]
    before = np.array(c.k_cache, copy=True)
    with pytest.raises(ValueError, match="^rotary_cos: has 16 positions, but query positions reach 18"):
        run(c, dict(causal=True, window=(-1, -1), softcap=0.0, softmax_scale=None))
    assert np.array_equal(as_bytes(before), as_bytes(c.k_cache))
    run(c, dict(causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None))  # all at 15


def test_cache_batch_idx_with_a_page_table_is_refused(rng):
    c = build_case(rng, "float32", batch=2, seqlen_q=1, seqlen_new=1, heads_q=1, heads_kv=1,
                   head_dim=8, page_size=4, pages_per_seq=2)
    with pytest.raises(ValueError, match="^cache_batch_idx: cannot be combined with page_table"):
        hopattn.flash_attn_with_kvcache(c.q, c.k_cache, c.v_cache, c.k, c.v,
                                        cache_seqlens=c.cache_seqlens, page_table=c.page_table,
                                        cache_batch_idx=np.array([1, 0], np.int32))


def test_paged_append_checks_the_page_table_before_writing(rng):
    c = build_case(rng, "float32", batch=2, seqlen_q=1, seqlen_new=1, heads_q=1, heads_kv=1,
                   head_dim=8, page_size=4, pages_per_seq=2)
    table = c.page_table.copy()
    table[1, 0] = -1  # NumPy would take it as the last page
    before = np.array(c.k_cache, copy=True)
    with pytest.raises(ValueError, match=r"^page_table: entry \(1, 0\) is -1"):
        hopattn.flash_attn_with_kvcache(c.q, c.k_cache, c.v_cache, c.k, c.v,
                                        cache_seqlens=c.cache_seqlens, page_table=table)
    assert np.array_equal(as_bytes(before), as_bytes(c.k_cache))


def test_jax_arrays_cannot_take_new_keys(rng):
    jax = pytest.importorskip("jax")
    c = small_case(rng, rotary_dim=0)
    cpu = jax.devices("cpu")[0]
    q, k_cache, v_cache, k, v = (jax.device_put(x, cpu) for x in (c.q, c.k_cache, c.v_cache, c.k, c.v))
    with pytest.raises(TypeError, match="^k, v: appending writes the new keys .* JAX arrays are "
                                        "immutable: write the new keys into the cache yourself"):
        hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=3)
