"""flash_attn_with_kvcache with new keys appended in place, on host and CUDA tensors: rotary,
paged caches, cache_batch_idx, cache_leftpad and attention_chunk, against float64 references from
the semantics. Skipped without torch; the GPU tests (test_gpu_*) without a Hopper GPU and a build
with kernels."""

import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
from torch_checks import (  # noqa: E402
    assert_within_rule, attention_math, kvcache_case, kvcache_index, needs_hopper)


# ---- flash_attn_with_kvcache: new keys appended in place, rotary, cache_batch_idx, leftpad ------
# (named with "kvcache": `-k kvcache` selects them). float64 references from the semantics: the
# cache after the call (new rows rotated at cache_seqlens + i, every other byte as it was), and out
# within flash-attention's rule against float64 attention over the grown cache, q rotated by a
# float64 rotary and rounded to the input dtype (as FA's own kvcache test does).

def rotary_math(x, cos, sin, positions, interleaved):
    """float64 rotary embedding from its definition: each pair of rotary features, as re + i im,
    turned by cos + i sin at its row's position (positions (b, s)). GPT-J pairs (2j, 2j + 1),
    GPT-NeoX pairs (j, j + rotary_dim / 2)."""
    x = x.double().clone()
    half = cos.shape[1]
    re = torch.arange(half, device=x.device) * (2 if interleaved else 1)
    im = re + (1 if interleaved else half)
    turn = torch.complex(cos.double()[positions], sin.double()[positions])[:, :, None, :]
    z = torch.complex(x[..., re], x[..., im]) * turn
    x[..., re], x[..., im] = z.real, z.imag
    return x


def kvcache_check(c, interleaved=False, causal=True, window=(-1, -1), attention_chunk=0):
    """Runs flash_attn_with_kvcache on case c and checks the cache and out."""
    as_bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
    bits = lambda x: x.contiguous().view(as_bits[x.dtype])  # NaN-proof equality
    before = {name: c[name].clone() for name in ("q", "k", "v", "k_cache", "v_cache", "cache_seqlens")}
    out, lse = hopattn.flash_attn_with_kvcache(
        c["q"], c["k_cache"], c["v_cache"], c["k"], c["v"], cache_seqlens=c["cache_seqlens"],
        page_table=c["page_table"], cache_batch_idx=c["cache_batch_idx"],
        cache_leftpad=c["cache_leftpad"], rotary_cos=c["rotary_cos"], rotary_sin=c["rotary_sin"],
        rotary_interleaved=interleaved, causal=causal, window_size=window,
        attention_chunk=attention_chunk, return_softmax_lse=True)
    for name in ("q", "k", "v"):
        assert torch.equal(bits(c[name]), bits(before[name])), f"{name} was modified"
    assert torch.equal(c["cache_seqlens"], before["cache_seqlens"]), "cache_seqlens was modified"
    batch, seqlen_new = c["k"].shape[:2]
    seqlens = c["cache_seqlens"].long()
    positions = seqlens[:, None] + torch.arange(seqlen_new, device=seqlens.device)[None, :]
    new_k = rotary_math(c["k"], c["rotary_cos"], c["rotary_sin"], positions, interleaved)
    rtol = {torch.bfloat16: 2**-7, torch.float16: 2**-10, torch.float32: 1e-6}[c["dtype"]]
    written = torch.zeros(c["k_cache"].shape[:2], dtype=torch.bool, device=seqlens.device)
    for b in range(batch):
        where = kvcache_index(c, b, positions[b].tolist())
        written[where] = True
        torch.testing.assert_close(c["k_cache"][where].double(), new_k[b], rtol=rtol, atol=1e-5,
                                   msg=lambda m: f"k_cache rows of sequence {b}: {m}")
        assert torch.equal(bits(c["v_cache"][where]), bits(c["v"][b])), f"v_cache, sequence {b}"
    for name in ("k_cache", "v_cache"):
        assert torch.equal(bits(c[name][~written]), bits(before[name][~written])), \
            f"{name}: rows other than the new ones changed"
    local = causal or tuple(window) != (-1, -1) or attention_chunk > 0  # flash-attention 3's rule
    steps = torch.arange(c["q"].shape[1], device=seqlens.device) if local else \
        torch.zeros(c["q"].shape[1], dtype=torch.long, device=seqlens.device)
    q_ref = rotary_math(c["q"], c["rotary_cos"], c["rotary_sin"], seqlens[:, None] + steps[None, :],
                        interleaved).to(c["dtype"])
    assert out.shape == c["q"].shape and out.dtype == c["dtype"]
    assert lse.shape == (batch, c["q"].shape[2], c["q"].shape[1]) and lse.dtype == torch.float32
    for b in range(batch):
        start = 0 if c["cache_leftpad"] is None else int(c["cache_leftpad"][b])
        where = kvcache_index(c, b, range(start, int(seqlens[b]) + seqlen_new))
        rows = (q_ref[b:b + 1], c["k_cache"][where][None], c["v_cache"][where][None])
        mask = dict(causal=causal, window=window, attention_chunk=attention_chunk)
        ref, ref_lse = attention_math(*(x.double() for x in rows), **mask)
        naive, _ = attention_math(*rows, **mask)
        assert_within_rule(out[b:b + 1], ref, naive, what=f"out of sequence {b}")
        torch.testing.assert_close(lse[b:b + 1].double(), ref_lse, rtol=0, atol=2e-3,
                                   msg=lambda m: f"lse of sequence {b}: {m}")
    return out


