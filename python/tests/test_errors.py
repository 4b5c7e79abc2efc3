"""Every rejected input surfaces as the documented exception type, with a message that starts with
(or names) the offending argument. Inputs are valid except for the one thing each case breaks."""

import re

import numpy as np
import pytest

import hopattn


@pytest.fixture
def qkv(rng):
    shape_q, shape_kv = (2, 5, 4, 16), (2, 7, 2, 16)
    return (rng.standard_normal(shape_q).astype(np.float32),
            rng.standard_normal(shape_kv).astype(np.float32),
            rng.standard_normal(shape_kv).astype(np.float32))


def apply_change(qkv, change):
    """The (q, k, v) and keyword options of a rejection case: change(q, k, v) returns options, among
    which q, k or v replace the inputs."""
    arrays = dict(zip("qkv", qkv))
    options = change(*qkv)
    arrays.update({name: options.pop(name) for name in list(options) if name in arrays})
    return (arrays["q"], arrays["k"], arrays["v"]), options


def varlen_inputs(rng):
    q = rng.standard_normal((6, 2, 8)).astype(np.float32)
    k = rng.standard_normal((9, 2, 8)).astype(np.float32)
    return q, k, k.copy(), np.array([0, 2, 6], np.int32), np.array([0, 4, 9], np.int32)


# ---- TypeError: not an array, or an element type hopattn never takes -------------------------

@pytest.mark.parametrize("position,name", [(0, "q"), (1, "k"), (2, "v")])
def test_non_array_is_a_type_error(qkv, position, name):
    args = list(qkv)
    args[position] = args[position].tolist()
    with pytest.raises(TypeError, match=f"^{name}: expected"):
        hopattn.flash_attn_func(*args)


@pytest.mark.parametrize("dtype", ["float64", "int64", "bool", "uint8"])
def test_unsupported_element_type_is_a_type_error(qkv, dtype):
    q, k, v = qkv
    with pytest.raises(TypeError, match=f"^q: element type .* is not supported; hopattn takes"):
        hopattn.flash_attn_func(q.astype(dtype), k, v)


def test_int64_cu_seqlens_is_a_type_error(rng):
    q, k, v, cu_q, cu_k = varlen_inputs(rng)
    with pytest.raises(TypeError, match="^cu_seqlens_q: element type int64"):
        hopattn.flash_attn_varlen_func(q, k, v, cu_q.astype(np.int64), cu_k, 4, 5)


def test_window_size_must_be_a_pair(qkv):
    with pytest.raises(TypeError, match="^window_size: expected a pair"):
        hopattn.flash_attn_func(*qkv, window_size=3)


@pytest.mark.parametrize("value", [2, 0, 1, 1.0, "on", "auto", [True]])
@pytest.mark.parametrize("function", ["flash_attn_func", "flash_attn_varlen_func",
                                      "flash_attn_with_kvcache"])
def test_pack_gqa_takes_only_none_true_or_false(rng, function, value):
    # An int is refused too: num_splits=0 means automatic, so pack_gqa=0 could be meant either way.
    q, k, v, cu_q, cu_k = varlen_inputs(rng)
    calls = {
        "flash_attn_func": lambda **kw: hopattn.flash_attn_func(q[None], k[None], v[None], **kw),
        "flash_attn_varlen_func": lambda **kw: hopattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k,
                                                                              4, 5, **kw),
        "flash_attn_with_kvcache": lambda **kw: hopattn.flash_attn_with_kvcache(
            q[None], k[None], v[None], cache_seqlens=9, **kw),
    }
    message = ("pack_gqa: expected None (automatic), True (always pack) or False (never pack), "
               f"got {value!r}")
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        calls[function](pack_gqa=value)
    calls[function](pack_gqa=True)  # the same call with a valid value runs


CHUNK_CALLS = ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
               "flash_attn_qkvpacked_func")


