"""hopattn.quantize_fp8 on NumPy arrays (CPU quantizer) and flash_attn_func over its output with
per-block descales, against float64 NumPy math."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close
from fp8_checks import (E4M3_MAX, assert_within_e4m3, dequantize, group_amax,
                        power_of_two_at_or_above, rows_of_many_magnitudes, scale_per_element)

ml_dtypes = pytest.importorskip("ml_dtypes")

INPUT_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def random_case(rng):
    heads_kv = int(rng.integers(1, 4))
    return dict(batch=int(rng.integers(1, 3)), seqlen_q=int(rng.choice([1, rng.integers(2, 150)])),
                seqlen_k=int(rng.choice([1, rng.integers(2, 150)])), heads_kv=heads_kv,
                heads_q=heads_kv * int(rng.choice([1, 2, 3])),
                head_dim=int(rng.choice([1, 16, 33, 64])))


def random_inputs(rng, s, dtype):
    shape_q = (s["batch"], s["seqlen_q"], s["heads_q"], s["head_dim"])
    shape_kv = (s["batch"], s["seqlen_k"], s["heads_kv"], s["head_dim"])
    return tuple(rows_of_many_magnitudes(rng, shape, INPUT_DTYPES[dtype])
                 for shape in (shape_q, shape_kv, shape_kv))


def check_quantized(inputs, result, granularity, rows_q, rows_kv):
    """Shapes and dtypes, scale = amax / 448 exactly (v's block scales rounded up to a power of two),
    the amax element coded as +-448 (v's as that scale gives it, within [224, 448]), every element
    within e4m3 rounding of x. Returns the dequantized q, k, v in float64."""
    dequantized = []
    rows_of = (rows_q, rows_kv, rows_kv)
    for name, x, codes, descale, rows in zip("qkv", inputs, result[:3], result[3:], rows_of):
        assert isinstance(codes, np.ndarray) and codes.dtype == ml_dtypes.float8_e4m3fn
        assert codes.shape == x.shape, f"{name}8: shape {codes.shape}"
        assert descale.dtype == np.float32
        amax = group_amax(x, granularity, rows)
        assert descale.shape == amax.shape, f"{name}_descale: shape {descale.shape} != {amax.shape}"
        expected_scale = np.where(amax > 0, np.maximum(amax / np.float32(E4M3_MAX), np.float32(2.0 ** -126)),
                                  np.float32(1))
        expected_code_amax = np.where(amax > 0, E4M3_MAX, 0.0)
        if name == "v" and granularity == "block":
            expected_scale = power_of_two_at_or_above(expected_scale)
            # amax / scale is exact (a power-of-two scale); e4m3 then rounds it to nearest even.
            expected_code_amax = np.where(amax > 0, (amax / expected_scale).astype(ml_dtypes.float8_e4m3fn)
                                          .astype(np.float32), 0.0)
            assert np.all((expected_code_amax >= E4M3_MAX / 2) | (amax == 0))
            expected_scale = np.where(amax > 0, expected_scale, np.float32(2.0 ** -40))
        np.testing.assert_array_equal(descale, expected_scale, err_msg=f"{name}_descale != the expected scale")
        code_amax = group_amax(codes.astype(np.float32), granularity, rows)
        np.testing.assert_array_equal(code_amax, expected_code_amax,
                                      err_msg=f"{name}8: the amax of each group must code as its scale says")
        scale = scale_per_element(descale, granularity, x.shape, rows)
        dequantized.append(dequantize(codes, descale, granularity, rows))
        assert_within_e4m3(x, dequantized[-1], scale, f"{name}8")
    return dequantized


@pytest.mark.parametrize("dtype", list(INPUT_DTYPES))
@pytest.mark.parametrize("case", range(8))
def test_block_quantize_then_attend_matches_float64_on_dequantized(rng, dtype, case):
    s = random_case(rng)
    rows_q, rows_kv = (int(rng.choice([1, 3, rng.integers(4, 64), 128])) for _ in range(2))
    causal = bool(rng.integers(2))
    print(s, dict(rows_q=rows_q, rows_kv=rows_kv, causal=causal))
    inputs = random_inputs(rng, s, dtype)
    if case % 2:  # an all-zero first block of k and v in head 0: scales 1 and 2^-40, zero codes
        for x in inputs[1:]:
            x[0, :rows_kv, 0] = 0
    result = hopattn.quantize_fp8(*inputs, block_rows_q=rows_q, block_rows_kv=rows_kv)
    q64, k64, v64 = check_quantized(inputs, result, "block", rows_q, rows_kv)
    q8, k8, v8, q_descale, k_descale, v_descale = result
    out, lse = hopattn.flash_attn_func(q8, k8, v8, causal=causal, return_attn_probs=True,
                                       q_block_descale=q_descale, k_block_descale=k_descale,
                                       v_block_descale=v_descale, descale_block_rows_q=rows_q,
                                       descale_block_rows_kv=rows_kv)
    assert out.dtype == ml_dtypes.bfloat16
    expected_out, expected_lse = reference.dense(q64, k64, v64, causal=causal)
    assert_close(out, expected_out, "bfloat16")
    assert_lse_close(lse, expected_lse)


def test_block_descales_multiply_the_per_head_descales(rng):
    s = dict(batch=2, seqlen_q=21, seqlen_k=34, heads_q=4, heads_kv=2, head_dim=16)
    q8, k8, v8, q_block, k_block, v_block = hopattn.quantize_fp8(
        *random_inputs(rng, s, "bfloat16"), block_rows_q=5, block_rows_kv=8)
    per_head = [rng.uniform(0.25, 4.0, (2, 2)).astype(np.float32) for _ in range(3)]
    out = hopattn.flash_attn_func(q8, k8, v8, q_descale=per_head[0], k_descale=per_head[1],
                                  v_descale=per_head[2], q_block_descale=q_block,
                                  k_block_descale=k_block, v_block_descale=v_block,
                                  descale_block_rows_q=5, descale_block_rows_kv=8)
    q64 = dequantize(q8, q_block, "block", 5) * np.repeat(per_head[0], 2, axis=1)[:, None, :, None]
    k64 = dequantize(k8, k_block, "block", 8) * per_head[1][:, None, :, None]
    v64 = dequantize(v8, v_block, "block", 8) * per_head[2][:, None, :, None]
    assert_close(out, reference.dense(q64, k64, v64)[0], "bfloat16")


def test_only_some_block_descales(rng):
    # k alone per block: q and v codes are taken as they are.
    s = dict(batch=1, seqlen_q=9, seqlen_k=40, heads_q=2, heads_kv=2, head_dim=8)
    q8, k8, v8, _, k_block, _ = hopattn.quantize_fp8(*random_inputs(rng, s, "float16"),
                                                     block_rows_kv=16)
    out = hopattn.flash_attn_func(q8, k8, v8, k_block_descale=k_block, descale_block_rows_kv=16)
    expected = reference.dense(q8.astype(np.float64), dequantize(k8, k_block, "block", 16),
                               v8.astype(np.float64))[0]
    assert_close(out, expected, "bfloat16")


@pytest.mark.parametrize("granularity", ["head", "tensor"])
def test_head_and_tensor_granularity_then_attend(rng, granularity):
    # README's recipe: k/v per-head scales are k/v_descale; q's per-head scales are (batch, heads_q),
    # so they go in as one block of at least seqlen_q rows; a per-tensor scale is broadcast.
    s = dict(batch=2, seqlen_q=11, seqlen_k=19, heads_q=6, heads_kv=2, head_dim=32)
    inputs = random_inputs(rng, s, "bfloat16")
    inputs[1][1, :, 0] = 0  # an all-zero group gets scale 1 and zero codes
    result = hopattn.quantize_fp8(*inputs, granularity=granularity)
    q64, k64, v64 = check_quantized(inputs, result, granularity, None, None)
    q8, k8, v8, q_descale, k_descale, v_descale = result
    if granularity == "head":
        options = dict(q_block_descale=q_descale[:, :, None], descale_block_rows_q=s["seqlen_q"],
                       k_descale=k_descale, v_descale=v_descale)
    else:
        options = {f"{name}_descale": np.full((2, 2), descale[0], np.float32)
                   for name, descale in zip("qkv", (q_descale, k_descale, v_descale))}
    out = hopattn.flash_attn_func(q8, k8, v8, causal=True, **options)
    assert_close(out, reference.dense(q64, k64, v64, causal=True)[0], "bfloat16")


def test_quantized_attention_is_close_to_the_unquantized(rng):
    # What FP8 costs, with and without incoherent processing (which needs no inverse transform):
    # against float64 attention on the bfloat16 inputs themselves, the error stays a small fraction
    # of the output's size (measured about 5%; a misplaced scale or a missing transform of k gives
    # errors of the output's own size).
    shape_q, shape_kv = (2, 70, 4, 64), (2, 90, 2, 64)
    q, k, v = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
               for shape in (shape_q, shape_kv, shape_kv))
    expected = reference.dense(q, k, v)[0]
    for hadamard in (False, True):
        q8, k8, v8, *descales = hopattn.quantize_fp8(q, k, v, block_rows_q=32, block_rows_kv=32,
                                                      hadamard=hadamard, seed=int(rng.integers(2**63)))
        out = hopattn.flash_attn_func(q8, k8, v8, q_block_descale=descales[0],
                                      k_block_descale=descales[1], v_block_descale=descales[2],
                                      descale_block_rows_q=32, descale_block_rows_kv=32)
        error = out.astype(np.float64) - expected
        assert not np.isnan(error).any()
        relative_rms = np.sqrt((error ** 2).mean() / (expected ** 2).mean())
        print(f"hadamard={hadamard}: relative RMS error {relative_rms:.3g}")
        assert relative_rms < 0.1, f"hadamard={hadamard}: relative RMS error {relative_rms:.3g}"


def test_odd_shapes_and_size_one(rng):
    for shape in [(1, 1, 1, 1), (3, 1, 2, 7), (1, 5, 1, 3)]:
        x = rows_of_many_magnitudes(rng, shape, np.float16)
        for granularity in ("block", "head", "tensor"):
            result = hopattn.quantize_fp8(x, x, x, granularity=granularity, block_rows_q=2,
                                          block_rows_kv=3)
            check_quantized((x, x, x), result, granularity, 2, 3)


def test_strided_inputs(rng):
    # (b, h, s, d) storage viewed as (b, s, h, d), and every other head of a wider array.
    q = rows_of_many_magnitudes(rng, (2, 3, 13, 16), ml_dtypes.bfloat16).transpose(0, 2, 1, 3)
    kv = rows_of_many_magnitudes(rng, (2, 17, 6, 16), ml_dtypes.bfloat16)
    k, v = kv[:, :, ::2], kv[:, :, 1::2]
    assert not (q.flags.c_contiguous or k.flags.c_contiguous)
    result = hopattn.quantize_fp8(q, k, v, block_rows_q=4, block_rows_kv=5)
    check_quantized((q, k, v), result, "block", 4, 5)


# ---- incoherent processing (hadamard=True) ---------------------------------------------------

def dot_error_bound(q64, k64, q_scale, k_scale):
    """Bound on |(q8 k8^T)(dequantized) - (qM)(kM)^T| per score, from the e4m3 bound on every element
    of qM and kM (whose size the dequantized values bound) plus float32 rounding of the transform."""
    def element_bound(x, scale):
        magnitude = (np.abs(x) + 2.0 ** -10 * scale) / (1 - 2.0 ** -4)  # >= |x M| itself
        return magnitude, 2.0 ** -4 * magnitude + 2.0 ** -10 * scale
    q_mag, q_err = element_bound(q64, q_scale)
    k_mag, k_err = element_bound(k64, k_scale)
    bound = (np.einsum("bihd,bjhd->bhij", q_err, k_mag) + np.einsum("bihd,bjhd->bhij", q_mag, k_err)
             + np.einsum("bihd,bjhd->bhij", q_err, k_err))
    rounding = 1e-4 * np.einsum("bihd,bjhd->bhij", q_mag, k_mag)
    return bound + rounding


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("granularity", ["block", "head", "tensor"])
def test_hadamard_round_trip_keeps_qk(rng, head_dim, granularity):
    shape_q = (2, int(rng.integers(1, 40)), 2, head_dim)
    shape_kv = (2, int(rng.integers(1, 40)), 2, head_dim)
    q, k, v = (rows_of_many_magnitudes(rng, shape, ml_dtypes.bfloat16)
               for shape in (shape_q, shape_kv, shape_kv))
    seed = int(rng.integers(2**64, dtype=np.uint64))
    print(shape_q, shape_kv, seed)
    result = hopattn.quantize_fp8(q, k, v, granularity=granularity, block_rows_q=8, block_rows_kv=16,
                                  hadamard=True, seed=seed)
    q8, k8, v8, q_descale, k_descale, v_descale = result
    q64, k64 = dequantize(q8, q_descale, granularity, 8), dequantize(k8, k_descale, granularity, 16)
    q_scale = scale_per_element(q_descale, granularity, q.shape, 8)
    k_scale = scale_per_element(k_descale, granularity, k.shape, 16)

    # (qM)(kM)^T == qk^T: the dequantized scores are the original scores within FP8 error.
    scores = np.einsum("bihd,bjhd->bhij", q64, k64)
    expected = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k.astype(np.float64))
    error, bound = np.abs(scores - expected), dot_error_bound(q64, k64, q_scale, k_scale)
    assert (error <= bound).all(), f"{(error > bound).sum()} scores over the FP8 bound"

    # M is orthogonal: each row keeps its length, while its entries really change.
    for name, x, x64, scale in (("q", q, q64, q_scale), ("k", k, k64, k_scale)):
        x = x.astype(np.float64)
        norm, norm64 = np.linalg.norm(x, axis=-1), np.linalg.norm(x64, axis=-1)
        slack = 2.0 ** -4 * norm + 2.0 ** -10 * scale[..., 0] * np.sqrt(head_dim) + 1e-6 * norm
        assert (np.abs(norm64 - norm) <= slack).all(), f"{name}: a row's length changed"
        assert np.abs(x64 - x).max() > 0.5 * np.abs(x).max(), f"{name}: no transform was applied"

    # v is never transformed: its codes are those of the plain quantization.
    plain = hopattn.quantize_fp8(q, k, v, granularity=granularity, block_rows_q=8, block_rows_kv=16)
    np.testing.assert_array_equal(v8.view(np.uint8), plain[2].view(np.uint8))
    np.testing.assert_array_equal(v_descale, plain[5])


def test_hadamard_signs_follow_the_seed(rng):
    q, k, v = (rows_of_many_magnitudes(rng, (1, 9, 2, 64), np.float16) for _ in range(3))
    seed = int(rng.integers(2**63))
    first = hopattn.quantize_fp8(q, k, v, hadamard=True, seed=seed)
    again = hopattn.quantize_fp8(q, k, v, hadamard=True, seed=seed)
    other = hopattn.quantize_fp8(q, k, v, hadamard=True, seed=seed + 1)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
    assert (first[0].view(np.uint8) != other[0].view(np.uint8)).any(), "another seed, the same signs"
