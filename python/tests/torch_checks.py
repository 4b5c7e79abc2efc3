"""What the torch tests share: float64 attention math and flash-attention's tolerance rule for
out and the gradients, random inputs seeded from the rng fixture, the gradient checks of the host
and GPU tests, hopattn::fwd with its arguments named, the flash_attn_with_kvcache cases, and
needs_hopper for the GPU tests. Importing it without torch skips the importing test module."""

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


# The masking and scaling options of the GPU gradient tests (test_torch_gpu_kernels.py,
# test_torch_gpu_varlen.py).
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