def call_with_chunk(rng, function, attention_chunk):
    """`function` on small valid inputs with the given attention_chunk."""
    q, k, v, cu_q, cu_k = varlen_inputs(rng)
    calls = {
        "flash_attn_func": lambda: hopattn.flash_attn_func(q[None], k[None], v[None],
                                                           attention_chunk=attention_chunk),
        "flash_attn_varlen_func": lambda: hopattn.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, 4, 5, attention_chunk=attention_chunk),
        "flash_attn_with_kvcache": lambda: hopattn.flash_attn_with_kvcache(
            q[None], k[None], v[None], cache_seqlens=9, attention_chunk=attention_chunk),
        "flash_attn_qkvpacked_func": lambda: hopattn.flash_attn_qkvpacked_func(
            np.stack([q, q, q], axis=1)[None], attention_chunk=attention_chunk),
    }
    return calls[function]()


@pytest.mark.parametrize("value", [True, 1.0, "8", None, (8,), np.float32(8)])
@pytest.mark.parametrize("function", CHUNK_CALLS)
def test_attention_chunk_must_be_an_int(rng, function, value):
    # A bool is refused too: True would mean chunks of one key.
    message = ("attention_chunk: expected an int (0 = off, else the chunk length in keys), "
               f"got {value!r}")
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        call_with_chunk(rng, function, value)
    call_with_chunk(rng, function, 8)  # the same call with a valid value runs


def test_positional_options_are_refused(qkv):
    # flash-attention 2 and 3 disagree on the 4th positional argument; hopattn takes keywords only.
    with pytest.raises(TypeError):
        hopattn.flash_attn_func(*qkv, 0.0)


# ---- ValueError: what the library's validation (or the binding) rejects ----------------------

@pytest.mark.parametrize("change,message", [
    (lambda q, k, v: dict(k=k.astype(np.float16), v=v.astype(np.float16)), "^k: dtype float16 does not match q"),
    (lambda q, k, v: dict(v=v.astype(np.float16)), "^v: dtype float16"),
    (lambda q, k, v: dict(q=q[0]), r"^q: expected shape \(batch, seqlen_q, heads_q, head_dim\)"),
    (lambda q, k, v: dict(k=k[..., :8], v=v[..., :8]), "^k: head_dim 8 does not match"),
    (lambda q, k, v: dict(k=k[:, :, :1].repeat(3, 2), v=v[:, :, :1].repeat(3, 2)), "^k: heads_kv 3 does not divide"),
    (lambda q, k, v: dict(k=k[:1], v=v[:1]), "^k: batch 1 does not match"),
    (lambda q, k, v: dict(v=v[:, :6]), "^v: shape"),
    (lambda q, k, v: dict(q=np.repeat(q, 2, axis=3)[..., ::2]), "^q: the last dimension has stride 2"),
    (lambda q, k, v: dict(window_size=(-2, -1)), "^window_left: -2 is not allowed"),
    (lambda q, k, v: dict(window_size=(-1, -3)), "^window_right: -3 is not allowed"),
    (lambda q, k, v: dict(causal=True, window_size=(-1, 2)), "^causal: contradicts window_right 2"),
    (lambda q, k, v: dict(softcap=-1.0), "^softcap: "),
    (lambda q, k, v: dict(softmax_scale=float("inf")), "^softmax_scale: "),
    (lambda q, k, v: dict(num_splits=-1), "^num_splits: -1 is negative"),
    (lambda q, k, v: dict(out=np.empty(q.shape, np.float16)), "^out: dtype float16"),
    (lambda q, k, v: dict(out=np.empty(q.shape[:3] + (8,), np.float32)), "^out: shape"),
    (lambda q, k, v: dict(q_descale=np.ones((2, 2), np.float32)), "^q_descale: given with float32 inputs"),
])
def test_library_rejections_are_value_errors(qkv, change, message):
    inputs, options = apply_change(qkv, change)
    with pytest.raises(ValueError, match=message):
        hopattn.flash_attn_func(*inputs, **options)


CHUNK_MESSAGE = r"^attention_chunk: -1 is not allowed; it must be >= 0"


@pytest.mark.parametrize("function", CHUNK_CALLS)
def test_negative_attention_chunk_is_a_value_error(rng, function):
    with pytest.raises(ValueError, match=CHUNK_MESSAGE):
        call_with_chunk(rng, function, -1)


