"""The sm_90a kernels where each sequence sees rows of its own, against float64 attention with
flash-attention's tolerance rule: the gradients of packed variable-length sequences, attention_chunk
(dense, varlen and decoding), seqused_q, and a KV cache's keys past cache_seqlens; and the
deterministic backward's refusals. All named test_gpu_* (selected with `-k gpu`); skipped without
torch, a Hopper GPU and a build with kernels."""

import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
from torch_checks import (  # noqa: E402
    GRADIENT_FEATURES, assert_gradients_within_rule, assert_within_rule, attention_math,
    bend_for_softcap, check_gradients, cumulative, float32_cancellation, math_options,
    needs_hopper, random_qkv, torch_generator, varlen_reference_gradients)


# Per sequence: the 64- and 128-row block edges, 300, and empty sequences on either side (a
# sequence without keys: dq 0; without queries: dk = dv = 0); queries and keys of different
# lengths, so causal aligns each sequence's diagonal on its own.
VARLEN_LENGTHS_Q = [1, 63, 0, 129, 300, 64, 65]
VARLEN_LENGTHS_K = [65, 128, 17, 0, 300, 127, 1]


def check_varlen_gradients(rng, dtype, head_dim, heads_q, heads_kv, options):
    """flash_attn_varlen_func's forward and backward on the VARLEN_LENGTHS sequences, packed, each
    against float64 math on its own rows, with flash-attention's rule over the whole packed
    gradients."""
    generator = torch_generator(rng, "cuda")
    total_q, total_k = sum(VARLEN_LENGTHS_Q), sum(VARLEN_LENGTHS_K)
    q, k, v = random_qkv((total_q, heads_q, head_dim), (total_k, heads_kv, head_dim), dtype, "cuda",
                         generator=generator)
    q = bend_for_softcap(q, options)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = hopattn.flash_attn_varlen_func(q, k, v, cumulative(VARLEN_LENGTHS_Q, "cuda"),
                                         cumulative(VARLEN_LENGTHS_K, "cuda"), max(VARLEN_LENGTHS_Q),
                                         max(VARLEN_LENGTHS_K), **options)
    dout = torch.randn(out.shape, dtype=dtype, device="cuda", generator=generator)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_grads, naive_grads = varlen_reference_gradients(dout, q, k, v, VARLEN_LENGTHS_Q,
                                                        VARLEN_LENGTHS_K, **math_options(**options))
    assert_gradients_within_rule(grads, ref_grads, naive_grads, softcap=options.get("softcap", 0.0),
                                 floor=float32_cancellation(q, k, v, dout, **options))


