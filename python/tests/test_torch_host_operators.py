"""The custom operators (torch.ops.hopattn.fwd and bwd) on host tensors, through the CPU reference
backend: their registration (opcheck: fake kernels, autograd), gradients against float64 autograd,
torch.compile, the backward's refusals, and the options they carry besides q, k and v
(learnable_sink, attention_chunk, v with a head dim of its own, qv, seqused_q). Skipped without
torch."""

import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
import hopattn.torch  # noqa: E402,F401  (registers torch.ops.hopattn)
from torch_checks import (  # noqa: E402
    FWD_DEFAULTS, attention_math, check_gradients, fwd_op, math_options, random_qkv,
    torch_generator)


# ---- host tensors: operator registration and autograd through the CPU reference --------------

def test_cpu_forward_returns_torch_tensors_matching_float64():
    q, k, v = random_qkv((2, 9, 4, 32), (2, 13, 2, 32), torch.float32, "cpu")
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, softcap=6.0, return_attn_probs=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and lse.shape == (2, 4, 9)
    ref, ref_lse = attention_math(q.double(), k.double(), v.double(), causal=True, softcap=6.0)
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_gradients_match_float64_autograd(causal):
    q, k, v = random_qkv((2, 7, 4, 16), (2, 10, 1, 16), torch.float32, "cpu", requires_grad=True)
    out = hopattn.flash_attn_func(q, k, v, causal=causal, window_size=(4, -1))
    grad = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, _ = attention_math(q64, k64, v64, causal=causal, window=(4, -1))
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), grad.double())
    for name, actual, expected in zip("qkv", (dq, dk, dv), ref_grads):
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, msg=f"d{name}")


def test_cpu_varlen_gradients_flow():
    q = torch.randn(7, 2, 8, requires_grad=True)
    k = torch.randn(9, 2, 8, requires_grad=True)
    v = torch.randn(9, 2, 8, requires_grad=True)
    cu_q, cu_k = torch.tensor([0, 3, 7], dtype=torch.int32), torch.tensor([0, 5, 9], dtype=torch.int32)
    out = hopattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 5, causal=True)
    out.square().sum().backward()
    # Sequence 0's queries see only sequence 0's keys: keys 5..8 get no gradient from them.
    q0 = q.detach()[:3].clone().requires_grad_()
    ref, _ = attention_math(q0[None].double(), k.detach()[None, :5].double(), v.detach()[None, :5].double(),
                            causal=True)
    ref.square().sum().backward()
    torch.testing.assert_close(q.grad[:3].double(), q0.grad.double(), rtol=1e-5, atol=1e-5)


def test_cpu_deterministic_reaches_the_backward(deterministic_passed):
    # deterministic=True flows from the entry points through fwd's autograd formula into the
    # library's backward (the CPU backend is deterministic either way: the gradients are equal).
    q, k, v = random_qkv((2, 9, 4, 16), (2, 11, 2, 16), torch.float32, "cpu", requires_grad=True)
    dout = torch.randn(2, 9, 4, 16)
    grads = [torch.autograd.grad(hopattn.flash_attn_func(q, k, v, causal=True, deterministic=flag),
                                 (q, k, v), dout) for flag in (True, False)]
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    out = hopattn.flash_attn_varlen_func(q[0], k[0, :9], v[0, :9], cu, cu, 5, 5, deterministic=True)
    out.sum().backward()
    qkv = torch.randn(2, 7, 3, 2, 16, requires_grad=True)
    hopattn.flash_attn_qkvpacked_func(qkv, deterministic=True).sum().backward()
    assert deterministic_passed == [True, False, True, True]


def test_cpu_packed_gradients_reach_the_packed_tensor():
    qkv = torch.randn(2, 9, 3, 2, 16, requires_grad=True)
    hopattn.flash_attn_qkvpacked_func(qkv, causal=True).square().sum().backward()
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    hopattn.flash_attn_func(q, k, v, causal=True).square().sum().backward()
    expected = torch.stack([q.grad, k.grad, v.grad], dim=2)
    torch.testing.assert_close(qkv.grad, expected, rtol=0, atol=0)  # the same kernels, bit for bit


