"""flash-attention 3's qv, sm_margin, scheduler_metadata, cu_seqlens_k_new and rotary_seqlens on
host tensors: their defaults run as a call without them (autograd and torch.compile included), and
the values hopattn refuses leave the KV cache as it was. Skipped without torch."""

import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
from torch_checks import kvcache_case, random_qkv, torch_generator  # noqa: E402


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
    ("cu_seqlens_k_new", "cu", NotImplementedError, "^cu_seqlens_k_new: not implemented with new keys"),
    ("rotary_seqlens", "seqlens", NotImplementedError, "^rotary_seqlens: not implemented with new keys"),
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