def test_the_library_rejects_a_negative_attention_chunk_too(qkv):
    # The entry points refuse it before the library sees it (flash_attn_with_kvcache before it
    # appends); the binding's callers that bypass them meet the library's own check.
    q, k, v = qkv
    with pytest.raises(ValueError, match=CHUNK_MESSAGE):
        hopattn._core.forward(q, k, v, attention_chunk=-1)
    out, lse = hopattn._core.forward(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=CHUNK_MESSAGE):
        hopattn._core.backward(out, q, k, v, out, lse, attention_chunk=-1)


@pytest.mark.parametrize("sink,error,message", [
    (np.zeros(2, np.float32), ValueError,
     r"^learnable_sink: shape \(2\) is not allowed; it must be \(heads_q\) = \(4\)"),
    (np.zeros((1, 4), np.float32), ValueError, r"^learnable_sink: .*\(heads_q\) = \(4\)"),
    (np.zeros(4, np.float16), ValueError, "^learnable_sink: dtype float16 is not allowed; it must be float32"),
    (np.zeros(4, np.float64), TypeError, "^learnable_sink: element type float64 is not supported"),
    ([0.0] * 4, TypeError, "^learnable_sink: expected"),
])
def test_learnable_sink_rejections_name_it(qkv, sink, error, message):
    with pytest.raises(error, match=message):
        hopattn.flash_attn_func(*qkv, learnable_sink=sink)


def test_dsink_without_learnable_sink_is_a_value_error(qkv):
    # Only a direct call of the binding can do this: _core.backward allocates dsink for a sink.
    q, k, v = qkv
    out, lse = hopattn.flash_attn_func(q, k, v, return_attn_probs=True)
    grads = [np.empty(x.shape, np.float32) for x in (q, k, v)]
    with pytest.raises(ValueError, match="^dsink: given without learnable_sink"):
        hopattn._C.backward(q, k, v, out, out, lse, *grads, dsink=np.empty(4, np.float32))


def test_read_only_out_is_a_value_error(qkv):
    out = np.empty(qkv[0].shape, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="^out: is read-only"):
        hopattn.flash_attn_func(*qkv, out=out)


@pytest.mark.parametrize("break_it,message", [
    (lambda a: a.update(cu_q=np.array([0, 3, 6], np.int32)), "^cu_seqlens_q: sequence 0 has length 3 > max_seqlen_q 2"),
    (lambda a: a.update(cu_q=np.array([1, 2, 6], np.int32)), "^cu_seqlens_q: entry 0 is 1"),
    (lambda a: a.update(cu_q=np.array([0, 4, 3], np.int32)), "^cu_seqlens_q: entry 2 .* is less than entry 1"),
    (lambda a: a.update(cu_k=np.array([0, 4, 8], np.int32)), "^cu_seqlens_k: last entry 8 does not equal"),
    (lambda a: a.update(cu_k=np.array([0, 9], np.int32)), "^cu_seqlens_k: has 2 entries"),
    (lambda a: a.update(max_q=0), "^max_seqlen_q: 0"),
    (lambda a: a.update(seqused_k=np.array([5, 1], np.int32)), "^seqused_k: entry 0 is 5"),
    (lambda a: a.update(seqused_k=np.array([1, 1, 1], np.int32)), "^seqused_k: shape"),
    (lambda a: a.update(seqused_q=np.array([1, 5], np.int32)), "^seqused_q: entry 1 is 5.*query rows"),
    (lambda a: a.update(seqused_q=np.array([-1, 0], np.int32)), "^seqused_q: entry 0 is -1"),
    (lambda a: a.update(seqused_q=np.array([1], np.int32)), "^seqused_q: shape"),
])
def test_varlen_rejections_name_the_argument(rng, break_it, message):
    q, k, v, cu_q, cu_k = varlen_inputs(rng)
    a = dict(cu_q=cu_q, cu_k=cu_k, max_q=4, seqused_k=None, seqused_q=None)
    if "max_seqlen_q 2" in message:
        a["max_q"] = 2
    break_it(a)
    with pytest.raises(ValueError, match=message):
        hopattn.flash_attn_varlen_func(q, k, v, a["cu_q"], a["cu_k"], a["max_q"], 5,
                                       seqused_k=a["seqused_k"], seqused_q=a["seqused_q"])