def test_opcheck_fake_kernel_and_autograd_registration():
    q, k, v = random_qkv((1, 5, 2, 8), (1, 6, 1, 8), torch.float32, "cpu", requires_grad=True)
    for pack_gqa in (None, True, False):
        args = (q, k, v, None, True, -1, -1, 0.0, None, None, 0, 0, None, None, 0, pack_gqa, None,
                None, None, None, None, None, 128, 128)
        torch.library.opcheck(torch.ops.hopattn.fwd.default, args)


def test_compile_fullgraph_on_cpu():
    def attend(q, k, v):
        return hopattn.flash_attn_func(q, k, v, causal=True).sum(dim=-1)

    q, k, v = random_qkv((2, 6, 2, 16), (2, 6, 2, 16), torch.float32, "cpu", requires_grad=True)
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    compiled(q, k, v).sum().backward()
    eager_q = q.detach().clone().requires_grad_()
    attend(eager_q, k.detach(), v.detach()).sum().backward()
    torch.testing.assert_close(q.grad, eager_q.grad, rtol=0, atol=0)


def test_paged_backward_is_not_implemented():
    q = torch.randn(1, 2, 2, 8, requires_grad=True)
    cache = torch.randn(2, 4, 1, 8)
    out = hopattn.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=5,
                                          page_table=torch.tensor([[1, 0]], dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="paged KV cache"):
        out.sum().backward()


def test_fp8_backward_is_not_implemented():
    # The CPU reference runs the FP8 forward; no backend differentiates it.
    q, k, v = (x.to(torch.float8_e4m3fn).requires_grad_()
               for x in random_qkv((1, 4, 2, 16), (1, 6, 1, 16), torch.bfloat16, "cpu"))
    out = hopattn.flash_attn_func(q, k, v)
    assert out.requires_grad
    with pytest.raises(NotImplementedError, match="no backward pass for FP8 inputs"):
        out.sum().backward()


def test_cpu_not_implemented_from_the_library_reaches_the_backward_caller(monkeypatch):
    # On CUDA the library answers kUnsupported for what the GPU backward lacks; the error must come
    # out of the custom op and the autograd engine as the NotImplementedError it was, message kept.
    message = "head dim 264 is not supported by the sm_90a backward kernel yet"

    def unsupported(*args, **kwargs):
        raise NotImplementedError(message)

    q, k, v = random_qkv((1, 4, 2, 16), (1, 6, 2, 16), torch.float32, "cpu", requires_grad=True)
    out = hopattn.flash_attn_func(q, k, v)
    monkeypatch.setattr(hopattn._core, "backward", unsupported)
    with pytest.raises(NotImplementedError, match=f"^{message}$"):
        out.sum().backward()


def test_tma_addressable_dout_is_passed_on_and_any_other_copied():
    # What the backward does with dout on CUDA, checked on host tensors (the test is on strides
    # and addresses only): kept when TMA can read it, else cloned into a fresh contiguous tensor.
    buffer = torch.randn(2 * 4 * 100 * 64 + 1, dtype=torch.bfloat16)
    dense = buffer[:-1].view(2, 100, 4, 64)
    permuted = buffer[:-1].view(2, 4, 100, 64).permute(0, 2, 1, 3)  # aligned, not contiguous
    unaligned = buffer[1:].view(2, 100, 4, 64)  # contiguous, 2 bytes off
    broadcast = torch.randn(1, 100, 1, 64, dtype=torch.bfloat16).expand(2, 100, 4, 64)
    scalar = torch.ones((), dtype=torch.bfloat16).expand(2, 100, 4, 64)  # what .sum() hands back
    narrow_rows = torch.randn(2, 100, 4, 65, dtype=torch.bfloat16)[..., :64]  # 130-byte rows
    assert dense.data_ptr() % 16 == 0  # torch's allocators align to 64 bytes or more
    for kept in (dense, permuted, dense[:, :, :1]):
        assert hopattn.torch._tma_ready(kept) is kept
    for copied in (unaligned, broadcast, scalar, narrow_rows):
        ready = hopattn.torch._tma_ready(copied)
        assert ready is not copied and ready.is_contiguous() and ready.data_ptr() % 16 == 0
        assert torch.equal(ready, copied)


