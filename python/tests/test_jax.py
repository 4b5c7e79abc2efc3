"""JAX arrays in, JAX arrays out (eager mode; on the CPU here, on the GPU where JAX has one)."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import attention_reference as reference  # noqa: E402
import hopattn  # noqa: E402
from checks import assert_close, assert_lse_close  # noqa: E402

# These tests exercise the host (reference) path through JAX arrays; on a machine with a GPU, JAX
# would place arrays there by default, so pin them to the CPU device.
CPU = jax.devices("cpu")[0]


def host_array(x):
    return jax.device_put(x, CPU)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_jax_arrays_round_trip(rng, dtype):
    q, k, v = (rng.standard_normal(shape).astype(dtype) for shape in ((2, 7, 4, 16), (2, 9, 2, 16), (2, 9, 2, 16)))
    out, lse = hopattn.flash_attn_func(host_array(q), host_array(k), host_array(v), causal=True,
                                       return_attn_probs=True)
    assert isinstance(out, jax.Array) and out.dtype == jnp.dtype(dtype)
    expected_out, expected_lse = reference.dense(q, k, v, causal=True)
    assert_close(np.asarray(out), expected_out, dtype)
    assert_lse_close(np.asarray(lse), expected_lse)


def test_jax_kvcache_with_int_cache_seqlens(rng):
    q = rng.standard_normal((2, 1, 2, 8)).astype(np.float32)
    cache = rng.standard_normal((2, 6, 1, 8)).astype(np.float32)
    out = hopattn.flash_attn_with_kvcache(host_array(q), host_array(cache), host_array(cache), cache_seqlens=4)
    expected = reference.kvcache(q, cache, cache, cache_seqlens=[4, 4])[0]
    assert_close(np.asarray(out), expected, "float32")


def test_mixing_libraries_is_a_type_error(rng):
    q = rng.standard_normal((1, 3, 1, 8)).astype(np.float32)
    with pytest.raises(TypeError, match="^k is a jax array but q is a numpy array"):
        hopattn.flash_attn_func(q, host_array(q), q)


def test_jax_has_no_keys_contiguous_v8(rng):
    # JAX arrays are always row-major, so quantize_fp8 cannot hand one out as V^T in memory.
    q, k, v = (host_array(rng.standard_normal((1, 5, 1, 16)).astype(np.float16)) for _ in range(3))
    with pytest.raises(NotImplementedError, match="^v_keys_contiguous: JAX arrays"):
        hopattn.quantize_fp8(q, k, v, v_keys_contiguous=True)
