"""The PyTorch attention calls that decode_peers.py times, each with hopattn's semantics (GQA: q head h
reads k/v head h // (hq / hkv); causal bottom-right aligned: query i sees keys j <= i + sk - sq), and
a float32 reference to check them against.

Tensors are in SDPA's layout: q (b, hq, sq, d), k and v (b, hkv, sk, d).
"""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SDPA_BACKENDS = {
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
}
IMPLS = (*SDPA_BACKENDS, "flex")


def masks_keys(causal, sq):
    """Whether bottom-right causal hides any key: with one query row (sq <= sk) it hides none."""
    return causal and sq > 1


def bottom_right_mask(sq, sk, device):
    """(1, 1, sq, sk) bool, True where query i may see key j."""
    return torch.ones(sq, sk, dtype=torch.bool, device=device).tril(diagonal=sk - sq)[None, None]


def sdpa_call(impl, q, k, v, causal, gqa):
    """A zero-argument callable: F.scaled_dot_product_attention under impl's backend alone."""
    backend = SDPA_BACKENDS[impl]
    sq, sk = q.shape[2], k.shape[2]
    kwargs = {"enable_gqa": gqa}
    if masks_keys(causal, sq) and sq == sk:
        kwargs["is_causal"] = True
    elif masks_keys(causal, sq) and impl == "sdpa_flash":
        # SDPA's is_causal is top-left and flash takes no mask; causal_lower_right reaches the flash
        # kernel's own (bottom-right) causal, but runs another kernel where flash cannot, so refuse then.
        from torch.backends.cuda import SDPAParams, can_use_flash_attention
        from torch.nn.attention.bias import causal_lower_right

        if not can_use_flash_attention(SDPAParams(q, k, v, None, 0.0, False, gqa), debug=True):  # warns why
            raise RuntimeError("flash attention cannot take this shape (causal_lower_right would run another kernel)")
        kwargs["attn_mask"] = causal_lower_right(sq, sk)
    elif masks_keys(causal, sq):
        kwargs["attn_mask"] = bottom_right_mask(sq, sk, q.device)

    def call():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)

    return call


_compiled_flex = None


def flex_call(q, k, v, causal, gqa):
    """A zero-argument callable: compiled FlexAttention (each new shape compiles anew)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if _compiled_flex is None:
        # Every shape is a recompile; past dynamo's default limit (8) it would fall back to eager
        # attention silently, so allow them all and fail loudly past that.
        torch._dynamo.config.recompile_limit = 1024
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    sq, sk = q.shape[2], k.shape[2]
    block_mask = None
    if masks_keys(causal, sq):
        offset = sk - sq
        block_mask = create_block_mask(lambda b, h, i, j: j <= i + offset, None, None, sq, sk, device=q.device)
    return lambda: _compiled_flex(q, k, v, block_mask=block_mask, enable_gqa=gqa)


def peer_call(impl, q, k, v, causal, expand_kv):
    """impl's call on these tensors; expand_kv: k and v already hold hq heads (no GQA in the call)."""
    gqa = q.shape[1] != k.shape[1]
    assert not (expand_kv and gqa), "expanded k and v have q's heads"
    if impl == "flex":
        return flex_call(q, k, v, causal, gqa)
    return sdpa_call(impl, q, k, v, causal, gqa)


def expand_heads(t, heads_q):
    """k or v (b, hkv, sk, d) with each head repeated for the hq / hkv q heads that read it."""
    return t.repeat_interleave(heads_q // t.shape[1], dim=1)


def reference(q, k, v, causal):
    """float32 attention with hopattn's semantics, written independently of the peers' masks."""
    sq, sk = q.shape[2], k.shape[2]
    kf, vf = expand_heads(k.float(), q.shape[1]), expand_heads(v.float(), q.shape[1])
    scores = q.float() @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if masks_keys(causal, sq):
        rows = torch.arange(sq, device=q.device)[:, None]
        cols = torch.arange(sk, device=q.device)[None, :]
        scores = scores.masked_fill(cols > rows + (sk - sq), float("-inf"))
    return torch.softmax(scores, dim=-1) @ vf


# The check runs on a small copy of the shape, where one key too many or too few under the mask moves
# some output by about 0.3, and a wrong GQA head mapping by about 1, while bf16 rounding stays near
# 0.002 (measured with PyTorch's CPU attention).
CHECK_SEQLEN_K = 64
CHECK_BATCH = 2
CHECK_TOLERANCE = 2e-2


def check_error(impl, heads_q, heads_kv, seqlen_q, hdim, causal, expand_kv, dtype, device):
    """Max abs error of impl against `reference` on a small copy of the shape (batch 2, 64 keys): GQA
    mapping, mask alignment and expansion the same as in the timed call."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape_q = (CHECK_BATCH, heads_q, seqlen_q, hdim)
    shape_kv = (CHECK_BATCH, heads_kv, max(CHECK_SEQLEN_K, seqlen_q), hdim)
    q, k, v = (torch.randn(s, generator=gen).to(device=device, dtype=dtype) for s in (shape_q, shape_kv, shape_kv))
    k_in, v_in = (expand_heads(k, heads_q), expand_heads(v, heads_q)) if expand_kv else (k, v)
    out = peer_call(impl, q, k_in, v_in, causal, expand_kv)()
    return (out.float() - reference(q, k, v, causal)).abs().max().item()