@pytest.mark.parametrize("case", ["gqa causal 7x20", "mqa window 20x7", "softcap scale 1x9"])
def test_cpu_bf16_gradients_within_flash_attention_rule(rng, case):
    # The GPU tests' reference and rule, run against the CPU reference backend (float64 inside,
    # rounded once), so that they are known to work before they meet the kernel; also covers rows
    # that see no key (mqa window 20x7: the first rows see none).
    options = {"gqa causal 7x20": dict(causal=True), "mqa window 20x7": dict(window_size=(3, 2)),
               "softcap scale 1x9": dict(softcap=2.0, softmax_scale=0.3)}[case]
    seqlen_q, seqlen_k = map(int, case.split()[-1].split("x"))
    heads_kv = {"gqa": 2, "mqa": 1}.get(case.split()[0], 4)
    check_gradients(rng, "cpu", torch.bfloat16, 32, seqlen_q, seqlen_k, 4, heads_kv, options)


# ---- learnable_sink on host tensors: forward, its gradient and q/k/v's -------------------------

def sink_case(rng, dtype=torch.float32):
    """GQA (4 q heads over 2 kv heads) with seqlen_q > seqlen_k, so that causal leaves the first
    rows without a key; sinks in the scores' range, and -inf (none) for head 1."""
    generator = torch_generator(rng, "cpu")
    q, k, v = random_qkv((2, 9, 4, 16), (2, 6, 2, 16), dtype, "cpu", generator=generator)
    sink = torch.rand(4, generator=generator) * 6 - 3
    sink[1] = float("-inf")
    return q, k, v, sink, torch.randn(q.shape, dtype=dtype, generator=generator)


def sink_gradient_formula(sink, out, lse, dout):
    """float64 dsink_h = -sum over h's rows i of exp(sink_h - lse_i) (dout_i . out_i)
    (hopattn::BwdArgs), from the forward's own out and lse."""
    weight = torch.exp(sink.double()[None, :, None] - lse.double())  # (batch, heads_q, seqlen_q)
    weight = torch.where(lse > float("-inf"), weight, 0.0)  # rows with neither keys nor a sink
    return -(weight * torch.einsum("bihd,bihd->bhi", dout.double(), out.double())).sum(dim=(0, 2))


def test_cpu_learnable_sink_gradients_match_float64_autograd(rng):
    q, k, v, sink, dout = sink_case(rng)
    leaves = [x.requires_grad_() for x in (q, k, v, sink)]
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, learnable_sink=sink,
                                       return_attn_probs=True)
    grads = torch.autograd.grad(out, leaves, dout)
    leaves64 = [x.detach().double().requires_grad_() for x in leaves]
    ref, ref_lse = attention_math(*leaves64[:3], causal=True, sink=leaves64[3])
    ref_grads = torch.autograd.grad(ref, leaves64, dout.double())
    assert (out[:, :3] == 0).all()  # rows without a key: out 0, lse the sink (-inf for head 1)
    assert torch.equal(lse[:, :, :3], sink.detach()[None, :, None].expand(2, 4, 3))
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-6, atol=1e-6)
    for name, actual, expected in zip(("q", "k", "v", "sink"), grads, ref_grads):
        assert actual.dtype == torch.float32
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, msg=f"d{name}")
    torch.testing.assert_close(grads[3].double(),
                               sink_gradient_formula(sink.detach(), out.detach(), lse, dout),
                               rtol=1e-5, atol=1e-5)
    assert grads[3][1] == 0  # no sink, no gradient


def test_cpu_varlen_learnable_sink_gradient_sums_over_sequences(rng):
    generator = torch_generator(rng, "cpu")
    q = torch.randn(7, 4, 8, generator=generator)
    k, v = (torch.randn(9, 2, 8, generator=generator) for _ in range(2))
    sink = torch.rand(4, generator=generator) * 4 - 2
    dout = torch.randn(q.shape, generator=generator)
    cu_q, cu_k = [0, 3, 7], [0, 5, 9]
    leaves = [x.requires_grad_() for x in (q, k, v, sink)]
    out = hopattn.flash_attn_varlen_func(q, k, v, torch.tensor(cu_q, dtype=torch.int32),
                                         torch.tensor(cu_k, dtype=torch.int32), 4, 5, causal=True,
                                         learnable_sink=sink)
    grads = torch.autograd.grad(out, leaves, dout)
    q64, k64, v64, sink64 = leaves64 = [x.detach().double().requires_grad_() for x in leaves]
    ref = torch.cat([attention_math(q64[None, cu_q[b]:cu_q[b + 1]], k64[None, cu_k[b]:cu_k[b + 1]],
                                    v64[None, cu_k[b]:cu_k[b + 1]], causal=True, sink=sink64)[0][0]
                     for b in range(2)])
    ref_grads = torch.autograd.grad(ref, leaves64, dout.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    for name, actual, expected in zip(("q", "k", "v", "sink"), grads, ref_grads):
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, msg=f"d{name}")


