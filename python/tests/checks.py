"""Comparisons shared by the tests. Each fails on NaN and says where the worst element is."""

import numpy as np

# The CPU reference accumulates in float64 and rounds once: the result is within half a unit in the
# last place of the output type. These bounds leave a factor of ~2 over that.
RELATIVE_TOLERANCE = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}


def to_float64(x):
    return np.asarray(x).astype(np.float64)


def assert_close(actual, expected, dtype_name, what="out"):
    actual, expected = to_float64(actual), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert not np.isnan(actual).any(), f"{what}: NaN at {np.argwhere(np.isnan(actual))[:5].tolist()}"
    rtol = RELATIVE_TOLERANCE[dtype_name]
    error = np.abs(actual - expected)
    bound = 1e-6 + rtol * np.abs(expected)
    if actual.size and not (error <= bound).all():
        worst = np.unravel_index(np.argmax(error - bound), error.shape)
        raise AssertionError(f"{what}: |actual - expected| = {error[worst]:.3g} at {worst} "
                             f"(actual {actual[worst]!r}, expected {expected[worst]!r}, bound {bound[worst]:.3g})")


def assert_lse_close(actual, expected):
    """float32 LSE: -inf exactly where no key is seen, else within float32 rounding."""
    actual, expected = to_float64(actual), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"lse: shape {actual.shape} != {expected.shape}"
    empty = np.isneginf(expected)
    assert (np.isneginf(actual) == empty).all(), "lse: -inf must mark exactly the rows that see no key"
    assert_close(actual[~empty], expected[~empty], "float32", what="lse")