def paged_inputs(rng):
    q = rng.standard_normal((2, 1, 2, 8)).astype(np.float32)
    cache = rng.standard_normal((5, 4, 1, 8)).astype(np.float32)
    return q, cache, cache.copy(), np.array([[0, 3], [4, 1]], np.int32)


@pytest.mark.parametrize("table,seqlens,message", [
    ([[0, 5], [4, 1]], [3, 3], r"^page_table: entry \(0, 1\) is 5"),
    ([[0, 3]], [3, 3], "^page_table: has 1 rows"),
    ([[0, 3], [4, 1]], [3, 9], "^seqused_k: entry 1 is 9"),
])
def test_paged_rejections_name_the_argument(rng, table, seqlens, message):
    q, k_cache, v_cache, _ = paged_inputs(rng)
    with pytest.raises(ValueError, match=message):
        hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, page_table=np.array(table, np.int32),
                                        cache_seqlens=np.array(seqlens, np.int32))


def test_page_table_and_block_table_together_are_refused(rng):
    q, k_cache, v_cache, table = paged_inputs(rng)
    with pytest.raises(ValueError, match="block_table and page_table"):
        hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, page_table=table, block_table=table,
                                        cache_seqlens=3)


def test_kvcache_with_cu_seqlens_q_needs_max_seqlen_q(rng):
    q, k_cache, v_cache, table = paged_inputs(rng)
    with pytest.raises(ValueError, match="^max_seqlen_q: required"):
        hopattn.flash_attn_with_kvcache(q[:, 0], k_cache, v_cache, page_table=table, cache_seqlens=3,
                                        cu_seqlens_q=np.array([0, 1, 2], np.int32))


# ---- NotImplementedError: flash-attention options hopattn does not implement -----------------

@pytest.mark.parametrize("option,value", [("dropout_p", 0.1), ("alibi_slopes", np.ones(4, np.float32))])
def test_unsupported_options_raise_not_implemented(qkv, option, value):
    with pytest.raises(NotImplementedError, match=f"^{option}: .* is not supported .*hopattn supports"):
        hopattn.flash_attn_func(*qkv, **{option: value})


def test_kvcache_leftpad_with_a_paged_cache_is_not_implemented(rng):
    # As in flash-attention: cache_leftpad takes a dense cache.
    q, k_cache, v_cache, table = paged_inputs(rng)
    with pytest.raises(NotImplementedError, match="^cache_leftpad: not supported with a paged cache"):
        hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, page_table=table, cache_seqlens=3,
                                        cache_leftpad=np.zeros(2, np.int32))


def test_kvcache_alibi_is_not_implemented(rng):
    q, k_cache, v_cache, table = paged_inputs(rng)
    with pytest.raises(NotImplementedError, match="^alibi_slopes: an array of shape"):
        hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, page_table=table, cache_seqlens=3,
                                        alibi_slopes=np.ones(2, np.float32))


def test_backward_of_float8_is_not_implemented():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.ones((1, 2, 1, 8), ml_dtypes.float8_e4m3fn).view(np.uint8)
    lse = np.zeros((1, 1, 2), np.float32)
    grads = [np.empty((1, 2, 1, 8), np.uint8) for _ in range(3)]
    with pytest.raises(NotImplementedError, match="^q: dtype float8_e4m3 is not supported by backward"):
        hopattn._C.backward(x, x, x, np.zeros((1, 2, 1, 8), np.uint16), x, lse, *grads, raw_bits=True)


# ---- FP8 pre-pass (quantize_fp8) and per-block descales --------------------------------------

