"""Array-generic forward and backward: outputs are allocated with the caller's array library, then
_C runs on the caller's memory and CUDA stream. The flash-attention signatures (interface.py) and
the torch operators (torch.py) both end here."""

from . import _C
from ._arrays import common_library


def _out_dtype(lib, q):
    # FP8 inputs give a bfloat16 output (FwdArgs).
    return "bfloat16" if lib.dtype_name(q).startswith("float8") else lib.dtype_name(q)


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
    operands, raw_bits = {}, False
    for name, x in arrays.items():
        if x is None:
            operands[name] = None
        else:
            operands[name], raw = lib.operand(x)
            raw_bits |= raw
    with lib.device_scope(q):
        function(**operands, **scalars, stream=lib.stream(q), raw_bits=raw_bits,
                 synchronize=lib.synchronize(q))


def forward(q, k, v, *, out=None, return_lse=False, softmax_scale=None, causal=False, window_left=-1,
            window_right=-1, softcap=0.0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0,
            max_seqlen_k=0, seqused_k=None, page_table=None, num_splits=0, q_descale=None,
            k_descale=None, v_descale=None):
    """Returns (out, lse); lse is None unless return_lse."""
    inputs = dict(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                  seqused_k=seqused_k, page_table=page_table, q_descale=q_descale,
                  k_descale=k_descale, v_descale=v_descale)
    lib = common_library({**inputs, "out": out})
    varlen = cu_seqlens_q is not None
    check_q_rank(q.shape, varlen)
    if out is None:
        out = lib.empty(q, tuple(q.shape), _out_dtype(lib, q))
    lse = lib.empty(q, lse_shape(tuple(q.shape), varlen), "float32") if return_lse else None
    _call(_C.forward, lib, q, {**inputs, "out": out, "lse": lse}, softmax_scale=softmax_scale,
          causal=causal, window_left=window_left, window_right=window_right, softcap=softcap,
          max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, num_splits=num_splits)
    return out, lse


def backward(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False, window_left=-1,
             window_right=-1, softcap=0.0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0,
             max_seqlen_k=0, seqused_k=None):
    """Returns (dq, dk, dv), each like its input. Gradients do not flow through lse."""
    inputs = dict(q=q, k=k, v=v, out=out, dout=dout, lse=lse, cu_seqlens_q=cu_seqlens_q,
                  cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k)
    lib = common_library(inputs)
    grads = {name: lib.empty(x, tuple(x.shape), lib.dtype_name(x))
             for name, x in (("dq", q), ("dk", k), ("dv", v))}
    _call(_C.backward, lib, q, {**inputs, **grads}, softmax_scale=softmax_scale, causal=causal,
          window_left=window_left, window_right=window_right, softcap=softcap,
          max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return grads["dq"], grads["dk"], grads["dv"]