@needs_hopper
@pytest.mark.parametrize("feature", GRADIENT_FEATURES)
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (6, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_varlen_gradients_match_float64_within_flash_attention_rule(rng, dtype, head_dim,
                                                                        heads_q, heads_kv, feature):
    check_varlen_gradients(rng, getattr(torch, dtype), head_dim, heads_q, heads_kv,
                           GRADIENT_FEATURES[feature])


# Padded head dims (see the dense test in test_torch_gpu_kernels.py) on packed sequences: one in
# the d 64 kernel, the narrowest and the widest in the d 256 one.
@needs_hopper
@pytest.mark.parametrize("feature", ["plain", "causal", "softcap"])
@pytest.mark.parametrize("head_dim", [40, 136, 248])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_varlen_gradients_at_padded_head_dims_within_flash_attention_rule(rng, dtype,
                                                                              head_dim, feature):
    check_varlen_gradients(rng, getattr(torch, dtype), head_dim, 6, 2, GRADIENT_FEATURES[feature])


# attention_chunk on the sm_90a kernels, forward and backward: chunks on and off the kernels' 64-
# and 128-key block edges, chunks of one key, alone and on top of causal and a window; with more
# queries than keys the first rows' diagonals lie before key 0 (no key: out 0, dq 0).
GPU_CHUNK_FEATURES = {
    "chunk 128": dict(attention_chunk=128),
    "causal chunk 100": dict(attention_chunk=100, causal=True),
    "window chunk 48": dict(attention_chunk=48, window_size=(64, 16)),
    "causal chunk 1": dict(attention_chunk=1, causal=True),
}


@needs_hopper
@pytest.mark.parametrize("feature", GPU_CHUNK_FEATURES)
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (6, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(100, 300), (300, 100), (1, 239)],
                         ids=["100x300", "300x100", "1x239"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_attention_chunk_gradients_match_float64_within_flash_attention_rule(
        rng, head_dim, seqlen_q, seqlen_k, heads_q, heads_kv, feature):
    check_gradients(rng, "cuda", torch.bfloat16, head_dim, seqlen_q, seqlen_k, heads_q, heads_kv,
                    GPU_CHUNK_FEATURES[feature])


@needs_hopper
@pytest.mark.parametrize("feature", GPU_CHUNK_FEATURES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_varlen_attention_chunk_gradients_match_float64_within_flash_attention_rule(
        rng, dtype, head_dim, feature):
    # Each sequence's chunks count from its own first key (VARLEN_LENGTHS: 65 and 129 rows, empty
    # sequences on either side).
    check_varlen_gradients(rng, getattr(torch, dtype), head_dim, 6, 2, GPU_CHUNK_FEATURES[feature])


@needs_hopper
@pytest.mark.parametrize("pack_gqa", [None, True, False])
@pytest.mark.parametrize("num_splits", [0, 1, 3])
def test_gpu_attention_chunk_decoding_on_every_route_matches_float64(rng, num_splits, pack_gqa):
    # Decoding steps (1 and 3 query rows) over 2000 keys, GQA 32 over 8: the routes a decode takes
    # (split-KV pieces, GQA packing) must each keep to the chunk of the diagonal.
    generator = torch_generator(rng, "cuda")
    for seqlen_q, options in ((1, dict(attention_chunk=700)),
                              (3, dict(attention_chunk=512, causal=True))):
        q, k, v = random_qkv((2, seqlen_q, 32, 128), (2, 2000, 8, 128), torch.bfloat16, "cuda",
                             generator=generator)
        out = hopattn.flash_attn_func(q, k, v, num_splits=num_splits, pack_gqa=pack_gqa, **options)
        ref, _ = attention_math(q.double(), k.double(), v.double(), **math_options(**options))
        naive, _ = attention_math(q, k, v, **math_options(**options))
        assert_within_rule(out, ref, naive, what=f"out, seqlen_q {seqlen_q}")


# seqused_q on CUDA tensors: as on the CPU (test_cpu_varlen_seqused_q_...), q and dout hold NaN past
# the rows in use; out, lse and the gradients match the CPU reference backend run on the same values
# (float32), and the rows past them come out as rows that see no key (out 0, lse -inf, dq 0).
@needs_hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_varlen_seqused_q_matches_the_cpu_reference(rng, dtype):
    generator = torch_generator(rng, "cuda")
    cu_q, cu_k, used = [0, 130, 200, 265], [0, 300, 365, 500], [129, 0, 64]
    q = torch.randn(265, 6, 128, dtype=getattr(torch, dtype), device="cuda", generator=generator)
    k, v = (torch.randn(500, 2, 128, dtype=q.dtype, device="cuda", generator=generator)
            for _ in range(2))
    dout = torch.randn(q.shape, dtype=q.dtype, device="cuda", generator=generator)
    past = torch.ones(265, dtype=torch.bool, device="cuda")
    for b in range(3):
        past[cu_q[b]:cu_q[b] + used[b]] = False
    q[past] = float("nan")
    dout[past] = float("nan")
    results = []
    for device, operand in (("cuda", lambda x: x), ("cpu", lambda x: x.detach().float().cpu())):
        leaves = [operand(x).requires_grad_() for x in (q, k, v)]
        out, lse = hopattn.flash_attn_varlen_func(
            *leaves, torch.tensor(cu_q, dtype=torch.int32, device=device),
            torch.tensor(cu_k, dtype=torch.int32, device=device), 130, 300,
            seqused_q=torch.tensor(used, dtype=torch.int32, device=device), causal=True,
            return_attn_probs=True)
        grads = torch.autograd.grad(out, leaves, operand(dout))
        results.append([x.detach().float().cpu() for x in (out, lse, *grads)])
    (out, lse, dq, dk, dv), (ref_out, ref_lse, *ref_grads) = results
    past = past.cpu()
    assert (out[past] == 0).all() and torch.isneginf(lse[:, past]).all() and (dq[past] == 0).all()
    torch.testing.assert_close(lse[:, ~past], ref_lse[:, ~past], rtol=0, atol=1e-3)
    for name, actual, expected in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), (ref_out, *ref_grads)):
        if name in ("out", "dq"):
            actual, expected = actual[~past], expected[~past]
        assert actual.isfinite().all(), name
        error = (actual - expected).abs().max() / expected.abs().max()
        assert error < 2e-2, f"{name}: max error {error:.3g} of the largest reference value"


# The deterministic backward kernels take neither seqused_q nor chunks (their variant for them,
# BwdTraits::kChunksAndSequsedQ, is not deterministic): NotImplementedError naming the argument, and
# the same call without deterministic runs.
@needs_hopper
@pytest.mark.parametrize("feature", ["seqused_q", "attention_chunk"])
def test_gpu_deterministic_backward_refuses_seqused_q_and_chunks(rng, feature):
    generator = torch_generator(rng, "cuda")
    q, k, v = (torch.randn(200, 2, 64, dtype=torch.bfloat16, device="cuda", generator=generator)
               .requires_grad_() for _ in range(3))
    cu = torch.tensor([0, 130, 200], dtype=torch.int32, device="cuda")
    extra = ({"seqused_q": torch.tensor([129, 70], dtype=torch.int32, device="cuda")}
             if feature == "seqused_q" else {"attention_chunk": 64})
    for deterministic in (True, False):
        out = hopattn.flash_attn_varlen_func(q, k, v, cu, cu, 130, 130, causal=True,
                                             deterministic=deterministic, **extra)
        if deterministic:
            with pytest.raises(NotImplementedError, match=feature):
                torch.autograd.grad(out.sum(), (q, k, v))
        else:
            assert all(g.isfinite().all() for g in torch.autograd.grad(out.sum(), (q, k, v)))


@needs_hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("unused_rows", ["random", "nan", "inf"])
def test_gpu_kvcache_gradients_stop_at_cache_seqlens(rng, dtype, unused_rows):
    # A dense cache with keys in use per sequence (seqused_k): keys past cache_seqlens get exactly
    # zero gradients; the used ones match float64 math on the used keys. The cache rows past them may
    # hold anything (a cache from torch.empty): NaN or Inf there must reach no gradient.
    dtype, generator = getattr(torch, dtype), torch_generator(rng, "cuda")
    batch, seqlen_q, seqlen_cache, used = 3, 100, 300, [170, 300, 1]
    q, k_cache, v_cache = random_qkv((batch, seqlen_q, 4, 128), (batch, seqlen_cache, 2, 128), dtype,
                                     "cuda", requires_grad=True, generator=generator)
    if unused_rows != "random":
        with torch.no_grad():
            for b in range(batch):
                k_cache[b, used[b]:] = float(unused_rows)
                v_cache[b, used[b]:] = float(unused_rows)
    cache_seqlens = torch.tensor(used, dtype=torch.int32, device="cuda")
    out = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=True)
    dout = torch.randn(out.shape, dtype=dtype, device="cuda", generator=generator)
    grads = torch.autograd.grad(out, (q, k_cache, v_cache), dout)
    ref_grads, naive_grads = varlen_reference_gradients(
        dout.flatten(0, 1), q.flatten(0, 1), k_cache.flatten(0, 1), v_cache.flatten(0, 1),
        [seqlen_q] * batch, [seqlen_cache] * batch, used, causal=True)
    for b in range(batch):
        assert not grads[1][b, used[b]:].any() and not grads[2][b, used[b]:].any(), \
            f"sequence {b}: keys past cache_seqlens got gradients"
    assert_gradients_within_rule([g.flatten(0, 1) for g in grads], ref_grads, naive_grads)