@pytest.fixture
def bf16_qkv(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    shape_q, shape_kv = (2, 9, 4, 64), (2, 11, 2, 64)
    return tuple(rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
                 for shape in (shape_q, shape_kv, shape_kv))


@pytest.mark.parametrize("change,error,message", [
    (lambda q, k, v: dict(q=q.tolist()), TypeError, "^q: expected"),
    (lambda q, k, v: dict(granularity="row"), ValueError,
     "^granularity: 'row' is not one of 'block', 'head', 'tensor'"),
    (lambda q, k, v: dict(block_rows_q=0), ValueError, r"^block_rows_q: 0 is not allowed; it must be in \[1, "),
    (lambda q, k, v: dict(block_rows_kv=-3), ValueError, "^block_rows_kv: -3 is not allowed"),
    (lambda q, k, v: dict(block_rows_q=2.5), TypeError, "^block_rows_q: expected an int, got float"),
    (lambda q, k, v: dict(seed=-1), ValueError, "^seed: -1 is not allowed"),
    (lambda q, k, v: dict(seed=2**64), ValueError, "^seed: 18446744073709551616 is not allowed"),
    (lambda q, k, v: dict(seed="7"), TypeError, "^seed: expected an int, got str"),
    (lambda q, k, v: dict(q=q[0]), ValueError, r"^q: expected shape \(batch, seqlen, heads, head_dim\)"),
    (lambda q, k, v: dict(v=v[..., 0]), ValueError, r"^v: expected shape"),
    (lambda q, k, v: {name: x.astype(np.float32) for name, x in zip("qkv", (q, k, v))}, ValueError,
     "^quantize_fp8: q must be bfloat16 or float16, got float32"),
    (lambda q, k, v: dict(k=k.astype(np.float16)), ValueError,
     "^quantize_fp8: k must have q's dtype bfloat16"),
    (lambda q, k, v: dict(k=k[:1], v=v[:1]), ValueError, r"^quantize_fp8: k must have shape"),
    (lambda q, k, v: dict(v=v[:, :5]), ValueError, r"^quantize_fp8: v must have shape"),
    (lambda q, k, v: dict(q=q[..., :40], k=k[..., :40], v=v[..., :40], hadamard=True), ValueError,
     r"^quantize_fp8: hadamard .* needs head dim d a multiple of 16 from 16 to 256"),
])
def test_quantize_fp8_rejections(bf16_qkv, change, error, message):
    inputs, options = apply_change(bf16_qkv, change)
    with pytest.raises(error, match=message):
        hopattn.quantize_fp8(*inputs, **options)


def test_binding_rejects_an_unknown_granularity(bf16_qkv):
    # The Python layer checks first; the binding names the argument too when called directly.
    q, k, v = (x.view(np.uint16) for x in bf16_qkv)
    outputs = [np.empty(x.shape, np.uint8) for x in (q, k, v)] + [np.empty(1, np.float32)] * 3
    with pytest.raises(ValueError, match="^granularity: 'rows' is not one of"):
        hopattn._C.quantize_fp8(q, k, v, *outputs, granularity="rows", raw_bits=True)


@pytest.mark.parametrize("change,error,message", [
    (lambda d: d.update(q_block_descale=d["q_block_descale"][:, :2]), ValueError,
     r"^q_block_descale: shape \(2, 2, 3\) is not allowed; it must be "
     r"\(batch, heads_q, ceil\(seqlen_q / descale_block_rows_q\)\) = \(2, 4, 3\)"),
    (lambda d: d.update(k_block_descale=d["k_block_descale"][:, :, :1]), ValueError,
     r"^k_block_descale: shape \(2, 2, 1\) is not allowed; it must be "
     r"\(batch, heads_kv, ceil\(seqlen_k / descale_block_rows_kv\)\) = \(2, 2, 3\)"),
    (lambda d: d.update(descale_block_rows_q=2), ValueError,
     r"^q_block_descale: shape \(2, 4, 3\) is not allowed; .* = \(2, 4, 5\)"),
    (lambda d: d.update(descale_block_rows_kv=11), ValueError,
     r"^k_block_descale: shape \(2, 2, 3\) is not allowed; .* = \(2, 2, 1\)"),
    (lambda d: d.update(v_block_descale=d["v_block_descale"].astype(np.float16)), ValueError,
     "^v_block_descale: dtype float16 is not allowed; it must be float32"),
    (lambda d: d.update(descale_block_rows_q=0), ValueError,
     "^descale_block_rows_q: 0 is not allowed; it must be >= 1"),
    (lambda d: d.update(descale_block_rows_kv=-1), ValueError, "^descale_block_rows_kv: -1 is not allowed"),
    (lambda d: d.update(k_block_descale=d["k_block_descale"].tolist()), TypeError,
     "^k_block_descale: expected"),
    (lambda d: d.update(q_block_descale=d["q_block_descale"].astype(np.float64)), TypeError,
     "^q_block_descale: element type float64 is not supported"),
])
def test_block_descale_rejections(bf16_qkv, change, error, message):
    q8, k8, v8, q_block, k_block, v_block = hopattn.quantize_fp8(*bf16_qkv, block_rows_q=4,
                                                                 block_rows_kv=4)
    options = dict(q_block_descale=q_block, k_block_descale=k_block, v_block_descale=v_block,
                   descale_block_rows_q=4, descale_block_rows_kv=4)
    change(options)
    with pytest.raises(error, match=message):
        hopattn.flash_attn_func(q8, k8, v8, **options)


def test_block_descales_with_16_bit_inputs_are_refused(bf16_qkv):
    q, k, v = bf16_qkv
    block = np.ones((2, 2, 1), np.float32)
    with pytest.raises(ValueError, match="^v_block_descale: given with bfloat16 inputs; descale"):
        hopattn.flash_attn_func(q, k, v, v_block_descale=block, descale_block_rows_kv=11)


# ---- flash-attention 3's qv, sm_margin, scheduler_metadata and get_scheduler_metadata ----------

FA3_CALLS = ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
             "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
             "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func")


