"""Plain eager calls on torch tensors skip the dispatcher and run the kernel directly: they must
give the operator's results bit for bit and raise its errors, and leave the call to the dispatcher
wherever something could observe or record it (dispatch modes, the profiler, autograd, meta
tensors, vmap, torch.compile). Skipped without torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
import hopattn.torch  # noqa: E402,F401  (registers torch.ops.hopattn)
from torch_checks import (  # noqa: E402
    FWD_DEFAULTS, attention_math, fwd_op, random_qkv, torch_generator)


# ---- plain eager calls skip the dispatcher: same results, errors and observers ----------------

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
