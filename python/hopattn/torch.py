"""torch operators hopattn::fwd and hopattn::bwd (torch.library custom ops).

Each has a fake (meta) kernel, so torch.compile traces calls without graph breaks, and fwd's autograd
formula calls bwd, which runs where the C++ library has a backward pass:
- host tensors: the CPU reference, dense and variable-length, float32/float16/bfloat16;
- CUDA tensors: the sm_90a backward kernel, bfloat16/float16 q/k/v, dense (batch, seqlen, heads,
  head_dim) or variable-length (cu_seqlens, seqused_k / cache_seqlens), at any head dim that is a
  multiple of 8 up to 256 (as the forward), with causal, window, softcap, GQA/MQA and softmax_scale.
  It sums dq over key blocks with float reductions in L2, so dq may differ in its last bits from run
  to run (dk and dv do not), unless fwd was called with deterministic=True (a fixed order of those
  reductions; slower).
Paged KV caches and FP8 inputs, anywhere, have no backward: NotImplementedError, naming what is
supported. A learnable_sink (float32 (heads_q,)) gets its gradient from bwd too.
Gradients do not flow through the returned lse (as in flash-attention). forward() calls fwd's
kernel directly where the dispatcher would do nothing else (plain eager calls with nothing for
autograd to record), which saves its host overhead. Importing this module imports torch;
`import hopattn` alone does not.
"""

from typing import List, Optional, Tuple, get_args, get_type_hints

import torch

from . import _core, interface


def _last_dim_contiguous(x):
    # The library takes any strides with a contiguous last dimension; copy only when that fails,
    # as flash-attention's wrappers do.
    return x if x is None or x.stride(-1) == 1 else x.contiguous()


def _tma_addressable(x):
    """Whether the sm_90a kernels can read x through TMA as it is: last dimension contiguous, data
    16-byte aligned and every other stride a multiple of 16 bytes (the C++ library's rule for CUDA
    tensors), and no stride 0 where the extent is over 1 (a broadcast is copied rather than handed
    to TMA with a zero stride)."""
    if x.stride(-1) != 1 or x.data_ptr() % 16:
        return False
    size = x.element_size()
    return all(n == 1 or (s != 0 and s * size % 16 == 0)
               for n, s in zip(x.shape[:-1], x.stride()[:-1]))


def _tma_ready(x):
    # clone, not contiguous(): a contiguous tensor may still start at an address that is not
    # 16-byte aligned (a view at an odd offset); a fresh allocation is aligned.
    return x if _tma_addressable(x) else x.clone(memory_format=torch.contiguous_format)


def _v_layout(v, dense_kv):
    # A dense float8 v may have its keys contiguous instead (V^T in memory, the layout the FP8
    # kernel wants, e.g. quantize_fp8(v_keys_contiguous=True)): passed on as it is, not copied.
    keys_contiguous = (dense_kv and v.dim() == 4 and v.dtype == torch.float8_e4m3fn
                       and (v.stride(1) == 1 or v.size(1) == 1))
    return v if keys_contiguous else _last_dim_contiguous(v)


def _fwd_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float],
                causal: bool, window_left: int, window_right: int, softcap: float,
                cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                max_seqlen_q: int, max_seqlen_k: int, seqused_k: Optional[torch.Tensor],
                page_table: Optional[torch.Tensor], num_splits: int, pack_gqa: Optional[bool],
                q_descale: Optional[torch.Tensor], k_descale: Optional[torch.Tensor],
                v_descale: Optional[torch.Tensor], q_block_descale: Optional[torch.Tensor],
                k_block_descale: Optional[torch.Tensor], v_block_descale: Optional[torch.Tensor],
                descale_block_rows_q: int, descale_block_rows_kv: int,
                deterministic: bool = False,
                learnable_sink: Optional[torch.Tensor] = None,
                attention_chunk: int = 0,
                seqused_q: Optional[torch.Tensor] = None,
                qv: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    # deterministic only matters to the backward (the autograd formula reads it). learnable_sink,
    # attention_chunk, seqused_q and qv come last, in the order they were added, so that calls made
    # before they existed keep their positions.
    return _core.forward(q, k, v, return_lse=True, softmax_scale=softmax_scale, causal=causal,
                         window_left=window_left, window_right=window_right,
                         attention_chunk=attention_chunk, softcap=softcap,
                         learnable_sink=learnable_sink, qv=qv, cu_seqlens_q=cu_seqlens_q,
                         cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                         max_seqlen_k=max_seqlen_k, seqused_k=seqused_k, seqused_q=seqused_q,
                         page_table=page_table, num_splits=num_splits, pack_gqa=pack_gqa,
                         q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                         q_block_descale=q_block_descale, k_block_descale=k_block_descale,
                         v_block_descale=v_block_descale,
                         descale_block_rows_q=descale_block_rows_q,
                         descale_block_rows_kv=descale_block_rows_kv)