def call_with(rng, function, **options):
    """`function` on small valid inputs with the given options."""
    q, k, v, cu_q, cu_k = varlen_inputs(rng)
    calls = {
        "flash_attn_func": lambda: hopattn.flash_attn_func(q[None], k[None], v[None], **options),
        "flash_attn_varlen_func": lambda: hopattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 5,
                                                                         **options),
        "flash_attn_with_kvcache": lambda: hopattn.flash_attn_with_kvcache(
            q[None], k[None], v[None], cache_seqlens=9, **options),
        "flash_attn_qkvpacked_func": lambda: hopattn.flash_attn_qkvpacked_func(
            np.stack([q, q, q], axis=1)[None], **options),
        "flash_attn_kvpacked_func": lambda: hopattn.flash_attn_kvpacked_func(
            q[None], np.stack([k, v], axis=1)[None], **options),
        "flash_attn_varlen_qkvpacked_func": lambda: hopattn.flash_attn_varlen_qkvpacked_func(
            np.stack([q, q, q], axis=1), cu_q, 4, **options),
        "flash_attn_varlen_kvpacked_func": lambda: hopattn.flash_attn_varlen_kvpacked_func(
            q, np.stack([k, v], axis=1), cu_q, cu_k, 4, 5, **options),
    }
    return calls[function]()


SM_MARGIN_REFUSALS = [
    (1, NotImplementedError, r"^sm_margin: 1 is not supported \(only sm_margin=0\); hopattn's "
                             r"persistent kernels size their grid to the GPU's SM count and "
                             r"cannot leave SMs idle yet$"),
    (np.int64(132), NotImplementedError, "^sm_margin: 132 is not supported"),
    (-1, ValueError, r"^sm_margin: -1 is not allowed; it must be >= 0 \(0 = leave no SM idle\)$"),
    (True, TypeError, r"^sm_margin: expected an int \(the SMs to leave idle, 0 = none\), got True$"),
    (0.0, TypeError, "^sm_margin: expected an int .*, got 0.0$"),
    (None, TypeError, "^sm_margin: expected an int .*, got None$"),
    ("0", TypeError, "^sm_margin: expected an int .*, got '0'$"),
]


