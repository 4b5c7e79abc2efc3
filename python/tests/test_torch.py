"""torch tensors: the custom operators (fake kernels, autograd, torch.compile) and, on a Hopper GPU,
the sm_90a forward and backward kernels against float64 attention with flash-attention's tolerance
rule. Skipped without torch; the GPU tests (named test_gpu_*, selected with `-k gpu`) are skipped
without a Hopper GPU and a build with kernels."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
import hopattn.torch  # noqa: E402,F401  (registers torch.ops.hopattn)

needs_hopper = pytest.mark.skipif(
    not (torch.cuda.is_available() and hopattn.hopper_available()),
    reason=f"needs a Hopper GPU and a build with sm_90a kernels ({hopattn.device_description()})")


def attention_math(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None,
                   sink=None, attention_chunk=0):
    """Materialized attention in the dtype of its inputs: float64 gives the reference, the input
    precision gives flash-attention's 'naive' baseline. q (b, sq, hq, d), k, v (b, sk, hk, d);
    sink (hq,), learnable_sink: appended to each row's scores, its weight dropped after the
    softmax (a key whose value is 0). attention_chunk c > 0: row i sees only the keys j with
    floor(j / c) == floor(diagonal / c)."""
    seqlen_q, seqlen_k, heads_q, heads_kv = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    k = k.repeat_interleave(heads_q // heads_kv, dim=2)
    v = v.repeat_interleave(heads_q // heads_kv, dim=2)
    scores = torch.einsum("bihd,bjhd->bhij", q * scale, k)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    left, right = window
    right = 0 if causal else right
    i = torch.arange(seqlen_q, device=q.device)[:, None] + seqlen_k - seqlen_q
    j = torch.arange(seqlen_k, device=q.device)[None, :]
    allowed = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
    if right >= 0:
        allowed &= j <= i + right
    if left >= 0:
        allowed &= j >= i - left
    if attention_chunk > 0:  # i is the diagonal here; // floors, as the definition does
        allowed &= j // attention_chunk == i // attention_chunk
    scores = scores.masked_fill(~allowed, float("-inf"))
    seen = allowed.any(dim=-1, keepdim=True)
    if sink is not None:
        sink_column = sink.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, sink_column], dim=-1)
        seen = seen | (sink > float("-inf")).view(1, -1, 1, 1)
    lse = torch.logsumexp(scores.float() if scores.dtype != torch.float64 else scores, dim=-1)
    # Rows that see no key (nor a sink) give 0. Their scores are set to a finite value before the
    # softmax and their weights zeroed after it, so that autograd gives them 0 rather than NaN
    # gradients (a softmax over -inf alone is NaN, and NaN * 0 stays NaN in its backward).
    probs = torch.softmax(scores.masked_fill(~seen, 0.0), dim=-1) * seen
    if sink is not None:
        probs = probs[..., :-1]
    return torch.einsum("bhij,bjhd->bihd", probs, v), lse


def assert_within_rule(out, ref, naive, what="out", atol=1e-5):
    """flash-attention's rule: max|out - ref| <= 2 * max|naive - ref| + atol."""
    assert not out.isnan().any(), f"{what}: NaN"
    assert out.isfinite().all(), f"{what}: inf"
    error = (out.double() - ref).abs().max().item()
    baseline = (naive.double() - ref).abs().max().item()
    assert error <= 2 * baseline + atol, \
        f"{what}: max error {error:.3g} > 2 * naive {baseline:.3g} + {atol:.3g}"


def random_qkv(shape_q, shape_kv, dtype, device, requires_grad=False, generator=None):
    return [torch.randn(shape, dtype=dtype, device=device, requires_grad=requires_grad,
                        generator=generator)
            for shape in (shape_q, shape_kv, shape_kv)]


def torch_generator(rng, device):
    """A torch generator on `device` seeded from the rng fixture (HOPATTN_TEST_SEED replays it)."""
    return torch.Generator(device=device).manual_seed(int(rng.integers(2**62)))


def math_options(causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None,
                 learnable_sink=None, attention_chunk=0):
    """flash_attn_func's masking, scaling and sink options as attention_math's."""
    return dict(causal=causal, window=window_size, softcap=softcap, softmax_scale=softmax_scale,
                sink=learnable_sink, attention_chunk=attention_chunk)


def reference_gradients(dout, q, k, v, sink=None, **options):
    """(dq, dk, dv), and dsink after them with a sink, of attention_math's out against dout, twice:
    through float64 math on the same values upcast (the reference), and through the same math in
    the inputs' own dtype (the baseline of flash-attention's rule; the sink, a float32 leaf as
    learnable_sink is, is rounded to that dtype inside it)."""
    results = []
    for dtype in (torch.float64, q.dtype):
        leaves = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
        if sink is not None:
            sink_dtype = torch.float64 if dtype == torch.float64 else torch.float32
            leaves.append(sink.detach().to(sink_dtype).requires_grad_())
        out, _ = attention_math(*leaves[:3], sink=None if sink is None else leaves[3], **options)
        results.append(torch.autograd.grad(out, leaves, dout.detach().to(dtype)))
    return results


def float32_cancellation(q, k, v, dout, softmax_scale=None, **_):
    """A floor for the rule's atol where a gradient is 0 in exact arithmetic: a row or key whose
    only visible partner has P = 1 (attention_chunk=1 with causal) gets dS = P (dP - D) = 0, which
    the kernel computes as the difference of two float32 dot products of length d_v (dP = dO . v,
    D = dO . out), each rounded by up to d_v * eps32 * max|dO| * max|v|; dq and dk take it times
    softmax_scale and one k or q entry, summed over the query heads of a K/V head for dk. The rule
    itself would allow 0 there (its atol scales with the reference's largest value, 0). Elsewhere
    this floor is far below the rule's own atol."""
    head_dim, head_dim_v = q.shape[-1], v.shape[-1]
    scale = softmax_scale if softmax_scale is not None else head_dim ** -0.5
    group = q.shape[-2] // k.shape[-2]
    largest = max(q.detach().abs().max().item(), k.detach().abs().max().item())
    return (torch.finfo(torch.float32).eps * head_dim_v * dout.abs().max().item()
            * v.detach().abs().max().item() * scale * largest * group)