_fwd = torch.library.custom_op("hopattn::fwd", mutates_args=())(_fwd_kernel)


@_fwd.register_fake
def _fwd_fake(q, k, v, softmax_scale, causal, window_left, window_right, softcap, cu_seqlens_q,
              cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table, num_splits, pack_gqa,
              q_descale, k_descale, v_descale, q_block_descale, k_block_descale, v_block_descale,
              descale_block_rows_q, descale_block_rows_kv, deterministic=False,
              learnable_sink=None, attention_chunk=0, seqused_q=None, qv=None):
    out_dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
    out = q.new_empty(_core.out_shape(q.shape, v.shape), dtype=out_dtype)
    lse = q.new_empty(_core.lse_shape(tuple(q.shape), cu_seqlens_q is not None), dtype=torch.float32)
    return out, lse


# Returns [dq, dk, dv], and dsink after them when learnable_sink is given: a list, since a custom
# op's schema cannot return an optional tensor. learnable_sink, attention_chunk and seqused_q come
# last, as in fwd.
@torch.library.custom_op("hopattn::bwd", mutates_args=())
def _bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
         lse: torch.Tensor, softmax_scale: Optional[float], causal: bool, window_left: int,
         window_right: int, softcap: float, cu_seqlens_q: Optional[torch.Tensor],
         cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int,
         seqused_k: Optional[torch.Tensor], deterministic: bool = False,
         learnable_sink: Optional[torch.Tensor] = None,
         attention_chunk: int = 0,
         seqused_q: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
    # dout is the one input that autograd, not hopattn's forward, lays out: .sum() hands over an
    # expanded tensor (stride 0 everywhere), a user's grad_outputs may be any view. The host backend
    # takes any strides with a contiguous last dimension; the GPU kernel reads dout through TMA, so
    # on CUDA it gets a copy unless it already qualifies. q, k, v passed the library's checks for
    # CUDA tensors in the forward (aligned strides, no empty extent), out and lse are the forward's
    # own contiguous outputs, and _core.backward allocates dq, dk, dv with torch.empty in q's, k's
    # and v's shapes: contiguous, aligned (rows of a multiple of 8 elements are multiples of 16
    # bytes), non-empty.
    dout = _tma_ready(dout) if dout.is_cuda else _last_dim_contiguous(dout)
    *grads, dsink = _core.backward(dout, q, k, v, out, lse,
                                   softmax_scale=softmax_scale, causal=causal,
                                   window_left=window_left, window_right=window_right,
                                   attention_chunk=attention_chunk, softcap=softcap,
                                   learnable_sink=learnable_sink,
                                   cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                   max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                   seqused_k=seqused_k, seqused_q=seqused_q,
                                   deterministic=deterministic)
    return grads if dsink is None else grads + [dsink]


@_bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap,
              cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
              deterministic=False, learnable_sink=None, attention_chunk=0, seqused_q=None):
    grads = [q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)]
    if learnable_sink is None:
        return grads
    return grads + [q.new_empty((q.shape[-2],), dtype=torch.float32)]


