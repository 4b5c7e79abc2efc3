"""FlashMLA's interface (hopattn.flash_mla_with_kvcache) on torch tensors: q's and the cache's latent
and rotary columns go to the operators as views (no copy), on host tensors (CPU reference) and, on a
Hopper GPU, into the sm_90a MLA kernel at DeepSeek's 576 / 512 with FlashMLA's pages of 64 keys. Both
checked against float64 attention of q over the cache with v its latent columns. Skipped without
torch; the GPU test (test_gpu_*) without a Hopper GPU and a build with kernels."""

import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
from torch_checks import assert_within_rule, attention_math, needs_hopper, torch_generator  # noqa: E402


def paged_cache(generator, device, dtype, seqlens, head_dim, page, heads_k=1, scale=1.0):
    """A pool of pages (two spare) and a block_table that scatters each sequence's pages over it;
    rows past a sequence's keys are NaN. Returns (k_cache, block_table, dense), dense the sequences'
    keys in order (batch, pages_per_seq * page, heads_k, head_dim), NaN past seqlens too."""
    batch = len(seqlens)
    pages_per_seq = max(-(-s // page) for s in seqlens)
    dense = torch.randn(batch, pages_per_seq * page, heads_k, head_dim, device=device,
                        generator=generator) * scale
    for b, used in enumerate(seqlens):
        dense[b, used:] = float("nan")
    dense = dense.to(dtype)
    pool = batch * pages_per_seq + 2
    order = torch.randperm(pool, device=device, generator=generator)[:batch * pages_per_seq]
    block_table = order.view(batch, pages_per_seq).to(torch.int32)
    k_cache = torch.full((pool, page, heads_k, head_dim), float("nan"), device=device, dtype=dtype)
    k_cache[block_table.long().view(-1)] = dense.view(batch * pages_per_seq, page, heads_k, head_dim)
    return k_cache, block_table, dense


def expected(q, dense, seqlens, head_dim_v, dtype, causal):
    """Attention of q over each sequence's keys in use, v their latent columns, in `dtype`."""
    outs, lses = [], []
    for b, used in enumerate(seqlens):
        k = dense[b:b + 1, :used].to(dtype)
        out, lse = attention_math(q[b:b + 1].to(dtype), k, k[..., :head_dim_v], causal=causal)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def test_cpu_flash_mla_with_kvcache_matches_float64(rng):
    generator = torch_generator(rng, "cpu")
    seqlens = [37, 80]
    k_cache, block_table, dense = paged_cache(generator, "cpu", torch.float32, seqlens, 48, 16)
    q = torch.randn(2, 2, 8, 48, generator=generator) * 2
    cache_seqlens = torch.tensor(seqlens, dtype=torch.int32)
    schedule, num_splits = hopattn.get_mla_metadata(cache_seqlens, 8, 1)
    out, lse = hopattn.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 32, schedule,
                                              num_splits, causal=True)
    ref, ref_lse = expected(q, dense, seqlens, 32, torch.float64, causal=True)
    assert out.shape == (2, 2, 8, 32) and lse.shape == (2, 8, 2) and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=1e-5)


def test_cpu_flash_mla_with_kvcache_compiles_fullgraph(rng):
    # Inference engines compile their decoding step: the column views and the operator trace without
    # a graph break, and the compiled call gives the eager call's bits.
    generator = torch_generator(rng, "cpu")
    k_cache, block_table, _ = paged_cache(generator, "cpu", torch.float32, [40, 17], 48, 16)
    q = torch.randn(2, 1, 4, 48, generator=generator)
    cache_seqlens = torch.tensor([40, 17], dtype=torch.int32)
    schedule, num_splits = hopattn.get_mla_metadata()

    def step(q, k_cache, block_table, cache_seqlens):
        return hopattn.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 32, schedule,
                                              num_splits, causal=True)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(q, k_cache, block_table, cache_seqlens),
                         step(q, k_cache, block_table, cache_seqlens)):
        assert torch.equal(got, want)


@needs_hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("seqlen_q, causal", [(1, False), (2, True)], ids=["decode", "mtp_causal"])
def test_gpu_flash_mla_with_kvcache_matches_float64(rng, dtype, seqlen_q, causal):
    # DeepSeek V3 decoding as FlashMLA takes it: 16 query heads on one latent head, q and the cache
    # 576 wide (512 latent, 64 rotary), pages of 64 keys scattered over the pool, NaN past the keys.
    generator = torch_generator(rng, "cuda")
    dtype = getattr(torch, dtype)
    seqlens = [700, 333, 64]
    k_cache, block_table, dense = paged_cache(generator, "cuda", dtype, seqlens, 576, 64)
    q = (torch.randn(3, seqlen_q, 16, 576, device="cuda", generator=generator) * 3).to(dtype)
    cache_seqlens = torch.tensor(seqlens, dtype=torch.int32, device="cuda")
    schedule, num_splits = hopattn.get_mla_metadata(cache_seqlens, 16, 1)
    out, lse = hopattn.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, schedule,
                                              num_splits, causal=causal)
    ref, ref_lse = expected(q, dense, seqlens, 512, torch.float64, causal)
    naive, _ = expected(q, dense, seqlens, 512, dtype, causal)
    assert out.shape == (3, seqlen_q, 16, 512) and out.dtype == dtype and out.device == q.device
    assert_within_rule(out, ref, naive)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=2e-3)