def assert_gradients_within_rule(grads, ref_grads, naive_grads, softcap=0.0, names="qkv",
                                 floor=0.0):
    """flash-attention's rule for gradients (as in its own tests):
    max|hopattn - ref| <= 2 * max|naive - ref| + atol, where ref is the float64 gradient of the
    same bf16/fp16 values and naive the gradient of the same math run in bf16/fp16: every matmul
    and the softmax round their result to the input type once, as the kernel rounds P and dS for
    its wgmma (it keeps S and dP in float32). The kernel's rounding is of that kind and size, so
    its error should be within the naive one; twice that leaves room for the different order of
    its float32 sums (for dq also of its atomic adds). atol, one unit in the last place of the
    largest reference gradient, is the rounding of the result itself, for the rare case where the
    naive error happens to be smaller; with softcap, flash-attention's extra 3e-4 for the
    approximate tanh (tanh.approx.f32, relative error ~2^-11) that the kernel evaluates in both
    passes: its error in the slope 1 - t^2 counts where the tanh saturates, and the math in
    float16 does not have it. (A float32 simulation of the kernel's roundings with that tanh error,
    on these tests' shapes and softcaps over 40 seeds, exceeded twice the naive error by at most a
    quarter of this allowance.) floor: float32_cancellation's, for gradients that are 0 exactly."""
    for name, actual, ref, naive in zip(names, grads, ref_grads, naive_grads):
        assert actual.shape == ref.shape and actual.dtype == naive.dtype, f"d{name}"
        assert ref.isfinite().all(), f"d{name}: the reference itself is not finite"
        atol = (max(torch.finfo(actual.dtype).eps * ref.abs().max().item(), floor)
                + (3e-4 if softcap else 0.0))
        assert_within_rule(actual, ref, naive, what=f"d{name}", atol=atol)


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


def dequantize_blocks(codes, descale, block_rows):
    """float64 code * scale of a (batch, seqlen, heads, d) tensor with (batch, heads, blocks) scales."""
    scale = descale.double().repeat_interleave(block_rows, dim=2)[:, :, :codes.shape[1]]
    return codes.double() * scale.transpose(1, 2)[..., None]


def test_cpu_quantize_fp8_gives_torch_float8_with_the_numpy_codes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = random_qkv((2, 19, 4, 64), (2, 23, 2, 64), torch.bfloat16, "cpu")
    result = hopattn.quantize_fp8(q, k, v, block_rows_q=8, block_rows_kv=5, hadamard=True, seed=3)
    assert [x.dtype for x in result] == [torch.float8_e4m3fn] * 3 + [torch.float32] * 3
    assert [tuple(x.shape) for x in result[3:]] == [(2, 4, 3), (2, 2, 5), (2, 2, 5)]
    as_numpy = [x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) for x in (q, k, v)]
    expected = hopattn.quantize_fp8(*as_numpy, block_rows_q=8, block_rows_kv=5, hadamard=True, seed=3)
    for actual, wanted in zip(result[:3], expected[:3]):
        np.testing.assert_array_equal(actual.view(torch.uint8).numpy(), wanted.view(np.uint8))
    for actual, wanted in zip(result[3:], expected[3:]):
        np.testing.assert_array_equal(actual.numpy(), wanted)


def test_cpu_block_descales_through_the_custom_op():
    q, k, v = random_qkv((2, 13, 4, 32), (2, 29, 2, 32), torch.float16, "cpu")
    q8, k8, v8, q_block, k_block, v_block = hopattn.quantize_fp8(q, k, v, block_rows_q=4,
                                                                 block_rows_kv=8)
    out, lse = hopattn.flash_attn_func(q8, k8, v8, causal=True, return_attn_probs=True,
                                       q_block_descale=q_block, k_block_descale=k_block,
                                       v_block_descale=v_block, descale_block_rows_q=4,
                                       descale_block_rows_kv=8)
    assert out.dtype == torch.bfloat16 and lse.shape == (2, 4, 13)
    ref, ref_lse = attention_math(dequantize_blocks(q8, q_block, 4), dequantize_blocks(k8, k_block, 8),
                                  dequantize_blocks(v8, v_block, 8), causal=True)
    torch.testing.assert_close(out.double(), ref, rtol=8e-3, atol=1e-6)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-6, atol=1e-6)


def test_cpu_keys_contiguous_float8_v_reaches_the_library_uncopied(monkeypatch):
    # V^T in memory (quantize_fp8(v_keys_contiguous=True)): the torch path must not copy it into
    # the ordinary layout, which would undo what the FP8 kernel gains from it.
    q, k, v = random_qkv((2, 9, 4, 32), (2, 77, 2, 32), torch.bfloat16, "cpu")
    q8, k8, v8, q_block, k_block, v_block = hopattn.quantize_fp8(q, k, v, block_rows_kv=16)
    _, _, v8_t, *_ = hopattn.quantize_fp8(q, k, v, block_rows_kv=16, v_keys_contiguous=True)
    assert v8_t.stride() == (2 * 32 * 80, 1, 32 * 80, 80)
    assert torch.equal(v8_t.view(torch.uint8), v8.view(torch.uint8))
    seen = []
    core_forward = hopattn._core.forward

    def spy(q, k, v, **options):
        seen.append(v)
        return core_forward(q, k, v, **options)

    monkeypatch.setattr(hopattn._core, "forward", spy)
    scales = dict(q_block_descale=q_block, k_block_descale=k_block, v_block_descale=v_block,
                  descale_block_rows_kv=16)
    out_t = hopattn.flash_attn_func(q8, k8, v8_t, **scales)
    assert seen[-1].data_ptr() == v8_t.data_ptr() and seen[-1].stride() == v8_t.stride()
    out = hopattn.flash_attn_func(q8, k8, v8, **scales)
    assert torch.equal(out_t.view(torch.int16), out.view(torch.int16))
    # Other dtypes take only the ordinary layout, so the wrapper copies them into it.
    v_t = torch.empty(2, 2, 32, 77, dtype=torch.bfloat16).permute(0, 3, 1, 2)
    v_t.copy_(v)
    hopattn.flash_attn_func(q, k, v_t)
    assert seen[-1].stride(-1) == 1