def _setup_context(ctx, inputs, output):
    (q, k, v, softmax_scale, causal, window_left, window_right, softcap, cu_seqlens_q, cu_seqlens_k,
     max_seqlen_q, max_seqlen_k, seqused_k, page_table, _, _, q_descale, *_, deterministic,
     learnable_sink, attention_chunk, seqused_q, qv) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, learnable_sink,
                          seqused_q)
    ctx.params = (softmax_scale, causal, window_left, window_right, softcap, max_seqlen_q, max_seqlen_k,
                  deterministic, attention_chunk)
    ctx.unsupported = None
    if qv is not None:
        ctx.unsupported = "qv (flash-attention 3 has none either)"
    elif page_table is not None:
        ctx.unsupported = "a paged KV cache (page_table)"
    elif q.dtype == torch.float8_e4m3fn or q_descale is not None:
        ctx.unsupported = "FP8 inputs"


def _backward(ctx, dout, dlse):
    if ctx.unsupported is not None:
        raise NotImplementedError(f"hopattn has no backward pass for {ctx.unsupported}; it "
                                  "differentiates dense and varlen float32/float16/bfloat16 "
                                  "attention on host tensors and, on CUDA tensors, dense and "
                                  "varlen bfloat16/float16 attention at head dims that are "
                                  "multiples of 8 up to 256")
    (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, learnable_sink,
     seqused_q) = ctx.saved_tensors
    (softmax_scale, causal, window_left, window_right, softcap, max_seqlen_q, max_seqlen_k,
     deterministic, attention_chunk) = ctx.params
    # The sink goes in even when it needs no gradient: lse includes it, and the CPU reference
    # recomputes each row's softmax with it.
    dq, dk, dv, *dsink = torch.ops.hopattn.bwd(dout, q, k, v, out, lse, softmax_scale, causal,
                                               window_left, window_right, softcap, cu_seqlens_q,
                                               cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                               deterministic, learnable_sink, attention_chunk,
                                               seqused_q)
    # One gradient per input that autograd saw: q, k, v first, dsink at learnable_sink's place,
    # None for the others. Autograd may not see trailing inputs left at their defaults (the
    # dispatcher drops them): a given sink is never one of those, so its place is always there.
    grads = [dq, dk, dv] + [None] * (len(ctx.needs_input_grad) - 3)
    if dsink:
        grads[_FWD_SINK_INDEX] = dsink[0]
    return tuple(grads)


_fwd.register_autograd(_backward, setup_context=_setup_context)


# hopattn::fwd's arguments (custom_op made its schema from these annotations) and, for each, the
# Python types that the dispatcher hands to the kernel as they are (it would convert, say, True
# given for an int, or reject a float given for one).
_FWD_HINTS = {name: hint for name, hint in get_type_hints(_fwd_kernel).items() if name != "return"}
_FWD_ARG_NAMES = tuple(_FWD_HINTS)
_FWD_SINK_INDEX = _FWD_ARG_NAMES.index("learnable_sink")
_FWD_ARG_TYPES = tuple(get_args(hint) or (hint,) for hint in _FWD_HINTS.values())
_FWD_TENSOR_ARGS = tuple(i for i, types in enumerate(_FWD_ARG_TYPES) if torch.Tensor in types)
_fwd_signatures_of_exact_types = set()  # tuples of argument types found in _FWD_ARG_TYPES
# The private torch queries the shortcut reads; a torch without any of them takes the dispatcher path.
_SHORTCUT_AVAILABLE = all(hasattr(torch._C, name) for name in (
    "_dispatch_keyset_full_after", "_dispatch_keys", "_len_torch_dispatch_stack",
    "_is_torch_function_mode_enabled", "_are_functorch_transforms_active", "_get_tracing_state"))
# Dispatch keys below autograd. When the highest of them over all tensor arguments is a dense
# backend's (CPU, CUDA), the dispatcher runs the kernel registered for it; conjugate or negative
# views, sparse, quantized, nested, meta and subclass tensors bring keys of their own.
if _SHORTCUT_AVAILABLE:
    _BELOW_AUTOGRAD = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.ADInplaceOrView)
    _DENSE_BACKENDS = (torch._C.DispatchKey.CPU, torch._C.DispatchKey.CUDA)