@pytest.mark.parametrize("layout", ["bfloat16", "float64", "strided float32"])
def test_cpu_sink_of_any_floating_dtype_gets_its_gradient_in_that_dtype(rng, layout):
    # The conversion to float32 happens before the operator, so autograd converts dsink back.
    q, k, v, sink, dout = sink_case(rng)
    if layout == "strided float32":
        parameter = torch.nn.Parameter(sink.repeat_interleave(2))
        given = parameter[::2]
    else:
        parameter = given = torch.nn.Parameter(sink.to(getattr(torch, layout)))
    out = hopattn.flash_attn_func(q, k, v, causal=True, learnable_sink=given)
    out.backward(dout)
    float32_sink = given.detach().float().requires_grad_()
    expected = hopattn.flash_attn_func(q, k, v, causal=True, learnable_sink=float32_sink)
    expected.backward(dout)
    assert parameter.grad.dtype == parameter.dtype
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    grad = parameter.grad[::2] if layout == "strided float32" else parameter.grad
    torch.testing.assert_close(grad, float32_sink.grad.to(parameter.dtype), rtol=0, atol=0)


def test_cpu_eager_shortcut_and_operator_agree_with_a_sink(rng):
    q, k, v, sink, _ = sink_case(rng)
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, learnable_sink=sink,
                                       return_attn_probs=True)
    op_out, op_lse = fwd_op(q, k, v, causal=True, learnable_sink=sink)
    torch.testing.assert_close(out, op_out, rtol=0, atol=0)
    torch.testing.assert_close(lse, op_lse, rtol=0, atol=0)
    args = (q, k, v, *{**FWD_DEFAULTS, "learnable_sink": sink}.values())
    assert hopattn.torch._only_the_kernel_would_run(args)
    args = (q, k, v, *{**FWD_DEFAULTS, "learnable_sink": sink.requires_grad_()}.values())
    assert not hopattn.torch._only_the_kernel_would_run(args)  # autograd must record the call


def test_opcheck_with_a_learnable_sink(rng):
    q, k, v, sink, dout = sink_case(rng)
    out, lse = fwd_op(q, k, v, causal=True, learnable_sink=sink)
    bwd_args = (dout, q, k, v, out, lse, None, True, -1, -1, 0.0, None, None, 0, 0, None, False, sink)
    torch.library.opcheck(torch.ops.hopattn.bwd.default, bwd_args)
    dq, dk, dv, dsink = torch.ops.hopattn.bwd(*bwd_args)
    assert dsink.shape == (4,) and dsink.dtype == torch.float32
    assert len(torch.ops.hopattn.bwd(*bwd_args[:-1])) == 3  # without a sink, no dsink
    leaves = [x.requires_grad_() for x in (q, k, v, sink)]
    fwd_args = (*leaves[:3], *{**FWD_DEFAULTS, "causal": True, "learnable_sink": leaves[3]}.values())
    torch.library.opcheck(torch.ops.hopattn.fwd.default, fwd_args)


def test_compile_fullgraph_with_a_learnable_sink(rng):
    def attend(q, k, v, sink):
        return hopattn.flash_attn_func(q, k, v, causal=True, learnable_sink=sink)

    q, k, v, sink, dout = sink_case(rng)
    leaves = [x.requires_grad_() for x in (q, k, v, sink)]
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    grads = torch.autograd.grad(compiled(*leaves), leaves, dout)
    eager_grads = torch.autograd.grad(attend(*leaves), leaves, dout)
    for actual, expected in zip(grads, eager_grads):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)


# ---- attention_chunk on host tensors: forward and gradients through the operators ----------------