def test_opcheck_with_float8_and_block_descales():
    q, k, v = random_qkv((1, 5, 2, 16), (1, 6, 1, 16), torch.bfloat16, "cpu")
    q8, k8, v8, *blocks = hopattn.quantize_fp8(q, k, v, block_rows_q=2, block_rows_kv=4)
    args = (q8, k8, v8, None, False, -1, -1, 0.0, None, None, 0, 0, None, None, 0, None, None, None,
            None, *blocks, 2, 4)
    # opcheck's schema test does arithmetic that torch has no float8 kernels for; the others run.
    torch.library.opcheck(torch.ops.hopattn.fwd.default, args,
                          test_utils=("test_faketensor", "test_autograd_registration",
                                      "test_aot_dispatch_dynamic"))


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


def bend_for_softcap(q, options):
    """q scaled, with a softcap, so that the scores reach the tanh's bend (as in flash-attention's
    tests): by 3. A softmax_scale given does not shrink with the head dim as the default 1/sqrt(d)
    does, so above d 128 q is scaled by 3 * sqrt(128 / d) instead, and the scores spread as at d 128
    (see GRADIENT_FEATURES)."""
    if not options.get("softcap"):
        return q
    if options.get("softmax_scale") is not None and q.shape[-1] > 128:
        return q * (3 * (128 / q.shape[-1]) ** 0.5)
    return q * 3


def check_gradients(rng, device, dtype, head_dim, seqlen_q, seqlen_k, heads_q, heads_kv, options,
                    head_dim_v=None):
    """flash_attn_func's forward and backward on fresh random inputs against float64 math with
    flash-attention's rule (assert_gradients_within_rule); v of head_dim_v (None: head_dim)."""
    generator = torch_generator(rng, device)
    batch = 2
    q, k, v = random_qkv((batch, seqlen_q, heads_q, head_dim), (batch, seqlen_k, heads_kv, head_dim),
                         dtype, device, generator=generator)
    if head_dim_v is not None:
        v = torch.randn(batch, seqlen_k, heads_kv, head_dim_v, dtype=dtype, device=device,
                        generator=generator)
    q = bend_for_softcap(q, options)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = hopattn.flash_attn_func(q, k, v, **options)
    dout = torch.randn(out.shape, dtype=dtype, device=device, generator=generator)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_out, _ = attention_math(q.detach().double(), k.detach().double(), v.detach().double(),
                                **math_options(**options))
    naive_out, _ = attention_math(q.detach(), k.detach(), v.detach(), **math_options(**options))
    softcap_atol = 3e-4 if options.get("softcap") else 0.0  # as assert_gradients_within_rule's
    assert_within_rule(out, ref_out, naive_out,
                       atol=torch.finfo(dtype).eps * ref_out.abs().max().item() + softcap_atol)
    ref_grads, naive_grads = reference_gradients(dout, q, k, v, **math_options(**options))
    assert_gradients_within_rule(grads, ref_grads, naive_grads, softcap=options.get("softcap", 0.0),
                                 floor=float32_cancellation(q, k, v, dout, **options))


# ---- plain eager calls skip the dispatcher: same results, errors and observers ----------------

FWD_DEFAULTS = dict(softmax_scale=None, causal=False, window_left=-1, window_right=-1, softcap=0.0,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
                    seqused_k=None, page_table=None, num_splits=0, pack_gqa=None, q_descale=None,
                    k_descale=None, v_descale=None, q_block_descale=None, k_block_descale=None,
                    v_block_descale=None, descale_block_rows_q=128, descale_block_rows_kv=128,
                    deterministic=False, learnable_sink=None, attention_chunk=0, seqused_q=None,
                    qv=None)


def fwd_op(q, k, v, **options):
    """torch.ops.hopattn.fwd with its arguments named."""
    return torch.ops.hopattn.fwd(q, k, v, *{**FWD_DEFAULTS, **options}.values())


class SeenOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Runs every operator unchanged and records which ran."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def test_cpu_eager_call_gives_the_operators_results_bit_for_bit():
    q, k, v = random_qkv((2, 5, 4, 16), (2, 7, 2, 16), torch.bfloat16, "cpu")
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, softcap=3.0, return_attn_probs=True)
    op_out, op_lse = fwd_op(q, k, v, causal=True, softcap=3.0)
    torch.testing.assert_close(out, op_out, rtol=0, atol=0)
    torch.testing.assert_close(lse, op_lse, rtol=0, atol=0)
    # Without return_attn_probs the eager call skips lse; out must not change.
    torch.testing.assert_close(hopattn.flash_attn_func(q, k, v, causal=True, softcap=3.0), op_out,
                               rtol=0, atol=0)


