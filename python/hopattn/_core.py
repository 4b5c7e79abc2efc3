"""Array-generic forward, backward and FP8 quantization: outputs are allocated with the caller's
array library, then _C runs on the caller's memory and CUDA stream. The flash-attention signatures
(interface.py), hopattn.quantize_fp8 and the torch operators (torch.py) all end here."""

import numbers

from . import _C
from ._arrays import common_library

_INT32_MAX = 2**31 - 1


def _out_dtype(lib, q):
    # FP8 inputs give a bfloat16 output (FwdArgs).
    return "bfloat16" if lib.dtype_name(q).startswith("float8") else lib.dtype_name(q)


def out_shape(q_shape, v_shape):
    """q's shape with v's head dim last (v may have a head dim of its own, FA3's headdim_v)."""
    return tuple(q_shape[:-1]) + (v_shape[-1],)


def lse_shape(q_shape, varlen):
    """float32 LSE: (batch, heads_q, seqlen_q), or (heads_q, total_q) when q is varlen."""
    if varlen:
        total_q, heads, _ = q_shape
        return (heads, total_q)
    batch, seqlen, heads, _ = q_shape
    return (batch, heads, seqlen)


def check_q_rank(q_shape, varlen):
    expected = "(total_q, heads_q, head_dim)" if varlen else "(batch, seqlen_q, heads_q, head_dim)"
    if len(q_shape) != (3 if varlen else 4):
        raise ValueError(f"q: expected shape {expected}, got {tuple(q_shape)}")


def _call(function, lib, q, arrays, **scalars):
    """Calls _C's `function` with `arrays` (name -> array or None; a dict of the caller's own, whose
    arrays are replaced by what _C imports) and the scalars."""
    raw_bits = False
    with lib.device_scope(q):
        for name, x in arrays.items():
            if x is not None:
                arrays[name], raw = lib.operand(x)
                raw_bits |= raw
        function(**arrays, **scalars, stream=lib.stream(q), raw_bits=raw_bits,
                 synchronize=lib.synchronize(q))


def forward(q, k, v, *, out=None, return_lse=False, softmax_scale=None, causal=False, window_left=-1,
            window_right=-1, attention_chunk=0, softcap=0.0, learnable_sink=None, qv=None,
            cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, seqused_k=None,
            seqused_q=None, page_table=None,
            num_splits=0, pack_gqa=None, q_descale=None, k_descale=None, v_descale=None,
            q_block_descale=None, k_block_descale=None, v_block_descale=None,
            descale_block_rows_q=128, descale_block_rows_kv=128):
    """Returns (out, lse); lse is None unless return_lse. pack_gqa None, True or False is
    hopattn::KernelOptions::pack_gqa's kAuto, kOn or kOff. learnable_sink: float32 (heads_q,), one
    logit per q head in every row's softmax (hopattn::FwdArgs); lse then includes it.
    attention_chunk: hopattn::FwdArgs::attention_chunk (0 = off). seqused_q: int32 (batch,), the
    query rows each sequence uses; the library writes no out or lse row past them, so the ones
    allocated here start as a row that sees no key (out 0, lse -inf), never as uninitialized
    memory; a given out keeps what it held there. qv: hopattn::FwdArgs::qv (forward only; host
    arrays with any option, CUDA arrays as far as the sm_90a kernel takes it: the library decides)."""
    arrays = dict(q=q, k=k, v=v, learnable_sink=learnable_sink, qv=qv, cu_seqlens_q=cu_seqlens_q,
                  cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k, seqused_q=seqused_q,
                  page_table=page_table,
                  q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                  q_block_descale=q_block_descale, k_block_descale=k_block_descale,
                  v_block_descale=v_block_descale, out=out)
    lib = common_library(arrays)
    varlen = cu_seqlens_q is not None
    check_q_rank(q.shape, varlen)

    def allocate(shape, dtype_name, unwritten):
        # The library writes no row past seqused_q: there, arrays start as a row that sees no key.
        if seqused_q is None:
            return lib.empty(q, shape, dtype_name)
        return lib.full(q, shape, dtype_name, unwritten)

    if out is None:
        out = arrays["out"] = allocate(out_shape(q.shape, v.shape), _out_dtype(lib, q), 0.0)
    lse = None
    if return_lse:
        lse = allocate(lse_shape(tuple(q.shape), varlen), "float32", float("-inf"))
    arrays["lse"] = lse
    _call(_C.forward, lib, q, arrays, softmax_scale=softmax_scale, causal=causal,
          window_left=window_left, window_right=window_right, attention_chunk=attention_chunk,
          softcap=softcap,
          max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, num_splits=num_splits,
          pack_gqa=pack_gqa, descale_block_rows_q=descale_block_rows_q,
          descale_block_rows_kv=descale_block_rows_kv)
    return out, lse