@pytest.mark.parametrize("chunk", [0, 5], ids=["nochunk", "chunk5"])
@pytest.mark.parametrize("feature", ["dense", "paged", "cache_batch_idx", "cache_leftpad"])
def test_cpu_kvcache_append_with_torch_tensors(rng, feature, chunk):
    # torch's own array operations (the NumPy tests run the others) on host tensors.
    c = kvcache_case(rng, "cpu", torch.float32, layout="paged" if feature == "paged" else "dense",
                     head_dim=40, rotary_dim=24, seqlen_cache=37, page_size=16, pages_per_seq=3,
                     batch_cache=5 if feature == "cache_batch_idx" else None,
                     batch_idx=feature == "cache_batch_idx", leftpad=feature == "cache_leftpad")
    kvcache_check(c, interleaved=bool(rng.integers(2)), causal=bool(rng.integers(2)),
                  attention_chunk=chunk)


def test_cpu_kvcache_append_leaves_q_differentiable(rng):
    # The append is outside autograd (the cache is a buffer); q's rotation is not.
    c = kvcache_case(rng, "cpu", torch.float32, head_dim=16, rotary_dim=16, seqlen_cache=20)
    q = c["q"].requires_grad_()
    out = hopattn.flash_attn_with_kvcache(q, c["k_cache"], c["v_cache"], c["k"], c["v"],
                                          cache_seqlens=c["cache_seqlens"], causal=True,
                                          rotary_cos=c["rotary_cos"], rotary_sin=c["rotary_sin"])
    (grad,) = torch.autograd.grad(out.sum(), q)
    assert grad.shape == q.shape and grad.isfinite().all() and grad.abs().sum() > 0


@needs_hopper
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("layout", ["dense", "paged"])
@pytest.mark.parametrize("seqlen_new", [1, 3])
def test_gpu_kvcache_append_rotary_bf16_matches_float64(rng, seqlen_new, layout, interleaved, causal):
    c = kvcache_case(rng, "cuda", torch.bfloat16, layout=layout, seqlen_q=seqlen_new,
                     seqlen_new=seqlen_new)
    kvcache_check(c, interleaved=interleaved, causal=causal)


@needs_hopper
@pytest.mark.parametrize("seqlen_cache, head_dim, route",
                         [(256, 128, "rows as pages"), (320, 128, "64-key pages"),
                          (200, 128, "rows as pages of any size"), (200, 192, "gathered")])
def test_gpu_kvcache_cache_batch_idx_bf16_matches_float64(rng, seqlen_cache, head_dim, route):
    # seqlen_cache 200 has no power-of-two divisor >= 16: a row a page of 200 keys where the K/V copy
    # kernels take any page size (head dims up to 128), else the rows gathered into a copy.
    c = kvcache_case(rng, "cuda", torch.bfloat16, seqlen_cache=seqlen_cache, batch_cache=5,
                     head_dim=head_dim, batch_idx=True)
    kvcache_check(c, interleaved=bool(rng.integers(2)))


@needs_hopper
@pytest.mark.parametrize("layout", ["dense", "paged", "cache_batch_idx", "cache_leftpad"])
@pytest.mark.parametrize("seqlen_new", [1, 3])
def test_gpu_kvcache_append_with_attention_chunk_bf16_matches_float64(rng, seqlen_new, layout):
    # A chunk is a local mask: q rotated at cache_seqlens + i (flash-attention 3's rule); with
    # cache_leftpad the chunks start at each sequence's pad.
    c = kvcache_case(rng, "cuda", torch.bfloat16, layout="paged" if layout == "paged" else "dense",
                     seqlen_q=seqlen_new, seqlen_new=seqlen_new,
                     batch_cache=5 if layout == "cache_batch_idx" else None,
                     batch_idx=layout == "cache_batch_idx", leftpad=layout == "cache_leftpad")
    kvcache_check(c, interleaved=bool(rng.integers(2)), causal=bool(rng.integers(2)),
                  attention_chunk=int(rng.choice([64, 100])))


@needs_hopper
@pytest.mark.parametrize("batch_idx", [False, True], ids=["rows", "cache_batch_idx"])
@pytest.mark.parametrize("window", [(-1, -1), (100, 0)], ids=["causal", "window"])
def test_gpu_kvcache_leftpad_bf16_matches_float64(rng, batch_idx, window):
    c = kvcache_case(rng, "cuda", torch.bfloat16, seqlen_cache=333, batch_cache=5 if batch_idx else None,
                     batch_idx=batch_idx, leftpad=True)
    kvcache_check(c, causal=window == (-1, -1), window=window)