def test_dispatch_modes_and_the_profiler_still_see_the_operator():
    q, k, v = random_qkv((1, 3, 2, 8), (1, 4, 2, 8), torch.float32, "cpu")
    with SeenOps() as mode:
        out = hopattn.flash_attn_func(q, k, v, causal=True)
    assert torch.ops.hopattn.fwd.default in mode.ops
    torch.testing.assert_close(out, hopattn.flash_attn_func(q, k, v, causal=True), rtol=0, atol=0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        hopattn.flash_attn_func(q, k, v)
    assert "hopattn::fwd" in [event.name for event in profile.events()]


def test_autograd_records_calls_on_tensors_that_require_grad_only_under_grad_mode():
    q, k, v = random_qkv((1, 3, 2, 8), (1, 4, 2, 8), torch.float32, "cpu", requires_grad=True)
    assert hopattn.flash_attn_func(q, k, v).grad_fn is not None
    with torch.no_grad():
        assert hopattn.flash_attn_func(q, k, v).grad_fn is None


def test_meta_tensors_still_get_the_fake_kernels_shapes():
    q, k, v = random_qkv((2, 5, 4, 16), (2, 7, 2, 16), torch.float8_e4m3fn, "meta")
    out, lse = hopattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert out.device.type == "meta" and out.dtype == torch.bfloat16 and out.shape == q.shape
    assert lse.shape == (2, 4, 5)


def test_negative_views_are_resolved_before_the_kernel_reads_them():
    q, k, v = random_qkv((1, 4, 2, 16), (1, 6, 2, 16), torch.float32, "cpu")
    negated = torch._neg_view(q)  # reads as -q, the memory holds q
    out, _ = hopattn.torch.forward(negated, k, v)
    expected, _ = hopattn.torch.forward(-q, k, v)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_scalars_the_schema_converts_are_still_accepted():
    q, k, v = random_qkv((1, 4, 2, 16), (1, 6, 2, 16), torch.float32, "cpu")
    expected = hopattn.flash_attn_func(q, k, v, causal=True, softmax_scale=1.0, num_splits=1)
    converted = hopattn.flash_attn_func(q, k, v, causal=np.True_, softmax_scale=1,
                                        num_splits=np.int64(1))
    torch.testing.assert_close(converted, expected, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["float64 q", "k of another dtype", "k of another head_dim",
                                  "sparse q", "non-int window"])
def test_eager_calls_validate_their_arguments_as_the_operator_does(case):
    q, k, v = random_qkv((1, 4, 2, 16), (1, 6, 2, 16), torch.bfloat16, "cpu")
    window_left = -1
    if case == "float64 q":
        q = q.double()
    elif case == "k of another dtype":
        k = k.half()
    elif case == "k of another head_dim":
        k = k[..., :8]
    elif case == "sparse q":
        q = q.float().to_sparse()
    else:
        window_left = 2.5

    def attend():
        return hopattn.torch.forward(q, k, v, window_left=window_left)

    with pytest.raises(Exception) as eager:
        attend()
    with SeenOps(), pytest.raises(Exception) as dispatched:  # forces the dispatcher path
        attend()
    assert eager.type is dispatched.type and str(eager.value) == str(dispatched.value)
    assert eager.type in (TypeError, ValueError, RuntimeError, NotImplementedError)


def test_core_takes_tensors_that_require_grad_and_names_tensors_dlpack_cannot_export():
    q, k, v = random_qkv((1, 4, 2, 16), (1, 6, 2, 16), torch.float32, "cpu", requires_grad=True)
    out, _ = hopattn._core.forward(q, k, v)  # the data is read; nothing is recorded
    assert out.grad_fn is None
    torch.testing.assert_close(out, hopattn.flash_attn_func(q, k, v).detach(), rtol=0, atol=0)
    with pytest.raises(TypeError, match="^q: expected an array with DLPack support"):
        hopattn._core.forward(q.detach().to_sparse(), k, v)


def test_only_plain_eager_calls_skip_the_dispatcher():
    q, k, v = random_qkv((1, 4, 2, 16), (1, 6, 2, 16), torch.float32, "cpu")

    def skips(*tensors, **options):
        args = (*tensors, *{**FWD_DEFAULTS, **options}.values())
        return hopattn.torch._only_the_kernel_would_run(args)

    assert skips(q, k, v)
    assert not skips(q.requires_grad_(), k, v)
    with torch.no_grad():
        assert skips(q, k, v)
    q = q.detach()
    assert not skips(torch._neg_view(q), k, v)
    assert not skips(q.to_sparse(), k, v)
    assert not skips(q.to("meta"), k, v)
    assert not skips(torch.nn.Parameter(q), k, v)
    assert not skips(q, k, v, causal=1)
    assert not skips(q, k, v, softmax_scale=1)
    with SeenOps():
        assert not skips(q, k, v)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert not skips(q, k, v)
    assert not torch.vmap(lambda x: torch.tensor(skips(x, k, v)))(q[None]).any()
    assert skips(q, k, v)


@pytest.mark.parametrize("path", ["eager", "dispatcher", "compiled"])
def test_cpu_pack_gqa_reaches_the_library_on_every_path(rng, pack_gqa_passed, path):
    # A plain eager call skips the dispatcher, a dispatch mode forces it, torch.compile traces the
    # interface's check of the value and the operator's schema: each hands the setting on unchanged.
    q, k, v = random_qkv((2, 3, 12, 16), (2, 37, 4, 16), torch.float32, "cpu",
                         generator=torch_generator(rng, "cpu"))
    ref, _ = attention_math(q.double(), k.double(), v.double(), causal=True)
    for pack_gqa in (None, True, False):
        def attend(q, k, v):
            return hopattn.flash_attn_func(q, k, v, causal=True, pack_gqa=pack_gqa)

        if path == "compiled":
            out = torch.compile(attend, fullgraph=True, backend="aot_eager")(q, k, v)
        elif path == "dispatcher":
            with SeenOps():
                out = attend(q, k, v)
        else:
            out = attend(q, k, v)
        torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    assert pack_gqa_passed == [None, True, False]


# ---- flash-attention 3's qv, sm_margin and scheduler_metadata on host tensors -----------------
# (test_numpy_fa3_arguments.py and test_errors.py check them on NumPy arrays)

def fa3_case(rng, function):
    """`function` on fresh random host tensors: call(**extra) returns its outputs, with the
    gradients of q, k and v for the dense and varlen functions (through the operators' autograd)
    and, for flash_attn_with_kvcache, the cache after appending new keys with rotary into a copy
    of it; and the cache_seqlens to plan a schedule with."""
    generator = torch_generator(rng, "cpu")
    if function == "flash_attn_with_kvcache":
        c = kvcache_case(rng, "cpu", torch.float32, head_dim=16, rotary_dim=8, seqlen_cache=20)

        def call(**extra):
            caches = c["k_cache"].clone(), c["v_cache"].clone()
            out, lse = hopattn.flash_attn_with_kvcache(
                c["q"], *caches, c["k"], c["v"], cache_seqlens=c["cache_seqlens"], causal=True,
                rotary_cos=c["rotary_cos"], rotary_sin=c["rotary_sin"], return_softmax_lse=True,
                **extra)
            return (out, lse) + caches

        return call, c["cache_seqlens"]
    q, k, v = random_qkv((2, 9, 4, 16), (2, 13, 2, 16), torch.float32, "cpu", requires_grad=True,
                         generator=generator)
    dout = torch.randn(q.shape, generator=generator)
    cu_q, cu_k = (torch.tensor(cu, dtype=torch.int32) for cu in ([0, 4, 9], [0, 6, 13]))

    def call(**extra):
        if function == "flash_attn_func":
            out, lse = hopattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True,
                                               **extra)
        else:
            out, lse = hopattn.flash_attn_varlen_func(q[0], k[0], v[0], cu_q, cu_k, 5, 7,
                                                      causal=True, return_attn_probs=True, **extra)
        return (out, lse) + torch.autograd.grad(out, (q, k, v), dout[0] if out.dim() == 3 else dout)

    return call, cu_k[1:] - cu_k[:-1]