# seqlen_q 37 over seqlen_k 101 (and 37 over 11: the first 26 rows' diagonals lie before key 0, so
# they see no key: out 0, dq 0), chunks cutting the keys in uneven pieces, on top of each mask.
CPU_CHUNK_CASES = {
    "gqa chunk 16 37x101": dict(attention_chunk=16),
    "gqa causal chunk 7 37x101": dict(attention_chunk=7, causal=True),
    "mqa window chunk 16 37x101": dict(attention_chunk=16, window_size=(20, 5)),
    "gqa causal chunk 4 37x11": dict(attention_chunk=4, causal=True),
    "mqa chunk 50 37x11": dict(attention_chunk=50),
}


@pytest.mark.parametrize("case", CPU_CHUNK_CASES)
def test_cpu_attention_chunk_gradients_match_float64_autograd(rng, case):
    options = CPU_CHUNK_CASES[case]
    seqlen_q, seqlen_k = map(int, case.split()[-1].split("x"))
    heads_kv = 1 if case.startswith("mqa") else 2
    generator = torch_generator(rng, "cpu")
    q, k, v = random_qkv((2, seqlen_q, 4, 16), (2, seqlen_k, heads_kv, 16), torch.float32, "cpu",
                         requires_grad=True, generator=generator)
    out, lse = hopattn.flash_attn_func(q, k, v, return_attn_probs=True, **options)
    dout = torch.randn(out.shape, generator=generator)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    leaves64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref, ref_lse = attention_math(*leaves64, **math_options(**options))
    ref_grads = torch.autograd.grad(ref, leaves64, dout.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-6, atol=1e-6)
    for name, actual, expected in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, msg=f"d{name}")
    if seqlen_q > seqlen_k:  # rows before key 0: nothing seen, nothing to differentiate
        assert (out[:, :26] == 0).all() and torch.isneginf(lse[:, :, :26]).all()
        assert (grads[0][:, :26] == 0).all()


def test_cpu_varlen_attention_chunk_gradients_count_chunks_per_sequence(rng):
    generator = torch_generator(rng, "cpu")
    q = torch.randn(40, 4, 8, generator=generator)
    k, v = (torch.randn(53, 2, 8, generator=generator) for _ in range(2))
    dout = torch.randn(q.shape, generator=generator)
    cu_q, cu_k = [0, 13, 13, 40], [0, 30, 35, 53]  # sequence 1 has keys but no query
    leaves = [x.requires_grad_() for x in (q, k, v)]
    out = hopattn.flash_attn_varlen_func(q, k, v, torch.tensor(cu_q, dtype=torch.int32),
                                         torch.tensor(cu_k, dtype=torch.int32), 27, 30,
                                         causal=True, attention_chunk=6)
    grads = torch.autograd.grad(out, leaves, dout)
    leaves64 = [x.detach().double().requires_grad_() for x in leaves]
    q64, k64, v64 = leaves64
    ref = torch.cat([attention_math(q64[None, cu_q[b]:cu_q[b + 1]], k64[None, cu_k[b]:cu_k[b + 1]],
                                    v64[None, cu_k[b]:cu_k[b + 1]], causal=True,
                                    attention_chunk=6)[0][0]
                     for b in range(3)])
    ref_grads = torch.autograd.grad(ref, leaves64, dout.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    for name, actual, expected in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, msg=f"d{name}")
    assert not grads[1][30:35].any() and not grads[2][30:35].any()  # keys no query reads


def test_cpu_attention_chunk_with_a_sink_and_bf16_within_flash_attention_rule(rng):
    check_gradients(rng, "cpu", torch.bfloat16, 32, 37, 101, 4, 2,
                    dict(attention_chunk=16, causal=True, softcap=4.0))
    q, k, v, sink, dout = sink_case(rng)  # 9 queries over 6 keys
    leaves = [x.requires_grad_() for x in (q, k, v, sink)]
    out = hopattn.flash_attn_func(q, k, v, attention_chunk=4, learnable_sink=sink)
    grads = torch.autograd.grad(out, leaves, dout)
    leaves64 = [x.detach().double().requires_grad_() for x in leaves]
    ref, _ = attention_math(*leaves64[:3], attention_chunk=4, sink=leaves64[3])
    ref_grads = torch.autograd.grad(ref, leaves64, dout.double())
    for name, actual, expected in zip(("q", "k", "v", "sink"), grads, ref_grads):
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, msg=f"d{name}")


