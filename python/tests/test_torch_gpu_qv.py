"""qv (flash-attention 3's; MLA decoding) on CUDA tensors: the sm_90a MLA kernel against float64
attention with flash-attention's tolerance rule, and NotImplementedError outside its head dims. All
named test_gpu_* (selected with `-k gpu`); skipped without torch, a Hopper GPU and a build with
kernels."""

import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
from torch_checks import assert_within_rule, needs_hopper, torch_generator  # noqa: E402


# ---- qv on CUDA tensors: the sm_90a MLA kernel (q/k head dim 64, v, qv and out 512) ------------

def qv_attention(q, qv, k, v, dtype, *, causal=False, cache_seqlens=None, softmax_scale=None):
    """softmax((q k^T + qv v^T) * scale) v, computed in `dtype` (float64: the reference; the inputs'
    dtype: flash-attention's naive baseline), with sequence b's keys those below cache_seqlens[b]
    (all without) and causal aligned to them (bottom-right). Returns (out, lse); the rows of v past
    the keys in use are zeroed first, so that NaN there (a cache from torch.empty) stays out."""
    batch, seqlen_q, heads_q = q.shape[:3]
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = (q.shape[-1] + v.shape[-1]) ** -0.5 if softmax_scale is None else softmax_scale
    used = (torch.full((batch,), seqlen_k, device=q.device) if cache_seqlens is None
            else cache_seqlens.to(q.device).long())
    j = torch.arange(seqlen_k, device=q.device).view(1, 1, -1)
    i = torch.arange(seqlen_q, device=q.device).view(1, -1, 1)
    key_used = j < used.view(-1, 1, 1)                                  # (b, 1, sk)
    allowed = key_used & (j <= i + used.view(-1, 1, 1) - seqlen_q) if causal else key_used
    q, qv, k, v = (x.to(dtype) for x in (q, qv, k, v))
    v = v.masked_fill(~key_used[:, 0, :, None, None], 0.0)
    k = k.masked_fill(~key_used[:, 0, :, None, None], 0.0)
    k = k.repeat_interleave(heads_q // heads_kv, dim=2)
    v = v.repeat_interleave(heads_q // heads_kv, dim=2)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) + torch.einsum("bihd,bjhd->bhij", qv, v)
    scores = scores * scale
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    lse = torch.logsumexp(scores if dtype == torch.float64 else scores.float(), dim=-1)
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("bhij,bjhd->bihd", probs, v), lse


def mla_inputs(generator, dtype, batch, seqlen_q, seqlen_k, heads_q=16, heads_kv=1):
    """q (64) and qv (512) with rows of norm large enough that the softmax is far from flat, k (64)
    and v (512), on the GPU in `dtype`."""
    def normal(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=generator) * scale).to(dtype)

    return (normal(batch, seqlen_q, heads_q, 64, scale=3.0),
            normal(batch, seqlen_q, heads_q, 512, scale=3.0),
            normal(batch, seqlen_k, heads_kv, 64), normal(batch, seqlen_k, heads_kv, 512))


@needs_hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("seqlen_q, causal", [(1, False), (2, True)], ids=["decode", "mtp_causal"])
@pytest.mark.parametrize("num_splits", [0, 1, 3])
def test_gpu_qv_kvcache_decoding_matches_float64(rng, dtype, seqlen_q, causal, num_splits):
    # DeepSeek's decoding step: 16 query heads on one latent K/V head, a cache of 700 rows of which
    # cache_seqlens are in use; the rows past them hold NaN and must not reach out or lse.
    generator = torch_generator(rng, "cuda")
    q, qv, k_cache, v_cache = mla_inputs(generator, getattr(torch, dtype), 2, seqlen_q, 700)
    seqlens = torch.tensor([700, 333], dtype=torch.int32, device="cuda")
    k_cache[1, 333:] = float("nan")
    v_cache[1, 333:] = float("nan")
    out, lse = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, qv=qv, cache_seqlens=seqlens,
                                               causal=causal, num_splits=num_splits,
                                               return_softmax_lse=True)
    ref, ref_lse = qv_attention(q, qv, k_cache, v_cache, torch.float64, causal=causal,
                                cache_seqlens=seqlens)
    naive, _ = qv_attention(q, qv, k_cache, v_cache, q.dtype, causal=causal, cache_seqlens=seqlens)
    assert out.shape == qv.shape and out.dtype == q.dtype and out.device == q.device
    assert_within_rule(out, ref, naive)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=2e-3)


@needs_hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("seqlen_q, causal", [(1, False), (2, True)], ids=["decode", "mtp_causal"])
def test_gpu_qv_flash_attn_func_matches_float64(rng, dtype, seqlen_q, causal):
    generator = torch_generator(rng, "cuda")
    q, qv, k, v = mla_inputs(generator, getattr(torch, dtype), 2, seqlen_q, 700)
    out, lse = hopattn.flash_attn_func(q, k, v, qv=qv, causal=causal, return_attn_probs=True)
    ref, ref_lse = qv_attention(q, qv, k, v, torch.float64, causal=causal)
    naive, _ = qv_attention(q, qv, k, v, q.dtype, causal=causal)
    assert out.shape == qv.shape and out.dtype == q.dtype
    assert_within_rule(out, ref, naive)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=2e-3)
    # An explicit softmax_scale replaces the default 1/sqrt(64 + 512).
    out = hopattn.flash_attn_func(q, k, v, qv=qv, causal=causal, softmax_scale=0.05)
    ref, _ = qv_attention(q, qv, k, v, torch.float64, causal=causal, softmax_scale=0.05)
    naive, _ = qv_attention(q, qv, k, v, q.dtype, causal=causal, softmax_scale=0.05)
    assert_within_rule(out, ref, naive)


@needs_hopper
@pytest.mark.parametrize("head_dims", [(128, 128), (64, 256)], ids=str)
def test_gpu_qv_outside_the_mla_shapes_is_not_implemented(head_dims):
    # The library decides: head dims other than q/k 64 with v 512 raise NotImplementedError
    # naming qv.
    head_dim, head_dim_v = head_dims
    q = torch.randn(1, 1, 16, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 100, 1, head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 100, 1, head_dim_v, device="cuda", dtype=torch.bfloat16)
    qv = torch.randn(1, 1, 16, head_dim_v, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="qv"):
        hopattn.flash_attn_func(q, k, v, qv=qv)