@pytest.mark.parametrize("value,error,message", SM_MARGIN_REFUSALS)
@pytest.mark.parametrize("function", FA3_CALLS)
def test_sm_margin_other_than_0_is_refused(rng, function, value, error, message):
    # hopattn's persistent kernels take every SM: a margin the caller counts on is refused, not
    # ignored. A bool is refused as for attention_chunk.
    with pytest.raises(error, match=message):
        call_with(rng, function, sm_margin=value)
    call_with(rng, function, sm_margin=0)  # the same call with the default runs
    call_with(rng, function, sm_margin=np.int32(0))


@pytest.mark.parametrize("function", ["flash_attn_func", "flash_attn_varlen_func",
                                      "flash_attn_with_kvcache"])
def test_qv_must_have_outs_shape_and_qs_dtype(rng, function):
    q = varlen_inputs(rng)[0]
    qv = q if function == "flash_attn_varlen_func" else q[None]
    with pytest.raises(ValueError, match="^qv: shape"):
        call_with(rng, function, qv=qv[..., :7])
    with pytest.raises(ValueError, match="^qv: dtype float16"):
        call_with(rng, function, qv=qv.astype(np.float16))
    call_with(rng, function, qv=qv)  # out's shape (q's, here: v has q's head dim) runs
    call_with(rng, function, qv=None)


# Without new keys, flash-attention 3 does not read cu_seqlens_k_new and rotary_seqlens, and neither
# does hopattn (test_numpy_fa3_arguments.py); they are checked as what they would be. With new keys
# they are not implemented: test_numpy_kvcache_append.py, which also checks the cache is left as it was.
@pytest.mark.parametrize("option,value,kind,message", [
    ("cu_seqlens_k_new", np.array([0, 9, 9], np.int32), ValueError,
     r"^cu_seqlens_k_new: expected shape \(batch \+ 1,\) = \(2,\), got \(3,\)$"),
    ("cu_seqlens_k_new", np.array([0, 9], np.int64), TypeError,
     "^cu_seqlens_k_new: expected an int32 array, got dtype int64$"),
    ("cu_seqlens_k_new", [0, 9], TypeError, "^cu_seqlens_k_new: expected a torch.Tensor"),
    ("rotary_seqlens", np.array([3, 4], np.int32), ValueError,
     r"^rotary_seqlens: expected shape \(batch,\) = \(1,\), got \(2,\)$"),
    ("rotary_seqlens", np.array([3], np.float32), TypeError,
     "^rotary_seqlens: expected an int32 array, got dtype float32$"),
])
def test_kvcache_fa3_new_key_lengths_are_checked_without_new_keys(rng, option, value, kind, message):
    with pytest.raises(kind, match=message):
        call_with(rng, "flash_attn_with_kvcache", **{option: value})


NO_SCHEDULE = ("hopattn plans its schedule at launch and takes no precomputed one: pass None or "
               "what hopattn.get_scheduler_metadata returns (an empty int32 array)")


@pytest.mark.parametrize("value,error,message", [
    (np.zeros(4, np.int32), ValueError, r"scheduler_metadata: shape (4,) is not (0,); "),
    (np.zeros((0, 2), np.int32), ValueError, r"scheduler_metadata: shape (0, 2) is not (0,); "),
    (np.zeros((), np.int32), ValueError, r"scheduler_metadata: shape () is not (0,); "),
    (np.zeros(0, np.int64), TypeError, "scheduler_metadata: dtype int64 is not int32; "),
    (np.zeros(0, np.float32), TypeError, "scheduler_metadata: dtype float32 is not int32; "),
    ([], TypeError, "scheduler_metadata: expected None or an array, got list; "),
    (0, TypeError, "scheduler_metadata: expected None or an array, got int; "),
])
@pytest.mark.parametrize("function", ["flash_attn_varlen_func", "flash_attn_with_kvcache"])
def test_scheduler_metadata_other_than_get_scheduler_metadata_s_is_refused(rng, function, value,
                                                                            error, message):
    with pytest.raises(error, match=f"^{re.escape(message + NO_SCHEDULE)}$"):
        call_with(rng, function, scheduler_metadata=value)
    call_with(rng, function, scheduler_metadata=np.zeros(0, np.int32))