def test_cpu_attention_chunk_on_every_path_and_opcheck(rng):
    # A plain eager call (the kernel directly), the operator through the dispatcher, and a
    # torch.compile trace give the same bits; opcheck checks the fake kernels and the autograd
    # registration with the chunk as the operators' last argument.
    generator = torch_generator(rng, "cpu")
    q, k, v = random_qkv((2, 9, 4, 16), (2, 21, 2, 16), torch.float32, "cpu", generator=generator)
    out, lse = hopattn.flash_attn_func(q, k, v, attention_chunk=5, return_attn_probs=True)
    op_out, op_lse = fwd_op(q, k, v, attention_chunk=5)
    torch.testing.assert_close(out, op_out, rtol=0, atol=0)
    torch.testing.assert_close(lse, op_lse, rtol=0, atol=0)
    assert not torch.equal(out, fwd_op(q, k, v)[0])
    compiled = torch.compile(lambda q, k, v: hopattn.flash_attn_func(q, k, v, attention_chunk=5),
                             fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(q, k, v), out, rtol=0, atol=0)

    leaves = [x.requires_grad_() for x in (q, k, v)]
    torch.library.opcheck(torch.ops.hopattn.fwd.default,
                          (*leaves, *{**FWD_DEFAULTS, "attention_chunk": 5}.values()))
    bwd_args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out, lse, None, False,
                -1, -1, 0.0, None, None, 0, 0, None, False, None, 5)
    torch.library.opcheck(torch.ops.hopattn.bwd.default, bwd_args)
    grads = torch.autograd.grad(hopattn.flash_attn_func(*leaves, attention_chunk=5), leaves,
                                bwd_args[0])
    for actual, expected in zip(grads, torch.ops.hopattn.bwd(*bwd_args)):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)


# ---- v with a head dim of its own (FA3's headdim_v) on host tensors ------------------------------

@pytest.mark.parametrize("head_dims", [(48, 16), (8, 40)], ids=["narrower-v", "wider-v"])
def test_cpu_v_head_dim_of_its_own_through_autograd_and_opcheck(rng, head_dims):
    # out (and dout, dv) end in v's head dim; gradients against float64 math; the operators' fake
    # kernels give out that shape (opcheck).
    head_dim, head_dim_v = head_dims
    generator = torch_generator(rng, "cpu")
    q = torch.randn(2, 9, 4, head_dim, generator=generator, requires_grad=True)
    k = torch.randn(2, 21, 2, head_dim, generator=generator, requires_grad=True)
    v = torch.randn(2, 21, 2, head_dim_v, generator=generator, requires_grad=True)
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert out.shape == (2, 9, 4, head_dim_v)
    dout = torch.randn(out.shape, generator=generator)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    leaves64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref, ref_lse = attention_math(*leaves64, causal=True)
    ref_grads = torch.autograd.grad(ref, leaves64, dout.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-6, atol=1e-6)
    for name, actual, expected in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, msg=f"d{name}")
    torch.library.opcheck(torch.ops.hopattn.fwd.default,
                          (q, k, v, *{**FWD_DEFAULTS, "causal": True}.values()))


# ---- qv (FA3's; MLA decoding) on host tensors: forward only --------------------------------------

def test_cpu_qv_forward_matches_float64_and_its_backward_is_refused(rng):
    # The scores take qv . v beside q . k (attention over q | qv and k | v, scale 1/sqrt(d + d_v)); as
    # in FA3 there is no backward: asking for one raises NotImplementedError naming qv.
    generator = torch_generator(rng, "cpu")
    q, k = random_qkv((2, 5, 4, 8), (2, 11, 2, 8), torch.float32, "cpu", generator=generator)[:2]
    qv = torch.randn(2, 5, 4, 24, generator=generator)
    v = torch.randn(2, 11, 2, 24, generator=generator, requires_grad=True)
    out = hopattn.flash_attn_func(q, k, v, qv=qv, causal=True)
    ref, _ = attention_math(torch.cat([q, qv], -1).double(), torch.cat([k, v.detach()], -1).double(),
                            v.detach().double(), causal=True, softmax_scale=32 ** -0.5)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="qv"):
        out.sum().backward()
    torch.library.opcheck(torch.ops.hopattn.fwd.default,
                          (q, k, v.detach(), *{**FWD_DEFAULTS, "causal": True, "qv": qv}.values()),
                          test_utils=("test_schema", "test_faketensor"))


