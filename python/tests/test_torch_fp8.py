"""FP8 on torch tensors: quantize_fp8 (torch float8 with the NumPy codes; on a GPU side stream, the
host's bits), block descales through the custom operator, V^T reaching the library uncopied, and on
a Hopper GPU the FP8 kernels (block descales, varlen, a KV cache) against float64 attention on the
dequantized operands. Skipped without torch; the GPU tests (test_gpu_*) without a Hopper GPU and a
build with kernels."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
import hopattn.torch  # noqa: E402,F401  (registers torch.ops.hopattn)
from torch_checks import (  # noqa: E402
    attention_math, cumulative, needs_hopper, random_qkv, torch_generator)


# ---- host tensors: quantize_fp8 and the FP8 forward through the custom operator --------------

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


# ---- CUDA tensors: quantize_fp8 on the GPU and the sm_90a FP8 kernels ------------------------

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


# Head dims of the FP8 kernels' widths and between them (96 in the 128-wide kernel, 192 in the 256),
# and a v of its own (DeepSeek's 192 / 128; v 64 beside q/k 128).
@needs_hopper
@pytest.mark.parametrize("d, dv", [(128, 128), (96, 96), (192, 128), (128, 64)])
def test_gpu_block_descales_match_float64_on_dequantized(d, dv):
    rows_q, rows_kv = 64, 128
    shape_q, shape_kv = (2, 300, 4, d), (2, 400, 2, d)
    q = rows_in_blocks_of_magnitude(shape_q, rows_q, 1.0, "cuda")
    k = rows_in_blocks_of_magnitude(shape_kv, rows_kv, 1.0, "cuda")
    v = rows_in_blocks_of_magnitude(shape_kv[:3] + (dv,), rows_kv, 3.0, "cuda")
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
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("pack_gqa", [None, True, False])
def test_gpu_fp8_kvcache_decoding_step_matches_float64(rng, pack_gqa, d):
    # flash_attn_with_kvcache over an FP8 cache with cache_seqlens (seqused_k): one query per sequence,
    # the 4 query heads of a K/V head packed into one tile or not (d 256: the decoding kernel).
    batch, cache, heads_q, heads_kv = 3, 1000, 8, 2
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
