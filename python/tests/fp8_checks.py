"""What the FP8 tests share: inputs whose magnitude changes from row to row (so that a scale applied
to the wrong rows shows), dequantization of quantize_fp8's output in float64, and the e4m3
rounding bound."""

import numpy as np

E4M3_MAX = 448.0
# e4m3 keeps 3 mantissa bits: a normal value rounds to within 2^-4 of itself. Below the smallest
# normal (2^-6) the grid has steps of 2^-9, so a code is within 2^-10 (times the scale) of x / scale.
E4M3_RELATIVE = 2.0 ** -4
E4M3_SUBNORMAL_HALF_STEP = 2.0 ** -10


def power_of_two_at_or_above(x):
    """The least power of two >= each float32 x > 0, from its bits, as quantize_fp8 rounds v's scales."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = np.where(bits & 0x007FFFFF, (bits & 0x7F800000) + 0x00800000, bits).astype(np.uint32)
    return rounded.view(np.float32)


def rows_of_many_magnitudes(rng, shape, dtype):
    """Normal values times 2^u per (batch, row, head), u uniform in [-4, 4]."""
    magnitude = np.exp2(rng.uniform(-4.0, 4.0, shape[:3] + (1,)))
    return (rng.standard_normal(shape) * magnitude).astype(dtype)


def scale_per_element(descale, granularity, shape, block_rows):
    """The float64 scale of every element of a (batch, seqlen, heads, d) tensor."""
    descale = np.asarray(descale, dtype=np.float64)
    batch, seqlen, heads, _ = shape
    if granularity == "tensor":
        per_row = np.full((batch, heads, seqlen), descale[0])
    elif granularity == "head":
        per_row = np.repeat(descale[:, :, None], seqlen, axis=2)
    else:
        per_row = np.repeat(descale, block_rows, axis=2)[:, :, :seqlen]
    return per_row.transpose(0, 2, 1)[..., None]  # (batch, seqlen, heads, 1)


def dequantize(codes, descale, granularity, block_rows=None):
    return codes.astype(np.float64) * scale_per_element(descale, granularity, codes.shape, block_rows)


def group_amax(x, granularity, block_rows):
    """float32 amax |x| of every scale group, in the descale layout of quantize_fp8."""
    x = np.abs(np.asarray(x, dtype=np.float32))
    if granularity == "tensor":
        return x.max(keepdims=True).reshape(1)
    if granularity == "head":
        return x.max(axis=(1, 3))
    batch, seqlen, heads, _ = x.shape
    blocks = -(-seqlen // block_rows)
    amax = np.empty((batch, heads, blocks), np.float32)
    for block in range(blocks):
        amax[:, :, block] = x[:, block * block_rows:(block + 1) * block_rows].max(axis=(1, 3))
    return amax


def assert_within_e4m3(x, dequantized, scale, what):
    """|x - code * scale| within e4m3 rounding, element by element; no NaN."""
    x = np.asarray(x, dtype=np.float64)
    assert not np.isnan(dequantized).any(), f"{what}: NaN"
    bound = E4M3_RELATIVE * np.abs(x) + E4M3_SUBNORMAL_HALF_STEP * scale + 1e-7 * np.abs(x)
    error = np.abs(x - dequantized)
    if not (error <= bound).all():
        worst = np.unravel_index(np.argmax(error - bound), error.shape)
        raise AssertionError(f"{what}: |x - code * scale| = {error[worst]:.3g} at {worst} > "
                             f"{bound[worst]:.3g} (x {x[worst]!r})")