def scheduler_arguments():
    return dict(batch_size=2, max_seqlen_q=1, max_seqlen_k=9, num_heads_q=4, num_heads_kv=2,
                headdim=16, cache_seqlens=np.array([3, 9], np.int32))


GET_SCHEDULER_METADATA_ERRORS = {
    "negative batch_size": (dict(batch_size=-1), ValueError,
                            "^batch_size: -1 is not allowed; it must be >= 0$"),
    "float max_seqlen_q": (dict(max_seqlen_q=1.0), TypeError,
                           "^max_seqlen_q: expected an int, got float$"),
    "negative max_seqlen_k": (dict(max_seqlen_k=-9), ValueError, "^max_seqlen_k: -9 is not allowed"),
    "no query heads": (dict(num_heads_q=0), ValueError,
                       "^num_heads_q: 0 is not allowed; it must be >= 1$"),
    "bool num_heads_kv": (dict(num_heads_kv=True), TypeError,
                          "^num_heads_kv: expected an int, got bool$"),
    "zero headdim": (dict(headdim=0), ValueError, "^headdim: 0 is not allowed"),
    "str headdim_v": (dict(headdim_v="16"), TypeError, "^headdim_v: expected an int, got str$"),
    "zero page_size": (dict(page_size=0), ValueError, "^page_size: 0 is not allowed"),
    "negative max_seqlen_k_new": (dict(max_seqlen_k_new=-1), ValueError,
                                  "^max_seqlen_k_new: -1 is not allowed"),
    "negative num_splits": (dict(num_splits=-1), ValueError, "^num_splits: -1 is not allowed"),
    "window_size not a pair": (dict(window_size=4), TypeError, "^window_size: expected a pair"),
    "negative attention_chunk": (dict(attention_chunk=-1), ValueError, CHUNK_MESSAGE),
    "int pack_gqa": (dict(pack_gqa=1), TypeError, r"^pack_gqa: expected None \(automatic\)"),
    "sm_margin above 0": (dict(sm_margin=4), NotImplementedError, "^sm_margin: 4 is not supported"),
    "negative sm_margin": (dict(sm_margin=-1), ValueError, "^sm_margin: -1 is not allowed"),
    "cu_seqlens_k_new of another batch": (dict(cu_seqlens_k_new=np.array([0, 1], np.int32)),
                                          ValueError, r"^cu_seqlens_k_new: expected shape "
                                                      r"\(batch \+ 1,\) = \(3,\), got \(2,\)$"),
    "int64 cu_seqlens_k_new": (dict(cu_seqlens_k_new=np.array([0, 1, 2], np.int64)), TypeError,
                               "^cu_seqlens_k_new: expected an int32 array, got dtype int64$"),
    "cu_seqlens_k_new with new keys": (dict(cu_seqlens_k_new=np.array([0, 1, 2], np.int32),
                                            max_seqlen_k_new=1), NotImplementedError,
                                       "^cu_seqlens_k_new: not implemented with new keys k and v"),
    "int64 cache_seqlens": (dict(cache_seqlens=np.array([3, 9])), TypeError,
                            "^cache_seqlens: expected an int32 array, got dtype int64$"),
    "cache_seqlens of another batch": (dict(cache_seqlens=np.array([3, 9, 1], np.int32)),
                                       ValueError, r"^cache_seqlens: expected shape "
                                                   r"\(batch_size,\) = \(2,\), got \(3,\)$"),
    "list cache_seqlens": (dict(cache_seqlens=[3, 9]), TypeError, "^cache_seqlens: expected a "),
}


@pytest.mark.parametrize("error", GET_SCHEDULER_METADATA_ERRORS)
def test_get_scheduler_metadata_rejections_name_the_argument(error):
    change, kind, message = GET_SCHEDULER_METADATA_ERRORS[error]
    with pytest.raises(kind, match=message):
        hopattn.get_scheduler_metadata(**{**scheduler_arguments(), **change})
    assert hopattn.get_scheduler_metadata(**scheduler_arguments()).shape == (0,)
