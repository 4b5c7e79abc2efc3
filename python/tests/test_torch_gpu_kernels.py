"""The sm_90a forward and backward kernels on CUDA tensors against float64 attention with
flash-attention's tolerance rule: dense q/k/v at the native and padded head dims, every masking and
scaling option, packed inputs, any dout layout, reproducible gradients, torch.compile, learnable
sinks, GQA packing on decoding steps, and NotImplementedError where no kernel runs. All named
test_gpu_* (selected with `-k gpu`); skipped without torch, a Hopper GPU and a build with
kernels."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
from torch_checks import (  # noqa: E402
    GRADIENT_FEATURES, assert_gradients_within_rule, assert_within_rule, attention_math,
    bend_for_softcap, check_gradients, cumulative, math_options, needs_hopper, random_qkv,
    reference_gradients, torch_generator, varlen_reference_gradients)


# ---- CUDA tensors: the sm_90a kernels ----------------------------------------------------------

# Head dims: the kernels' tile widths 3 times in 4, else one that runs in the next wider kernel.
NATIVE_HEAD_DIMS = [64, 128, 256]
PADDED_HEAD_DIMS = [8, 40, 96, 136, 200, 248]


def random_gpu_case(rng):
    heads_kv = int(rng.choice([1, 2, 4]))
    head_dims = NATIVE_HEAD_DIMS if rng.random() < 0.75 else PADDED_HEAD_DIMS
    return dict(batch=int(rng.integers(1, 4)), seqlen_q=int(rng.choice([1, 113, 128, 255, 512, 1000])),
                seqlen_k=int(rng.choice([1, 97, 128, 256, 511, 1024])), heads_kv=heads_kv,
                heads_q=heads_kv * int(rng.choice([1, 2, 3])), head_dim=int(rng.choice(head_dims)))


@needs_hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", range(10))
def test_gpu_matches_float64_within_flash_attention_rule(rng, dtype, case):
    s = random_gpu_case(rng)
    causal = bool(rng.integers(2)) and s["seqlen_k"] >= s["seqlen_q"]  # no fully masked rows in the math
    print(s, causal)
    q, k, v = random_qkv((s["batch"], s["seqlen_q"], s["heads_q"], s["head_dim"]),
                         (s["batch"], s["seqlen_k"], s["heads_kv"], s["head_dim"]), getattr(torch, dtype), "cuda")
    out, lse = hopattn.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    ref, ref_lse = attention_math(q.double(), k.double(), v.double(), causal=causal)
    naive, _ = attention_math(q, k, v, causal=causal)
    assert out.device == q.device and out.dtype == q.dtype
    assert_within_rule(out, ref, naive)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=2e-3)


@needs_hopper
def test_gpu_strided_inputs_and_side_stream():
    batch, seqlen, heads, head_dim = 2, 300, 4, 128
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # produced and consumed on a non-default stream
        qkv = torch.randn(batch, heads, 3, seqlen, head_dim, dtype=torch.bfloat16, device="cuda")
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (b, s, h, d) views, not contiguous
        out = hopattn.flash_attn_func(q, k, v, causal=True)
    stream.synchronize()
    ref, _ = attention_math(q.double(), k.double(), v.double(), causal=True)
    naive, _ = attention_math(q, k, v, causal=True)
    assert_within_rule(out, ref, naive)


@needs_hopper
def test_gpu_compile_fullgraph():
    def attend(q, k, v):
        return hopattn.flash_attn_func(q, k, v, causal=True) * 2.0

    q, k, v = random_qkv((2, 256, 8, 64), (2, 256, 2, 64), torch.bfloat16, "cuda")
    compiled = torch.compile(attend, fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), attend(q, k, v), rtol=0, atol=0)


# The GPU backward: bf16/fp16 dense q/k/v at head dim 64, 128 and 256 (its three kernels), with
# every masking and scaling option (GRADIENT_FEATURES), MHA, GQA and MQA, and query/key lengths that
# are not multiples of the kernel's blocks, shorter and longer than each other (causal with more
# queries than keys leaves rows that see no key: their dq must be 0, not NaN) or a single query.
@needs_hopper
@pytest.mark.parametrize("feature", GRADIENT_FEATURES)
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (6, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(100, 300), (300, 100), (1, 239)],
                         ids=["100x300", "300x100", "1x239"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_gradients_match_float64_within_flash_attention_rule(rng, dtype, head_dim, seqlen_q,
                                                                 seqlen_k, heads_q, heads_kv,
                                                                 feature):
    check_gradients(rng, "cuda", getattr(torch, dtype), head_dim, seqlen_q, seqlen_k, heads_q,
                    heads_kv, GRADIENT_FEATURES[feature])


# Head dims between the tile widths run in the next wider kernel (the loads zero-fill the columns
# past d, the stores leave them out), the backward's too: d 8-56 in the d 64 kernel, 72-120 in the
# d 128 one, 136-248 in the d 256 one.
@needs_hopper
@pytest.mark.parametrize("feature", ["plain", "causal", "softcap"])
@pytest.mark.parametrize("head_dim", [8, 40, 96, 112, 136, 200, 248])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_padded_head_dim_gradients_match_float64_within_flash_attention_rule(rng, dtype,
                                                                              head_dim, feature):
    check_gradients(rng, "cuda", getattr(torch, dtype), head_dim, 100, 300, 6, 2,
                    GRADIENT_FEATURES[feature])


# v with a head dim of its own (FA3's headdim_v) runs in the kernel of the wider head dim, the
# narrower tensors zero-filled past theirs: DeepSeek's 192/128, a narrower v within one kernel width,
# wider ones (up to 256).
@needs_hopper
@pytest.mark.parametrize("feature", ["plain", "causal", "softcap"])
@pytest.mark.parametrize("head_dims", [(192, 128), (128, 72), (64, 128), (136, 256)],
                         ids=["192-128", "128-72", "64-128", "136-256"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_v_head_dim_of_its_own_gradients_match_float64_within_flash_attention_rule(
        rng, dtype, head_dims, feature):
    head_dim, head_dim_v = head_dims
    check_gradients(rng, "cuda", getattr(torch, dtype), head_dim, 100, 300, 6, 2,
                    GRADIENT_FEATURES[feature], head_dim_v=head_dim_v)


# FP8 kernels take v with q's head dim only: NotImplementedError naming v.
# Head dims no kernel runs: the library's kUnsupported, as NotImplementedError naming head_dim.
@needs_hopper
@pytest.mark.parametrize("head_dim, dtype, rule", [
    (100, torch.bfloat16, "a multiple of 8 from 8 to 256"),
    (264, torch.float16, "a multiple of 8 from 8 to 256"),
    (72, torch.float8_e4m3fn, "a multiple of 16 from 16 to 256"),
])
def test_gpu_head_dim_without_a_kernel_is_not_implemented(head_dim, dtype, rule):
    q, k, v = (x.to(dtype) for x in random_qkv((1, 64, 4, head_dim), (1, 64, 2, head_dim),
                                               torch.bfloat16, "cuda"))
    with pytest.raises(NotImplementedError, match=f"^q: head_dim {head_dim} .*{re.escape(rule)}"):
        hopattn.flash_attn_func(q, k, v)


@needs_hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_gradients_of_packed_inputs_reach_the_packed_tensor(rng, dtype):
    # q, k, v as strided views of one packed tensor (row strides 3 or 2 times heads x d): the
    # kernel reads them in place, and autograd adds dq, dk, dv into the packed gradient.
    dtype, generator = getattr(torch, dtype), torch_generator(rng, "cuda")
    qkv = torch.randn(2, 200, 3, 4, 128, dtype=dtype, device="cuda", generator=generator,
                      requires_grad=True)
    out = hopattn.flash_attn_qkvpacked_func(qkv, causal=True)
    dout = torch.randn(out.shape, dtype=dtype, device="cuda", generator=generator)
    (dqkv,) = torch.autograd.grad(out, qkv, dout)
    ref_grads, naive_grads = reference_gradients(dout, *qkv.unbind(dim=2), causal=True)
    assert_gradients_within_rule(dqkv.unbind(dim=2), ref_grads, naive_grads)

    q = torch.randn(2, 100, 6, 64, dtype=dtype, device="cuda", generator=generator,
                    requires_grad=True)
    kv = torch.randn(2, 301, 2, 2, 64, dtype=dtype, device="cuda", generator=generator,
                     requires_grad=True)
    out = hopattn.flash_attn_kvpacked_func(q, kv, window_size=(64, 16))
    dout = torch.randn(out.shape, dtype=dtype, device="cuda", generator=generator)
    dq, dkv = torch.autograd.grad(out, (q, kv), dout)
    ref_grads, naive_grads = reference_gradients(dout, q, *kv.unbind(dim=2), window=(64, 16))
    assert_gradients_within_rule((dq, *dkv.unbind(dim=2)), ref_grads, naive_grads)


@needs_hopper
@pytest.mark.parametrize("layout", ["contiguous", "permuted", "unaligned", "broadcast", "sum"])
def test_gpu_backward_takes_any_dout_layout(rng, layout):
    # dout as autograd or a caller may hand it over: strided views TMA can read go in as they are,
    # the rest (an unaligned start, stride 0) are copied first; the gradients are the same either way.
    generator = torch_generator(rng, "cuda")
    shape = (2, 150, 4, 128)
    q, k, v = random_qkv(shape, (2, 170, 2, 128), torch.bfloat16, "cuda", requires_grad=True,
                         generator=generator)
    out = hopattn.flash_attn_func(q, k, v, causal=True)

    def randn(*size):
        return torch.randn(size, dtype=torch.bfloat16, device="cuda", generator=generator)

    if layout == "contiguous":
        dout = randn(*shape)
    elif layout == "permuted":  # (batch, heads, seqlen, d) in memory
        dout = randn(2, 4, 150, 128).permute(0, 2, 1, 3)
    elif layout == "unaligned":  # contiguous, but 2 bytes past an aligned address
        dout = randn(2 * 150 * 4 * 128 + 1)[1:].view(shape)
    elif layout == "broadcast":  # stride 0 along the batch and the heads
        dout = randn(1, 150, 1, 128).expand(shape)
    else:  # what out.sum().backward() hands the backward: a scalar expanded
        dout = torch.ones((), dtype=torch.bfloat16, device="cuda").expand(shape)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_grads, naive_grads = reference_gradients(dout, q, k, v, causal=True)
    assert_gradients_within_rule(grads, ref_grads, naive_grads)


@needs_hopper
def test_gpu_dk_dv_are_reproducible_and_dq_within_rounding(rng):
    # dq is summed with float atomics, whose order varies: only its last bits may differ.
    generator = torch_generator(rng, "cuda")
    q, k, v = random_qkv((2, 333, 8, 128), (2, 517, 2, 128), torch.bfloat16, "cuda",
                         requires_grad=True, generator=generator)
    out = hopattn.flash_attn_func(q, k, v, causal=True)
    dout = torch.randn(out.shape, dtype=out.dtype, device="cuda", generator=generator)
    first = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    second = torch.autograd.grad(out, (q, k, v), dout)
    assert torch.equal(first[1], second[1]) and torch.equal(first[2], second[2])
    torch.testing.assert_close(first[0], second[0])  # bf16 defaults: rtol 1.6e-2, atol 1e-5


@needs_hopper
@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_gpu_deterministic_gradients_are_bitwise_reproducible(rng, varlen, head_dim):
    # deterministic=True: dq too is bitwise identical across runs (many key blocks add into each q
    # block), and the gradients stay within flash-attention's rule.
    generator = torch_generator(rng, "cuda")
    if varlen:
        lengths_q, lengths_k = [333, 1, 1100], [1201, 65, 1000]
        q, k, v = random_qkv((sum(lengths_q), 8, head_dim), (sum(lengths_k), 2, head_dim),
                             torch.bfloat16, "cuda", requires_grad=True, generator=generator)
        out = hopattn.flash_attn_varlen_func(q, k, v, cumulative(lengths_q, "cuda"),
                                             cumulative(lengths_k, "cuda"), max(lengths_q),
                                             max(lengths_k), causal=True, deterministic=True)
    else:
        q, k, v = random_qkv((2, 1111, 8, head_dim), (2, 1303, 2, head_dim), torch.bfloat16,
                             "cuda", requires_grad=True, generator=generator)
        out = hopattn.flash_attn_func(q, k, v, causal=True, deterministic=True)
    dout = torch.randn(out.shape, dtype=out.dtype, device="cuda", generator=generator)
    runs = [torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) for _ in range(3)]
    for again in runs[1:]:
        for name, first, other in zip("qkv", runs[0], again):
            assert torch.equal(first, other), f"d{name} differs between runs"
    if varlen:
        ref_grads, naive_grads = varlen_reference_gradients(dout, q, k, v, lengths_q, lengths_k,
                                                            causal=True)
    else:
        ref_grads, naive_grads = reference_gradients(dout, q, k, v, causal=True)
    assert_gradients_within_rule(runs[0], ref_grads, naive_grads)


@needs_hopper
def test_gpu_compile_fullgraph_backward(rng):
    def attend(q, k, v):
        return hopattn.flash_attn_func(q, k, v, causal=True, softcap=10.0) * 2.0

    generator = torch_generator(rng, "cuda")
    q, k, v = random_qkv((2, 256, 8, 64), (2, 200, 2, 64), torch.bfloat16, "cuda",
                         requires_grad=True, generator=generator)
    compiled = torch.compile(attend, fullgraph=True)
    out = compiled(q, k, v)
    dout = torch.randn(out.shape, dtype=out.dtype, device="cuda", generator=generator)
    compiled_grads = torch.autograd.grad(out, (q, k, v), dout)
    eager_grads = torch.autograd.grad(attend(q, k, v), (q, k, v), dout)
    for name, actual, expected in zip("qkv", compiled_grads, eager_grads):
        # Same kernels on the same values; dq may differ in its last bits (atomic adds).
        torch.testing.assert_close(actual, expected, msg=f"d{name}")


@needs_hopper
@pytest.mark.parametrize("case", ["gqa causal 300x100", "mha window 128x256", "mqa softcap 1x239"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_learnable_sink_within_flash_attention_rule(rng, dtype, case):
    # The sm_90a forward and backward with sinks (head 0 without one) against float64 math, out and
    # the gradients of q, k, v and the sink by flash-attention's rule.
    options = {"gqa causal 300x100": dict(causal=True),
               "mha window 128x256": dict(window_size=(64, 16)),
               "mqa softcap 1x239": dict(softcap=2.0)}[case]
    seqlen_q, seqlen_k = map(int, case.split()[-1].split("x"))
    heads_kv = {"gqa": 2, "mqa": 1}.get(case.split()[0], 4)
    dtype = getattr(torch, dtype)
    generator = torch_generator(rng, "cuda")
    q, k, v = random_qkv((2, seqlen_q, 4, 128), (2, seqlen_k, heads_kv, 128), dtype, "cuda",
                         generator=generator)
    q = bend_for_softcap(q, options)
    sink = torch.rand(4, device="cuda", generator=generator) * 6 - 3
    sink[0] = float("-inf")
    leaves = [x.requires_grad_() for x in (q, k, v, sink)]
    out, lse = hopattn.flash_attn_func(q, k, v, learnable_sink=sink, return_attn_probs=True,
                                       **options)
    dout = torch.randn(out.shape, dtype=dtype, device="cuda", generator=generator)
    dq, dk, dv, dsink = torch.autograd.grad(out, leaves, dout)
    math = math_options(learnable_sink=sink.detach(), **options)
    ref_out, ref_lse = attention_math(q.detach().double(), k.detach().double(),
                                      v.detach().double(), **math)
    naive_out, _ = attention_math(q.detach(), k.detach(), v.detach(), **math)
    softcap_atol = 3e-4 if options.get("softcap") else 0.0  # as assert_gradients_within_rule's
    assert_within_rule(out, ref_out, naive_out,
                       atol=torch.finfo(dtype).eps * ref_out.abs().max().item() + softcap_atol)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=2e-3)
    ref_grads, naive_grads = reference_gradients(dout, q, k, v, **math)
    assert_gradients_within_rule((dq, dk, dv), ref_grads[:3], naive_grads[:3],
                                 softcap=options.get("softcap", 0.0))
    assert_dsink_within_bound(dsink, ref_grads[3], out, ref_out, lse, ref_lse, dout, sink.detach())
    assert dsink[0] == 0  # no sink, no gradient


def assert_dsink_within_bound(dsink, ref_dsink, out, ref_out, lse, ref_lse, dout, sink):
    """dsink_h = -sum_i exp(sink_h - lse_i) D_i with D_i = dout_i . out_i, from the forward's out
    and lse as they were stored. flash-attention's rule does not fit it: a sum over every row of a
    head, whose error is that of the stored out and lse carried through D and exp(sink - lse), not
    one rounding of the result. So: max |dsink - ref| <= 2 sum_i p_i (sum_c |dout_ic| |out_ic -
    ref_ic| + |lse_i - ref_lse_i| |D_i|) (first order, twice for the float32 sums), plus 1e-5 of
    sum_i p_i |D_i|. out (b, s, h, d), lse (b, h, s); p_i = exp(sink_h - ref_lse_i)."""
    assert not dsink.isnan().any(), "dsink: NaN"
    dout, out, lse = dout.double(), out.detach().double(), lse.detach().double()
    p = torch.exp(sink.double().view(1, -1, 1) - ref_lse).nan_to_num(0.0)  # -inf sink: 0
    d_ref = torch.einsum("bshd,bshd->bhs", dout, ref_out)
    d_error = torch.einsum("bshd,bshd->bhs", dout.abs(), (out - ref_out).abs())
    lse_error = torch.where(p > 0, lse - ref_lse, 0.0).abs()  # rows without key or sink: -inf - -inf
    bound = 2 * (p * (d_error + lse_error * d_ref.abs())).sum(dim=(0, 2))
    bound += 1e-5 * (p * d_ref.abs()).sum(dim=(0, 2))
    error = (dsink.double() - ref_dsink.double()).abs()
    assert (error <= bound).all(), f"dsink: errors {error.tolist()} over the bound {bound.tolist()}"


@needs_hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("page_size", [0, 16, 256])
def test_gpu_kvcache_learnable_sink_joins_the_plain_call(rng, dtype, page_size):
    # A decoding step over a cache (cache_seqlens; paged or not; GQA-packed and split by default),
    # with sinks against the same call without: lse' = log(e^lse + e^sink), out' = out e^(lse - lse'),
    # to a few output roundings. The sinks lie around the rows' LSE, so they take a real share.
    generator = torch_generator(rng, "cuda")
    batch, heads_q, heads_kv, head_dim, capacity = 3, 8, 2, 128, 4096
    seqlens = torch.tensor([4096, 700, 1], dtype=torch.int32, device="cuda")
    q = torch.randn(batch, 1, heads_q, head_dim, device="cuda", generator=generator)
    k_cache, v_cache = (torch.randn(batch, capacity, heads_kv, head_dim, device="cuda", generator=generator)
                        for _ in range(2))
    page_table = None
    if page_size:  # the same rows as pages in shuffled order: page p of sequence b at order[b, p]
        pages_per_seq = capacity // page_size
        order = torch.randperm(batch * pages_per_seq, device="cuda", generator=generator)
        page_table = order.view(batch, pages_per_seq).to(torch.int32)
        k_cache, v_cache = (x.reshape(-1, page_size, heads_kv, head_dim)[torch.argsort(order)]
                            for x in (k_cache, v_cache))
    q, k_cache, v_cache = (x.to(getattr(torch, dtype)) for x in (q, k_cache, v_cache))
    call = dict(cache_seqlens=seqlens, page_table=page_table, return_softmax_lse=True)
    out, lse = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, **call)
    sink = lse.float().mean(dim=(0, 2)) + torch.rand(heads_q, device="cuda", generator=generator) * 2 - 1
    sink_out, sink_lse = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, learnable_sink=sink, **call)
    joined = torch.logaddexp(lse.double(), sink.double().view(1, -1, 1))
    share = 1 - torch.exp(lse.double() - joined)  # (batch, heads, 1)
    assert share.max() > 0.2, "the sinks take too small a share to test anything"
    torch.testing.assert_close(sink_lse.double(), joined, rtol=1e-5, atol=1e-5)
    want = out.double() * (1 - share).permute(0, 2, 1).unsqueeze(-1)
    ulp = 2.0 ** (torch.floor(torch.log2(want.abs().clamp_min(2**-14))) - 7)  # bf16 out
    assert ((sink_out.double() - want).abs() <= 3 * ulp + 1e-6).all()


@needs_hopper
@pytest.mark.parametrize("case", ["paged", "fp8"])
def test_gpu_backward_without_a_kernel_is_not_implemented(case):
    # The forward runs on the GPU; the backward has no kernel for paged caches or FP8 inputs, and
    # the Python layer says so instead of computing anything.
    dtype, heads_kv, head_dim = torch.bfloat16, 2, 128
    q, k, v = random_qkv((2, 100, 4, head_dim), (2, 130, heads_kv, head_dim), dtype, "cuda")
    if case == "paged":
        q.requires_grad_()
        pages = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32, device="cuda")
        cache = torch.randn(6, 64, heads_kv, head_dim, dtype=dtype, device="cuda")
        out = hopattn.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=130,
                                              page_table=pages)
        match = "no backward pass for a paged KV cache"
    else:
        q, k, v = (x.to(torch.float8_e4m3fn).requires_grad_() for x in (q, k, v))
        out = hopattn.flash_attn_func(q, k, v, causal=True)
        match = "no backward pass for FP8 inputs"
    assert out.requires_grad
    with pytest.raises(NotImplementedError, match=match):
        torch.autograd.grad(out, q, torch.randn_like(out))


@needs_hopper
@pytest.mark.parametrize("feature", ["window", "softcap", "varlen", "paged"])
def test_gpu_features_are_correct_or_not_implemented(rng, feature):
    dtype, head_dim, heads_q, heads_kv = torch.bfloat16, 128, 4, 2
    q, k, v = random_qkv((2, 200, heads_q, head_dim), (2, 333, heads_kv, head_dim), dtype, "cuda")
    options = dict(window=(-1, -1), softcap=0.0, causal=False)
    try:
        if feature in ("window", "softcap"):
            options.update(window=(64, 16)) if feature == "window" else options.update(softcap=30.0)
            out = hopattn.flash_attn_func(q, k, v, window_size=options["window"], softcap=options["softcap"])
            ref, _ = attention_math(q.double(), k.double(), v.double(), **options)
            naive, _ = attention_math(q, k, v, **options)
            assert_within_rule(out, ref, naive)
        elif feature == "varlen":
            cu_q = torch.tensor([0, 200, 400], dtype=torch.int32, device="cuda")
            cu_k = torch.tensor([0, 333, 666], dtype=torch.int32, device="cuda")
            out = hopattn.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1),
                                                 cu_q, cu_k, 200, 333, causal=True)
            ref, _ = attention_math(q.double(), k.double(), v.double(), causal=True)
            naive, _ = attention_math(q, k, v, causal=True)
            assert_within_rule(out.view(q.shape), ref, naive)
        else:
            page_size = 64
            pages = torch.randperm(2 * 6, device="cuda").to(torch.int32).view(2, 6)
            # Rows past the keys in use hold NaN, as a cache from torch.empty may: the kernel loads
            # the last page's tail with the last K/V block, and none of it may reach out.
            k_cache = torch.full((12, page_size, heads_kv, head_dim), float("nan"), dtype=dtype,
                                 device="cuda")
            v_cache = torch.full_like(k_cache, float("nan"))
            for b in range(2):
                for p in range(6):
                    rows = slice(p * page_size, min((p + 1) * page_size, 333))
                    if rows.start < 333:
                        k_cache[pages[b, p], : rows.stop - rows.start] = k[b, rows]
                        v_cache[pages[b, p], : rows.stop - rows.start] = v[b, rows]
            seqlens = torch.full((2,), 333, dtype=torch.int32, device="cuda")
            out = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                                  page_table=pages, causal=True)
            ref, _ = attention_math(q.double(), k.double(), v.double(), causal=True)
            naive, _ = attention_math(q, k, v, causal=True)
            assert_within_rule(out, ref, naive)
    except NotImplementedError as error:
        pytest.skip(f"{feature} on CUDA not implemented yet: {error}")


# GQA packing on decoding steps: 1 query row, or 3 (speculative decoding, causal), over caches of
# different fill, at the two head ratios the decoding benchmark uses. Packed, unpacked and the
# kernels' own choice must each be within the rule. At head dim 256 (the decoding kernel) packing
# takes at most 8 rows a K/V head: pack_gqa=True past that raises, naming the head dim.
@needs_hopper
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("heads_q, heads_kv", [(32, 8), (28, 4)])
@pytest.mark.parametrize("seqlen_q", [1, 3])
def test_gpu_pack_gqa_decoding_matches_float64(rng, seqlen_q, heads_q, heads_kv, head_dim):
    batch, capacity, dtype = 3, 1037, torch.bfloat16
    generator = torch_generator(rng, "cuda")
    q, k_cache, v_cache = random_qkv((batch, seqlen_q, heads_q, head_dim),
                                     (batch, capacity, heads_kv, head_dim), dtype, "cuda",
                                     generator=generator)
    used = [capacity, 5, int(rng.integers(seqlen_q, capacity))]
    causal = seqlen_q > 1
    print(used, causal)
    refs = []
    for b in range(batch):
        rows = (q[b:b + 1], k_cache[b:b + 1, :used[b]], v_cache[b:b + 1, :used[b]])
        refs.append((attention_math(*(x.double() for x in rows), causal=causal)[0],
                     attention_math(*rows, causal=causal)[0]))
    cache_seqlens = torch.tensor(used, dtype=torch.int32, device="cuda")
    for pack_gqa in (True, False, None):
        if pack_gqa and head_dim > 128 and seqlen_q * (heads_q // heads_kv) > 8:
            with pytest.raises(NotImplementedError, match=f"pack_gqa = kOn at head dim {head_dim}"):
                hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                                causal=causal, pack_gqa=pack_gqa)
            continue
        out = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                              causal=causal, pack_gqa=pack_gqa)
        for b, (ref, naive) in enumerate(refs):
            assert_within_rule(out[b:b + 1], ref, naive,
                               what=f"out (pack_gqa={pack_gqa}, sequence {b})")


# pack_gqa=True where no kernel packs (at head dim 256: a tile of 12 rows). The library refuses KernelOptions::PackGqa::kOn there
# (kUnsupported); its message must come out in NotImplementedError as it is.
PACK_GQA_REFUSALS = {
    "head_dim_256": (dict(head_dim=256, seqlen_q=3),
                     "at head dim 256 for this call (head dims up to 128 pack; above 128, decoding steps "
                     "of at most 8 query rows a K/V head, seqlen_q x heads_q / heads_kv, without "
                     "attention_chunk or seqused_q, and in FP8 without a q block descale, block "
                     "descales of other than multiples of 64 rows or a keys-contiguous v)"),
    "129_heads_per_kv_head": (dict(heads_q=129), "with heads_q / heads_kv = 129 (packing takes at "
                                                 "most 128 query heads per K/V head)"),
}


@needs_hopper
@pytest.mark.parametrize("case", PACK_GQA_REFUSALS)
def test_gpu_pack_gqa_true_where_no_kernel_packs_says_so(case):
    change, reason = PACK_GQA_REFUSALS[case]
    shape = {**dict(heads_q=4, head_dim=128, seqlen_q=1, dtype=torch.bfloat16), **change}
    q, k, v = (x.to(shape["dtype"]) for x in random_qkv(
        (2, shape["seqlen_q"], shape["heads_q"], shape["head_dim"]), (2, 300, 1, shape["head_dim"]),
        torch.bfloat16, "cuda"))
    message = (f"KernelOptions::pack_gqa = kOn {reason} is not supported by the sm_90a forward "
               "kernel yet; it supports bf16/fp16")
    with pytest.raises(NotImplementedError, match=f"^{re.escape(message)}"):
        hopattn.flash_attn_func(q, k, v, pack_gqa=True)
    for pack_gqa in (None, False):  # the same call runs when packing is not forced
        assert hopattn.flash_attn_func(q, k, v, pack_gqa=pack_gqa).isfinite().all()


@needs_hopper
def test_gpu_cupy_arrays_stay_cupy():
    cupy = pytest.importorskip("cupy")
    q, k, v = random_qkv((1, 128, 2, 64), (1, 128, 2, 64), torch.float16, "cuda")
    q_c, k_c, v_c = (cupy.from_dlpack(x) for x in (q, k, v))
    out = hopattn.flash_attn_func(q_c, k_c, v_c, causal=True)
    assert isinstance(out, cupy.ndarray) and out.dtype == np.float16
    ref, _ = attention_math(q.double(), k.double(), v.double(), causal=True)
    naive, _ = attention_math(q, k, v, causal=True)
    assert_within_rule(torch.from_dlpack(out), ref, naive)
