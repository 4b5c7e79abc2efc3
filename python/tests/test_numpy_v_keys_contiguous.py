"""An FP8 v with its keys contiguous (V^T in memory: stride 1 along seqlen_k) on NumPy arrays:
flash_attn_func takes it as it is and gives the bits of the ordinary layout, quantize_fp8 returns v8
that way when asked, and every other use is refused with a message naming v."""

import numpy as np
import pytest

import hopattn

ml_dtypes = pytest.importorskip("ml_dtypes")

FLOAT8 = ml_dtypes.float8_e4m3fn


def keys_contiguous(x, padded_keys):
    """x (batch, seqlen_k, heads_kv, d) copied into a (batch, heads_kv, d, padded_keys) buffer whose
    padding is NaN, and returned as the (batch, seqlen_k, heads_kv, d) view of it."""
    batch, seqlen, heads, d = x.shape
    buffer = np.full((batch, heads, d, padded_keys), np.nan, dtype=x.dtype)
    view = buffer[..., :seqlen].transpose(0, 3, 1, 2)
    view[...] = x
    return view


def random_fp8(rng, shape):
    return rng.uniform(-8, 8, shape).astype(FLOAT8)


def test_keys_contiguous_v_gives_the_bits_of_the_ordinary_layout(rng):
    q = random_fp8(rng, (2, 33, 4, 40))
    k, v = random_fp8(rng, (2, 77, 2, 40)), random_fp8(rng, (2, 77, 2, 40))
    v_t = keys_contiguous(v, 80)
    assert v_t.strides[1] == 1 and not v_t.flags.c_contiguous
    descales = {f"{name}_descale": rng.uniform(0.1, 2.0, (2, 2)).astype(np.float32) for name in "qkv"}
    for causal in (False, True):
        out, lse = hopattn.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True, **descales)
        out_t, lse_t = hopattn.flash_attn_func(q, k, v_t, causal=causal, return_attn_probs=True,
                                               **descales)
        np.testing.assert_array_equal(out_t.view(np.uint16), out.view(np.uint16))
        np.testing.assert_array_equal(lse_t.view(np.uint32), lse.view(np.uint32))


@pytest.mark.parametrize("granularity", ["block", "head", "tensor"])
def test_quantize_returns_keys_contiguous_v8_with_the_ordinary_codes(rng, granularity):
    shapes = ((2, 21, 4, 64), (2, 77, 2, 64), (2, 77, 2, 64))
    inputs = [rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for shape in shapes]
    options = dict(granularity=granularity, block_rows_q=16, block_rows_kv=32, hadamard=True, seed=5)
    ordinary = hopattn.quantize_fp8(*inputs, **options)
    keys = hopattn.quantize_fp8(*inputs, v_keys_contiguous=True, **options)
    v8 = keys[2]
    assert v8.shape == (2, 77, 2, 64) and v8.dtype == FLOAT8
    assert v8.strides == (2 * 64 * 80, 1, 64 * 80, 80)  # keys padded to a multiple of 16
    for name, want, got in zip(("q8", "k8", "v8", "q_descale", "k_descale", "v_descale"), ordinary,
                               keys):
        np.testing.assert_array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8),
                                      err_msg=name)
    q8, k8, _, q_descale, k_descale, v_descale = keys
    if granularity == "block":
        scales = dict(q_block_descale=q_descale, k_block_descale=k_descale,
                      v_block_descale=v_descale, descale_block_rows_q=16, descale_block_rows_kv=32)
        out = hopattn.flash_attn_func(q8, k8, v8, causal=True, **scales)
        want = hopattn.flash_attn_func(q8, k8, ordinary[2], causal=True, **scales)
        np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_keys_contiguous_v_needs_float8(rng):
    q, k, v = (rng.standard_normal(shape).astype(np.float32)
               for shape in ((2, 5, 4, 16), (2, 7, 2, 16), (2, 7, 2, 16)))
    with pytest.raises(ValueError, match="^v: has its keys contiguous .* its dtype is float32"):
        hopattn.flash_attn_func(q, k, keys_contiguous(v, 7))


def test_keys_contiguous_v_needs_dense_keys(rng):
    q = random_fp8(rng, (2, 3, 4, 16))
    k_cache, v_cache = random_fp8(rng, (6, 4, 2, 16)), random_fp8(rng, (6, 4, 2, 16))
    page_table = np.array([[5, 0, 3], [1, 4, 2]], np.int32)
    with pytest.raises(ValueError, match=r"^v: has its keys contiguous .* paged \(page_table\)"):
        hopattn.flash_attn_with_kvcache(q, k_cache, keys_contiguous(v_cache, 4), page_table=page_table,
                                        cache_seqlens=np.array([10, 12], np.int32))


def test_v_with_neither_layout_is_refused(rng):
    q, k = random_fp8(rng, (2, 5, 4, 16)), random_fp8(rng, (2, 7, 2, 16))
    v = random_fp8(rng, (2, 7, 2, 32))[..., ::2]
    with pytest.raises(ValueError, match=r"^v: neither its last dimension \(stride\[3\] is 2\)"):
        hopattn.flash_attn_func(q, k, v)