def assert_same_bits(actual, expected, what):
    assert len(actual) == len(expected), what
    for i, (a, b) in enumerate(zip(actual, expected)):
        # Through int32 bits: the kvcache case's cache holds NaN where no key is in use.
        assert a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.int32),
                                                  b.contiguous().view(torch.int32)), \
            f"{what}: output {i} differs"


FA3_TAKES = {"flash_attn_func": ("qv", "sm_margin"),
             "flash_attn_varlen_func": ("qv", "scheduler_metadata", "sm_margin"),
             "flash_attn_with_kvcache": ("qv", "cu_seqlens_k_new", "rotary_seqlens",
                                         "scheduler_metadata", "sm_margin")}


@pytest.mark.parametrize("function", FA3_TAKES)
def test_cpu_fa3_defaults_and_schedule_run_as_a_call_without_them(rng, function):
    call, seqlens = fa3_case(rng, function)
    schedule = hopattn.get_scheduler_metadata(len(seqlens), 9, 20, 4, 2, 16, seqlens, causal=True)
    defaults = dict(qv=None, sm_margin=0, scheduler_metadata=schedule, cu_seqlens_k_new=None,
                    rotary_seqlens=None)
    expected = call()
    for name in FA3_TAKES[function]:
        assert_same_bits(call(**{name: defaults[name]}), expected, name)
    if "scheduler_metadata" in FA3_TAKES[function]:
        assert_same_bits(call(scheduler_metadata=None), expected, "scheduler_metadata=None")
    assert_same_bits(call(**{name: defaults[name] for name in FA3_TAKES[function]}), expected,
                     "all of them")


def test_cpu_get_scheduler_metadata_follows_cache_seqlens():
    for device in ("cpu", "meta"):
        seqlens = torch.zeros(3, dtype=torch.int32, device=device)
        schedule = hopattn.get_scheduler_metadata(3, 1, 64, 8, 2, 128, seqlens,
                                                  qkv_dtype=torch.bfloat16, page_size=16)
        assert isinstance(schedule, torch.Tensor) and schedule.dtype == torch.int32
        assert schedule.shape == (0,) and schedule.device == seqlens.device
    with pytest.raises(TypeError, match="^cache_seqlens: expected an int32 array, got dtype int64"):
        hopattn.get_scheduler_metadata(3, 1, 64, 8, 2, 128, seqlens.long())


def test_compile_fullgraph_with_fa3_arguments(rng):
    # torch.compile traces the interface's checks of sm_margin, qv and scheduler_metadata (a tensor
    # input of the compiled function) without a graph break, and the result is eager's.
    def attend(q, k, v, cu_q, cu_k, schedule):
        dense = hopattn.flash_attn_func(q, k, v, causal=True, qv=None, sm_margin=0)
        varlen = hopattn.flash_attn_varlen_func(q[0], k[0], v[0], cu_q, cu_k, 5, 7, causal=True,
                                                qv=None, scheduler_metadata=schedule,
                                                sm_margin=0)
        return dense, varlen

    q, k, v = random_qkv((2, 9, 4, 16), (2, 13, 2, 16), torch.float32, "cpu",
                         generator=torch_generator(rng, "cpu"))
    cu_q, cu_k = (torch.tensor(cu, dtype=torch.int32) for cu in ([0, 4, 9], [0, 6, 13]))
    schedule = hopattn.get_scheduler_metadata(2, 5, 7, 4, 2, 16, cu_k[1:] - cu_k[:-1])
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    for actual, expected in zip(compiled(q, k, v, cu_q, cu_k, schedule),
                                attend(q, k, v, cu_q, cu_k, None)):
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)


@pytest.mark.parametrize("option,value,error,message", [
    ("qv", "q wider", ValueError, r"^qv: shape \(3, 3, 8, 32\) is not allowed"),
    ("sm_margin", 16, NotImplementedError, "^sm_margin: 16 is not supported"),
    ("cu_seqlens_k_new", "cu", NotImplementedError, r"^cu_seqlens_k_new: an array of shape \(4,\)"),
    ("rotary_seqlens", "seqlens", NotImplementedError,
     r"^rotary_seqlens: an array of shape \(3,\)"),
    ("scheduler_metadata", "schedule", ValueError,
     r"^scheduler_metadata: shape \(3,\) is not \(0,\); hopattn plans its schedule at launch and "
     "takes no precomputed one"),
    ("scheduler_metadata", "int64", TypeError, "^scheduler_metadata: dtype int64 is not int32"),
])
def test_cpu_kvcache_fa3_refusals_leave_the_cache(rng, option, value, error, message):
    c = kvcache_case(rng, "cpu", torch.float32, head_dim=16, rotary_dim=8, seqlen_cache=20)
    value = {"q wider": torch.cat([c["q"], c["q"]], dim=-1), "cu": torch.tensor([0, 3, 6, 9], dtype=torch.int32),
             "seqlens": c["cache_seqlens"].clone(), "schedule": c["cache_seqlens"].clone(),
             "int64": torch.zeros(0, dtype=torch.int64)}.get(value, value)
    before = [x.clone() for x in (c["k_cache"], c["v_cache"])]
    with pytest.raises(error, match=message):
        hopattn.flash_attn_with_kvcache(c["q"], c["k_cache"], c["v_cache"], c["k"], c["v"],
                                        cache_seqlens=c["cache_seqlens"], causal=True,
                                        rotary_cos=c["rotary_cos"], rotary_sin=c["rotary_sin"],
                                        **{option: value})
    assert_same_bits((c["k_cache"], c["v_cache"]), before, "the cache after a refused call")


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
# every masking and scaling option, MHA, GQA and MQA, and query/key lengths that are not multiples
# of the kernel's blocks, shorter and longer than each other (causal with more queries than keys
# leaves rows that see no key: their dq must be 0, not NaN) or a single query.
GRADIENT_FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window_size=(64, 16)),
    "causal_window": dict(causal=True, window_size=(40, -1)),
    "softcap": dict(softcap=5.0),
    "scale_softcap_causal": dict(softmax_scale=0.07, softcap=2.0, causal=True),
}
# With softcap, q is scaled by 3 (bend_for_softcap), so that scores reach the tanh's bend:
# s / softcap of standard deviation 0.6 to 1.2 here (softmax_scale=0.07 at d 256 would give 1.7:
# there q is scaled less). Much further into saturation, the kernel's approximate tanh (see
# assert_gradients_within_rule) costs float16 gradients more than the rule's allowance.


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
@needs_hopper
def test_gpu_fp8_v_head_dim_of_its_own_is_not_implemented():
    q, k = (x.to(torch.float8_e4m3fn) for x in random_qkv((1, 64, 4, 128), (1, 64, 2, 128),
                                                          torch.bfloat16, "cuda")[:2])
    v = torch.randn(1, 64, 2, 64, device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match="^v: head_dim 64 .*FP8"):
        hopattn.flash_attn_func(q, k, v)