# ---- seqused_q on host tensors: flash-attention 3's query rows in use --------------------------

def test_cpu_varlen_seqused_q_reads_and_differentiates_only_the_rows_in_use(rng):
    # Sequence b's first seqused_q[b] rows are its queries (causal aligned to them); q and dout hold
    # NaN past them, which must reach nothing. The out and lse hopattn allocates start there as rows
    # that see no key (out 0, lse -inf), and dq there is 0.
    generator = torch_generator(rng, "cpu")
    cu_q, cu_k, used = [0, 13, 20, 40], [0, 30, 35, 53], [9, 0, 20]
    q = torch.randn(40, 4, 8, generator=generator)
    k, v = (torch.randn(53, 2, 8, generator=generator) for _ in range(2))
    dout = torch.randn(q.shape, generator=generator)
    past = torch.ones(40, dtype=torch.bool)
    for b in range(3):
        past[cu_q[b]:cu_q[b] + used[b]] = False
    q[past] = float("nan")
    dout[past] = float("nan")
    leaves = [x.requires_grad_() for x in (q, k, v)]
    out, lse = hopattn.flash_attn_varlen_func(q, k, v, torch.tensor(cu_q, dtype=torch.int32),
                                              torch.tensor(cu_k, dtype=torch.int32), 20, 30,
                                              seqused_q=torch.tensor(used, dtype=torch.int32),
                                              causal=True, return_attn_probs=True)
    grads = torch.autograd.grad(out, leaves, dout)
    assert (out[past] == 0).all() and torch.isneginf(lse[:, past]).all()
    assert (grads[0][past] == 0).all()
    leaves64 = [x.detach().double().requires_grad_() for x in leaves]
    q64, k64, v64 = leaves64
    rows = [slice(cu_q[b], cu_q[b] + used[b]) for b in range(3)]
    ref = [attention_math(q64[None, rows[b]], k64[None, cu_k[b]:cu_k[b + 1]],
                          v64[None, cu_k[b]:cu_k[b + 1]], causal=True)[0][0] for b in range(3)]
    ref_grads = torch.autograd.grad(torch.cat(ref), leaves64, torch.cat([dout[r] for r in rows]).double())
    torch.testing.assert_close(torch.cat([out[r] for r in rows]).double(), torch.cat(ref),
                               rtol=1e-5, atol=1e-6)
    for name, actual, expected in zip("qkv", grads, ref_grads):
        if name == "q":
            actual, expected = actual[~past], expected[~past]
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, msg=f"d{name}")


def test_cpu_seqused_q_through_the_operators_and_opcheck(rng):
    # The last argument of hopattn::fwd and hopattn::bwd: eager shortcut, dispatcher and opcheck
    # (the fake kernels, autograd) agree.
    generator = torch_generator(rng, "cpu")
    q, k, v = random_qkv((2, 9, 4, 16), (2, 21, 2, 16), torch.float32, "cpu", generator=generator)
    used = torch.tensor([9, 4], dtype=torch.int32)
    out, lse = hopattn.torch.forward(q, k, v, seqused_q=used)
    op_out, op_lse = fwd_op(q, k, v, seqused_q=used)
    torch.testing.assert_close(out, op_out, rtol=0, atol=0)
    torch.testing.assert_close(lse, op_lse, rtol=0, atol=0)
    assert (out[1, 4:] == 0).all() and torch.isneginf(lse[1, :, 4:]).all()
    leaves = [x.requires_grad_() for x in (q, k, v)]
    torch.library.opcheck(torch.ops.hopattn.fwd.default,
                          (*leaves, *{**FWD_DEFAULTS, "seqused_q": used}.values()))
    bwd_args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out, lse, None, False,
                -1, -1, 0.0, None, None, 0, 0, None, False, None, 0, used)
    torch.library.opcheck(torch.ops.hopattn.bwd.default, bwd_args)
    dq = torch.ops.hopattn.bwd(*bwd_args)[0]
    assert (dq[1, 4:] == 0).all() and dq[1, :4].abs().sum() > 0
