"""torch operators hopattn::fwd and hopattn::bwd (torch.library custom ops).

Each has a fake (meta) kernel, so torch.compile traces calls without graph breaks, and fwd's autograd
formula calls bwd. The backward runs wherever the C++ library implements it: on host tensors (CPU
reference); on CUDA tensors the library answers NotImplementedError until the GPU backward exists.
Gradients do not flow through the returned lse (as in flash-attention). Importing this module
imports torch; `import hopattn` alone does not.
"""

from typing import Optional, Tuple

import torch

from . import _core, interface


def _last_dim_contiguous(x):
    # The library takes any strides with a contiguous last dimension; copy only when that fails,
    # as flash-attention's wrappers do.
    return x if x is None or x.stride(-1) == 1 else x.contiguous()


@torch.library.custom_op("hopattn::fwd", mutates_args=())
def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float],
         causal: bool, window_left: int, window_right: int, softcap: float,
         cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
         max_seqlen_q: int, max_seqlen_k: int, seqused_k: Optional[torch.Tensor],
         page_table: Optional[torch.Tensor], num_splits: int, q_descale: Optional[torch.Tensor],
         k_descale: Optional[torch.Tensor], v_descale: Optional[torch.Tensor],
         q_block_descale: Optional[torch.Tensor], k_block_descale: Optional[torch.Tensor],
         v_block_descale: Optional[torch.Tensor], descale_block_rows_q: int,
         descale_block_rows_kv: int) -> Tuple[torch.Tensor, torch.Tensor]:
    return _core.forward(q, k, v, return_lse=True, softmax_scale=softmax_scale, causal=causal,
                         window_left=window_left, window_right=window_right, softcap=softcap,
                         cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                         max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                         page_table=page_table, num_splits=num_splits, q_descale=q_descale,
                         k_descale=k_descale, v_descale=v_descale, q_block_descale=q_block_descale,
                         k_block_descale=k_block_descale, v_block_descale=v_block_descale,
                         descale_block_rows_q=descale_block_rows_q,
                         descale_block_rows_kv=descale_block_rows_kv)


@_fwd.register_fake
def _fwd_fake(q, k, v, softmax_scale, causal, window_left, window_right, softcap, cu_seqlens_q,
              cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table, num_splits,
              q_descale, k_descale, v_descale, q_block_descale, k_block_descale, v_block_descale,
              descale_block_rows_q, descale_block_rows_kv):
    out_dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
    out = q.new_empty(q.shape, dtype=out_dtype)
    lse = q.new_empty(_core.lse_shape(tuple(q.shape), cu_seqlens_q is not None), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("hopattn::bwd", mutates_args=())
def _bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
         lse: torch.Tensor, softmax_scale: Optional[float], causal: bool, window_left: int,
         window_right: int, softcap: float, cu_seqlens_q: Optional[torch.Tensor],
         cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int,
         seqused_k: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _core.backward(_last_dim_contiguous(dout), q, k, v, out, lse,
                          softmax_scale=softmax_scale, causal=causal, window_left=window_left,
                          window_right=window_right, softcap=softcap, cu_seqlens_q=cu_seqlens_q,
                          cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                          max_seqlen_k=max_seqlen_k, seqused_k=seqused_k)


@_bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap,
              cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, softmax_scale, causal, window_left, window_right, softcap, cu_seqlens_q, cu_seqlens_k,
     max_seqlen_q, max_seqlen_k, seqused_k, page_table, _, q_descale, *_) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k)
    ctx.params = (softmax_scale, causal, window_left, window_right, softcap, max_seqlen_q, max_seqlen_k)
    ctx.unsupported = None
    if page_table is not None:
        ctx.unsupported = "a paged KV cache (page_table)"
    elif q.dtype == torch.float8_e4m3fn or q_descale is not None:
        ctx.unsupported = "FP8 inputs"


def _backward(ctx, dout, dlse):
    if ctx.unsupported is not None:
        raise NotImplementedError(f"hopattn has no backward pass for {ctx.unsupported}; "
                                  "it differentiates dense and varlen bf16/fp16/fp32 attention")
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k = ctx.saved_tensors
    softmax_scale, causal, window_left, window_right, softcap, max_seqlen_q, max_seqlen_k = ctx.params
    dq, dk, dv = torch.ops.hopattn.bwd(dout, q, k, v, out, lse, softmax_scale, causal, window_left,
                                       window_right, softcap, cu_seqlens_q, cu_seqlens_k,
                                       max_seqlen_q, max_seqlen_k, seqused_k)
    return (dq, dk, dv) + (None,) * (len(ctx.needs_input_grad) - 3)


_fwd.register_autograd(_backward, setup_context=_setup_context)


def forward(q, k, v, *, softmax_scale=None, causal=False, window_left=-1, window_right=-1,
            softcap=0.0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
            seqused_k=None, page_table=None, num_splits=0, q_descale=None, k_descale=None,
            v_descale=None, q_block_descale=None, k_block_descale=None, v_block_descale=None,
            descale_block_rows_q=128, descale_block_rows_kv=128):
    """(out, lse) through torch.ops.hopattn.fwd; keyword arguments as in hopattn::FwdArgs."""
    q, k, v = (_last_dim_contiguous(x) for x in (q, k, v))
    return torch.ops.hopattn.fwd(q, k, v, softmax_scale, causal, window_left, window_right,
                                 float(softcap), cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                 max_seqlen_k, seqused_k, page_table, num_splits, q_descale,
                                 k_descale, v_descale, q_block_descale, k_block_descale,
                                 v_block_descale, descale_block_rows_q, descale_block_rows_kv)


interface.torch_forward = forward