# Head dims no kernel runs: the library's kUnsupported, as NotImplementedError naming head_dim.
@needs_hopper
@pytest.mark.parametrize("head_dim, dtype, rule", [
    (100, torch.bfloat16, "a multiple of 8 from 8 to 256"),
    (264, torch.float16, "a multiple of 8 from 8 to 256"),
    (96, torch.float8_e4m3fn, "64, 128 or 256"),
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


def cumulative(lengths, device):
    """int32 cu_seqlens of `lengths` on `device`."""
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=device)


def varlen_reference_gradients(dout, q, k, v, lengths_q, lengths_k, used_k=None, **options):
    """reference_gradients of packed sequences, each its own attention problem: sequence b's q, dout
    rows cu_q[b]..cu_q[b + 1] against its first used_k[b] (default: all) k, v rows from cu_k[b].
    Gradients no query or key reaches (empty sequences, keys past used_k) are 0 in both."""
    used_k = lengths_k if used_k is None else used_k
    ref = [torch.zeros(x.shape, dtype=torch.float64, device=x.device) for x in (q, k, v)]
    naive = [torch.zeros(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v)]
    starts_q, starts_k = np.cumsum([0, *lengths_q]), np.cumsum([0, *lengths_k])
    for b, (len_q, used) in enumerate(zip(lengths_q, used_k)):
        if len_q == 0 or used == 0:
            continue
        rows_q = slice(int(starts_q[b]), int(starts_q[b]) + len_q)
        rows_k = slice(int(starts_k[b]), int(starts_k[b]) + used)
        sequence = [x[rows][None] for x, rows in ((dout, rows_q), (q, rows_q), (k, rows_k), (v, rows_k))]
        ref_b, naive_b = reference_gradients(*sequence, **options)
        for total, grads in ((ref, ref_b), (naive, naive_b)):
            for gradient, rows, part in zip(total, (rows_q, rows_k, rows_k), grads):
                gradient[rows] = part[0]
    return ref, naive


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


# Padded head dims (see the dense test above) on packed sequences: one in the d 64 kernel, the
# narrowest and the widest in the d 256 one.
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
# kernels' own choice must each be within the rule.
@needs_hopper
@pytest.mark.parametrize("head_dim", [64, 128])
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
        out = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                              causal=causal, pack_gqa=pack_gqa)
        for b, (ref, naive) in enumerate(refs):
            assert_within_rule(out[b:b + 1], ref, naive,
                               what=f"out (pack_gqa={pack_gqa}, sequence {b})")


# pack_gqa=True where no kernel packs. The library refuses KernelOptions::PackGqa::kOn there
# (kUnsupported); its message must come out in NotImplementedError as it is.
PACK_GQA_REFUSALS = {
    "head_dim_256": (dict(head_dim=256), "at head dim 256 (head dims up to 128 pack)"),
    "129_heads_per_kv_head": (dict(heads_q=129), "with heads_q / heads_kv = 129 (packing takes at "
                                                 "most 128 query heads per K/V head)"),
}


@needs_hopper
@pytest.mark.parametrize("case", PACK_GQA_REFUSALS)
def test_gpu_pack_gqa_true_where_no_kernel_packs_says_so(case):
    change, reason = PACK_GQA_REFUSALS[case]
    shape = {**dict(heads_q=4, head_dim=128, dtype=torch.bfloat16), **change}
    q, k, v = (x.to(shape["dtype"]) for x in random_qkv(
        (2, 1, shape["heads_q"], shape["head_dim"]), (2, 300, 1, shape["head_dim"]), torch.bfloat16,
        "cuda"))
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