def backward(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False, window_left=-1,
             window_right=-1, attention_chunk=0, softcap=0.0, learnable_sink=None,
             cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, seqused_k=None,
             seqused_q=None, deterministic=False):
    """Returns (dq, dk, dv, dsink), four values with or without a sink. dq, dk, dv are each in its
    input's shape and dtype, freshly allocated with the caller's library (contiguous, so on CUDA
    their strides are the 16-byte multiples the GPU kernel needs). learnable_sink is the forward's
    (lse includes it); dsink is its float32 (heads_q,) gradient, or None without a sink. Gradients
    do not flow through lse. deterministic: bitwise reproducible gradients (slower on CUDA; see
    hopattn::BwdArgs). The masking options (causal, window, attention_chunk, softcap) must be the
    forward's, and so must seqused_q (dq rows past it come out 0)."""
    inputs = dict(q=q, k=k, v=v, out=out, dout=dout, lse=lse, learnable_sink=learnable_sink,
                  cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
                  seqused_q=seqused_q)
    lib = common_library(inputs)
    grads = {name: lib.empty(x, tuple(x.shape), lib.dtype_name(x))
             for name, x in (("dq", q), ("dk", k), ("dv", v))}
    heads_q = q.shape[-2]  # (batch, seqlen_q, heads_q, d) or, varlen, (total_q, heads_q, d)
    grads["dsink"] = None if learnable_sink is None else lib.empty(q, (heads_q,), "float32")
    _call(_C.backward, lib, q, {**inputs, **grads}, softmax_scale=softmax_scale, causal=causal,
          window_left=window_left, window_right=window_right, attention_chunk=attention_chunk,
          softcap=softcap,
          max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, deterministic=bool(deterministic))
    return grads["dq"], grads["dk"], grads["dv"], grads["dsink"]


GRANULARITIES = ("block", "head", "tensor")


def _check_int(name, value, minimum, maximum=None):
    # bool is an int to Python, but True as a row count is a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum or (maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name}: {value} is not allowed; it must be {allowed}")
    return int(value)


def descale_shape(granularity, x_shape, block_rows):
    """quantize_fp8's scale shape for x (batch, seqlen, heads, d): (1), (batch, heads) or
    (batch, heads, ceil(seqlen / block_rows))."""
    batch, seqlen, heads, _ = x_shape
    if granularity == "tensor":
        return (1,)
    if granularity == "head":
        return (batch, heads)
    return (batch, heads, -(-seqlen // block_rows))


def quantize_fp8(q, k, v, *, granularity="block", block_rows_q=128, block_rows_kv=128,
                 hadamard=False, seed=0, v_keys_contiguous=False):
    """FP8 pre-pass: q, k, v (bfloat16 or float16; q (batch, seqlen_q, heads_q, d), k (batch,
    seqlen_k, heads_kv, d), v (batch, seqlen_k, heads_kv, d_v), v's head dim its own) to
    float8_e4m3fn codes with float32 scales, x ~= code * scale,
    scale = amax(group) / 448 (1 for an all-zero group), v's "block" scales rounded up to a power of
    two (the FP8 forward then keeps P exact where a key block spans several v scales;
    hopattn/quantize.hpp) and 2^-40 for an all-zero v block.

    Returns (q8, k8, v8, q_descale, k_descale, v_descale), arrays of the inputs' library on q's
    device, written on the caller's stream. Scale groups and descale shapes, heads being heads_q
    for q and heads_kv for k and v:
      "block"   block_rows_q (block_rows_kv) rows of one (batch, head): (batch, heads, ceil(seqlen /
                block_rows)); give them to flash_attn_func as q/k/v_block_descale with
                descale_block_rows_q/kv = block_rows_q/kv
      "head"    one (batch, head): (batch, heads)
      "tensor"  the whole tensor: (1,)
    hadamard: multiply q and k rows (not v) by M = H diag(s) / sqrt(d) first (H Walsh-Hadamard,
    s random signs drawn from seed, d a multiple of 16 up to 256; where d is no power of two, H is
    block-diagonal over blocks of the largest power of two dividing d, and sqrt(d) that block's).
    M is orthogonal, so (qM)(kM)^T = qk^T: attention over the results needs no inverse transform.
    Host arrays quantize on the CPU, CUDA arrays on the GPU, with bit-identical codes and scales.
    v_keys_contiguous: return v8 with its keys contiguous (stride 1 along seqlen_k: V^T in memory,
    a (batch, heads_kv, d_v, seqlen_k padded to a multiple of 16) buffer viewed as (batch, seqlen_k,
    heads_kv, d_v)); the codes are the same, and flash_attn_func takes v8 as it is, the GPU kernel
    then loading V^T directly instead of transposing V. Not for JAX arrays (always row-major).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity: {granularity!r} is not one of "
                         f"{', '.join(map(repr, GRANULARITIES))}")
    # The row counts size the block descales, so they are checked before anything is allocated.
    block_rows_q = _check_int("block_rows_q", block_rows_q, 1, _INT32_MAX)
    block_rows_kv = _check_int("block_rows_kv", block_rows_kv, 1, _INT32_MAX)
    seed = _check_int("seed", seed, 0, 2**64 - 1)
    inputs = dict(q=q, k=k, v=v)
    lib = common_library(inputs)
    outputs = {}
    for name, block_rows in (("q", block_rows_q), ("k", block_rows_kv), ("v", block_rows_kv)):
        shape = tuple(inputs[name].shape)
        if len(shape) != 4:
            raise ValueError(f"{name}: expected shape (batch, seqlen, heads, head_dim), got {shape}")
        keys_contiguous = v_keys_contiguous and name == "v"
        empty = lib.empty_keys_contiguous if keys_contiguous else lib.empty
        outputs[name + "8"] = empty(q, shape, "float8_e4m3fn")
        outputs[name + "_descale"] = lib.empty(q, descale_shape(granularity, shape, block_rows),
                                               "float32")
    _call(_C.quantize_fp8, lib, q, {**inputs, **outputs}, granularity=granularity,
          block_rows_q=block_rows_q, block_rows_kv=block_rows_kv, hadamard=bool(hadamard),
          seed=seed)
    names = ("q8", "k8", "v8", "q_descale", "k_descale", "v_descale")
    return tuple(outputs[name] for name in names)