def _only_the_kernel_would_run(args):
    """Whether torch.ops.hopattn.fwd(*args) would do nothing but call _fwd_kernel(*args): plain eager
    use (no torch.compile, tracing, TorchDispatchMode or TorchFunctionMode, functorch transform or
    profiler), nothing for autograd to record, plain CPU/CUDA tensors and scalars of the schema's
    own types. forward then calls the kernel itself: the dispatcher and the custom_op wrappers cost
    some 20 us of host time per call (boxing 25 arguments twice, autograd and alias checks)."""
    if not _SHORTCUT_AVAILABLE:
        return False
    if (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack()
            or torch._C._is_torch_function_mode_enabled()
            or torch._C._are_functorch_transforms_active()
            or torch._C._get_tracing_state() is not None or torch.autograd._profiler_enabled()):
        return False
    signature = tuple(map(type, args))
    if signature not in _fwd_signatures_of_exact_types:  # checked once per signature
        if not all(t in types for t, types in zip(signature, _FWD_ARG_TYPES)):
            return False
        _fwd_signatures_of_exact_types.add(signature)
    grad = torch.is_grad_enabled()
    keys = None
    for i in _FWD_TENSOR_ARGS:
        tensor = args[i]
        if tensor is not None:
            if grad and tensor.requires_grad:
                return False
            tensor_keys = torch._C._dispatch_keys(tensor)
            keys = tensor_keys if keys is None else keys | tensor_keys
    return (keys & _BELOW_AUTOGRAD).highestPriorityTypeId() in _DENSE_BACKENDS


def forward(q, k, v, *, return_lse=True, softmax_scale=None, causal=False, window_left=-1,
            window_right=-1, attention_chunk=0, softcap=0.0, cu_seqlens_q=None, cu_seqlens_k=None,
            max_seqlen_q=0, max_seqlen_k=0, seqused_k=None, page_table=None, num_splits=0,
            pack_gqa=None, q_descale=None, k_descale=None, v_descale=None, q_block_descale=None,
            k_block_descale=None, v_block_descale=None, descale_block_rows_q=128,
            descale_block_rows_kv=128, deterministic=False, learnable_sink=None, seqused_q=None,
            qv=None):
    """(out, lse) through torch.ops.hopattn.fwd; keyword arguments as in hopattn::FwdArgs (pack_gqa
    None, True or False for its options.pack_gqa kAuto, kOn or kOff), and deterministic for the
    backward (hopattn::BwdArgs). With return_lse=False, lse may be None (plain eager calls then skip
    computing it). learnable_sink (heads_q,) may be of any floating dtype: it is converted to the
    float32 the operator takes here, outside it, so that autograd converts its gradient back."""
    dense_kv = cu_seqlens_k is None and page_table is None
    if learnable_sink is not None and learnable_sink.is_floating_point():
        learnable_sink = learnable_sink.to(torch.float32).contiguous()
    args = (_last_dim_contiguous(q), _last_dim_contiguous(k), _v_layout(v, dense_kv),
            softmax_scale, causal, window_left, window_right, float(softcap), cu_seqlens_q,
            cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table, num_splits, pack_gqa,
            q_descale, k_descale, v_descale, q_block_descale, k_block_descale, v_block_descale,
            descale_block_rows_q, descale_block_rows_kv, bool(deterministic), learnable_sink,
            attention_chunk, seqused_q, _last_dim_contiguous(qv))
    if _only_the_kernel_would_run(args):
        # What the op would run, without its dispatch overhead, and computing lse only if asked to.
        options = dict(zip(_FWD_ARG_NAMES[3:], args[3:]))
        del options["deterministic"]  # the backward's
        return _core.forward(*args[:3], return_lse=return_lse, **options)
    return torch.ops.hopattn.fwd(*args)


interface.torch_forward = forward