def rows_in_blocks_of_magnitude(shape, block_rows, spread, device):
    """Normal values times 2^u, u uniform in [-spread, spread] per block of rows: a scale applied to
    the wrong block shows."""
    batch, seqlen, heads, _ = shape
    blocks = -(-seqlen // block_rows)
    u = (torch.rand(batch, blocks, heads, 1, device=device) * 2 - 1) * spread
    magnitude = torch.exp2(u).repeat_interleave(block_rows, dim=1)[:, :seqlen]
    return (torch.randn(shape, device=device) * magnitude).to(torch.bfloat16)


@needs_hopper
@pytest.mark.parametrize("granularity", ["block", "head", "tensor"])
def test_gpu_quantize_on_a_side_stream_gives_the_host_bits(granularity):
    shape_q, shape_kv = (2, 300, 4, 128), (2, 257, 2, 128)
    q, k, v = (rows_in_blocks_of_magnitude(shape, 64, 3.0, "cuda")
               for shape in (shape_q, shape_kv, shape_kv))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        result = hopattn.quantize_fp8(q, k, v, granularity=granularity, block_rows_q=64,
                                      block_rows_kv=128, hadamard=True, seed=11)
    stream.synchronize()
    expected = hopattn.quantize_fp8(q.cpu(), k.cpu(), v.cpu(), granularity=granularity,
                                    block_rows_q=64, block_rows_kv=128, hadamard=True, seed=11)
    names = ("q8", "k8", "v8", "q_descale", "k_descale", "v_descale")
    for name, actual, wanted in zip(names, result, expected):
        assert actual.device == q.device and actual.dtype == wanted.dtype, name
        as_bits = (lambda x: x.view(torch.uint8)) if wanted.dtype == torch.float8_e4m3fn else (lambda x: x)
        assert torch.equal(as_bits(actual).cpu(), as_bits(wanted)), f"{name}: GPU and host differ"


def fp8_bound(q64, k64, v64, ref, causal=False):
    """What FP8 attention may be off from float64 on the same dequantized operands (q64 (b, sq, hq,
    d), k64, v64 (b, sk, hk, d)): P (times 2^8) rounded to e4m3 moves each weight by 2^-4 of itself
    (2^-3 with the row sum) or by 2^-18 below e4m3's normal range; a score's FP8 GEMM error (2^-9 of
    sum |q_i k_i| x scale) moves the weights by e^(2 delta); out is rounded to bfloat16."""
    ratio = q64.shape[2] // k64.shape[2]
    weighted_v, _ = attention_math(q64, k64, v64.abs(), causal=causal)
    products = torch.einsum("bihd,bjhd->bhij", q64.abs(), k64.abs().repeat_interleave(ratio, dim=2))
    delta = (products.amax(dim=-1) * q64.shape[-1] ** -0.5 * 2.0 ** -9).transpose(1, 2)[..., None]
    tiny_weights = 2.0 ** -18 * v64.abs().sum(dim=1, keepdim=True).repeat_interleave(ratio, dim=2)
    return (2.0 ** -3 + 4 * delta) * weighted_v + tiny_weights + 2.0 ** -7 * ref.abs() + 1e-5


@needs_hopper
def test_gpu_block_descales_match_float64_on_dequantized():
    rows_q, rows_kv = 64, 128
    shape_q, shape_kv = (2, 300, 4, 128), (2, 400, 2, 128)
    q = rows_in_blocks_of_magnitude(shape_q, rows_q, 1.0, "cuda")
    k = rows_in_blocks_of_magnitude(shape_kv, rows_kv, 1.0, "cuda")
    v = rows_in_blocks_of_magnitude(shape_kv, rows_kv, 3.0, "cuda")
    q8, k8, v8, q_block, k_block, v_block = hopattn.quantize_fp8(q, k, v, block_rows_q=rows_q,
                                                                 block_rows_kv=rows_kv)
    try:
        out = hopattn.flash_attn_func(q8, k8, v8, q_block_descale=q_block, k_block_descale=k_block,
                                      v_block_descale=v_block, descale_block_rows_q=rows_q,
                                      descale_block_rows_kv=rows_kv)
    except NotImplementedError as error:
        pytest.skip(f"FP8 block descales on CUDA not implemented: {error}")
    q64, k64, v64 = (dequantize_blocks(x, d, r) for x, d, r in
                     ((q8, q_block, rows_q), (k8, k_block, rows_kv), (v8, v_block, rows_kv)))
    ref, _ = attention_math(q64, k64, v64)
    bound = fp8_bound(q64, k64, v64, ref)
    error = (out.double() - ref).abs()
    assert not out.isnan().any()
    assert (error <= bound).all(), f"{(error > bound).sum().item()} elements over the bound"


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_fp8_varlen_matches_float64_per_sequence(rng, causal):
    # Packed FP8 sequences with per-(sequence, kv head) descales and seqused_k, the rows past the keys
    # in use NaN: each sequence's out and LSE against float64 attention over its own keys.
    lengths_q, lengths_k, used = [1, 200, 0, 77, 3], [333, 5, 9, 700, 40], [300, 5, 0, 517, 0]
    heads_q, heads_kv, d = 4, 2, 128
    generator = torch_generator(rng, "cuda")
    q = torch.randn(sum(lengths_q), heads_q, d, device="cuda", generator=generator) * 2
    k = torch.randn(sum(lengths_k), heads_kv, d, device="cuda", generator=generator)
    v = torch.randn(sum(lengths_k), heads_kv, d, device="cuda", generator=generator)
    q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
    starts_k = np.cumsum([0, *lengths_k])
    for b, n in enumerate(used):  # the unused cache rows: e4m3 NaN
        k8.view(torch.uint8)[starts_k[b] + n:starts_k[b + 1]] = 0x7F
        v8.view(torch.uint8)[starts_k[b] + n:starts_k[b + 1]] = 0x7F
    descales = [torch.rand(len(lengths_q), heads_kv, device="cuda", generator=generator) + 0.5
                for _ in range(3)]
    out, lse = hopattn.flash_attn_varlen_func(
        q8, k8, v8, cumulative(lengths_q, "cuda"), cumulative(lengths_k, "cuda"), max(lengths_q),
        max(lengths_k), seqused_k=torch.tensor(used, dtype=torch.int32, device="cuda"), causal=causal,
        q_descale=descales[0], k_descale=descales[1], v_descale=descales[2], return_attn_probs=True)
    assert out.dtype == torch.bfloat16 and not out.isnan().any() and not lse.isnan().any()
    starts_q = np.cumsum([0, *lengths_q])
    for b in range(len(lengths_q)):
        rows_q, rows_k = slice(starts_q[b], starts_q[b + 1]), slice(starts_k[b], starts_k[b] + used[b])
        if used[b] == 0:  # rows that see no key: 0 and LSE -inf
            assert (out[rows_q] == 0).all() and (lse[:, rows_q] == float("-inf")).all(), f"sequence {b}"
            continue
        scale = [x[b].double().repeat_interleave(heads_q // heads_kv if i == 0 else 1)[:, None]
                 for i, x in enumerate(descales)]
        q64 = (q8[rows_q].double() * scale[0])[None]
        k64, v64 = ((x[rows_k].double() * s)[None] for x, s in ((k8, scale[1]), (v8, scale[2])))
        ref, ref_lse = attention_math(q64, k64, v64, causal=causal)
        error = (out[rows_q].double()[None] - ref).abs()
        bound = fp8_bound(q64, k64, v64, ref, causal=causal)
        assert (error <= bound).all(), f"sequence {b}: {(error > bound).sum().item()} over the bound"
        # LSE moves by at most a score's FP8 GEMM error: 2^-9 of the row's largest sum |q_i k_i| x scale.
        ratio = heads_q // heads_kv
        products = torch.einsum("bihd,bjhd->bhij", q64.abs(), k64.abs().repeat_interleave(ratio, dim=2))
        tolerance = 2e-3 + products.amax(dim=-1)[0] * d ** -0.5 * 2.0 ** -9
        seen = ref_lse[0].isfinite()
        assert torch.equal(lse[:, rows_q].isfinite(), seen), f"sequence {b}: rows without keys"
        lse_error = (lse[:, rows_q].double() - ref_lse[0])[seen].abs()
        assert (lse_error <= tolerance[seen]).all(), f"sequence {b}: lse"


@needs_hopper
@pytest.mark.parametrize("pack_gqa", [None, True, False])
def test_gpu_fp8_kvcache_decoding_step_matches_float64(rng, pack_gqa):
    # flash_attn_with_kvcache over an FP8 cache with cache_seqlens (seqused_k): one query per sequence,
    # the 4 query heads of a K/V head packed into one tile or not.
    batch, cache, heads_q, heads_kv, d = 3, 1000, 8, 2, 128
    generator = torch_generator(rng, "cuda")
    q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in
                  random_qkv((batch, 1, heads_q, d), (batch, cache, heads_kv, d), torch.float32, "cuda",
                             generator=generator))
    seqlens = [1, 999, 513]
    out = hopattn.flash_attn_with_kvcache(q8, k8, v8, cache_seqlens=torch.tensor(
        seqlens, dtype=torch.int32, device="cuda"), pack_gqa=pack_gqa)
    for b, n in enumerate(seqlens):
        q64, k64, v64 = q8[b:b + 1].double(), k8[b:b + 1, :n].double(), v8[b:b + 1, :n].double()
        ref, _ = attention_math(q64, k64, v64)
        error = (out[b:b + 1].double() - ref).abs()
        assert (error <= fp8_bound(q64, k64, v64, ref)).all(), f"sequence {b}"


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


def kvcache_case(rng, device, dtype, *, layout="dense", batch=3, seqlen_q=3, seqlen_new=3,
                 heads_q=8, heads_kv=2, head_dim=128, seqlen_cache=333, page_size=64,
                 pages_per_seq=6, batch_cache=None, rotary_dim=64, batch_idx=False, leftpad=False):
    """Random inputs; the cache NaN wherever no sequence has a key in use (where the new rows go
    too). Every sequence has at least seqlen_q keys before the append."""
    generator = torch_generator(rng, device)

    def normal(*shape):
        return torch.randn(shape, generator=generator, device=device).to(dtype)

    c = dict(dtype=dtype, page_table=None, cache_batch_idx=None, cache_leftpad=None)
    if layout == "paged":
        num_pages = batch * pages_per_seq + 2
        c["page_table"] = torch.tensor(rng.permutation(num_pages)[:batch * pages_per_seq],
                                       dtype=torch.int32, device=device).view(batch, pages_per_seq)
        slots, rows, capacity = num_pages, page_size, pages_per_seq * page_size
    else:
        slots, rows, capacity = batch_cache or batch, seqlen_cache, seqlen_cache
    c["k_cache"], c["v_cache"] = (normal(slots, rows, heads_kv, head_dim) for _ in range(2))
    if batch_idx:
        c["cache_batch_idx"] = torch.tensor(rng.permutation(slots)[:batch], dtype=torch.int32,
                                            device=device)
    seqlens = rng.integers(seqlen_q, capacity - seqlen_new + 1, size=batch)
    c["cache_seqlens"] = torch.tensor(seqlens, dtype=torch.int32, device=device)
    if leftpad:  # at least seqlen_q keys stay in use before the append
        c["cache_leftpad"] = torch.tensor(rng.integers(0, seqlens - seqlen_q + 1), dtype=torch.int32,
                                          device=device)
        c["cache_leftpad"][0] = max(int(c["cache_leftpad"][0]), 1)  # sequence 0 padded too
    c["q"] = normal(batch, seqlen_q, heads_q, head_dim)
    c["k"], c["v"] = (normal(batch, seqlen_new, heads_kv, head_dim) for _ in range(2))
    angles = torch.rand(capacity + seqlen_q, rotary_dim // 2, generator=generator, device=device,
                        dtype=torch.float64) * 2 * np.pi
    c["rotary_cos"], c["rotary_sin"] = angles.cos().to(dtype), angles.sin().to(dtype)
    live = torch.zeros(slots, rows, dtype=torch.bool, device=device)
    for b in range(batch):
        start = 0 if c["cache_leftpad"] is None else int(c["cache_leftpad"][b])
        live[kvcache_index(c, b, range(start, int(seqlens[b])))] = True
    with torch.no_grad():
        c["k_cache"][~live] = float("nan")
        c["v_cache"][~live] = float("nan")
    return c


def kvcache_index(c, b, positions):
    """Where positions of sequence b lie in the cache: an index into its first two axes."""
    positions = torch.as_tensor(list(positions), dtype=torch.long, device=c["k_cache"].device)
    if c["page_table"] is not None:
        page_size = c["k_cache"].shape[1]
        return c["page_table"][b].long()[positions // page_size], positions % page_size
    row = b if c["cache_batch_idx"] is None else int(c["cache_batch_idx"][b])
    return torch.full_like(positions, row), positions


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
@pytest.mark.parametrize("seqlen_cache, route", [(256, "rows as pages"), (320, "64-key pages"),
                                                 (200, "gathered")])
def test_gpu_kvcache_cache_batch_idx_bf16_matches_float64(rng, seqlen_cache, route):
    # seqlen_cache 200 has no power-of-two divisor >= 16: its rows are gathered into a copy.
    c = kvcache_case(rng, "cuda", torch.bfloat16, seqlen_cache=seqlen_cache, batch_cache=5,
                     batch_idx=True)
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
