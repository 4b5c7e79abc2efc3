"""pack_gqa (flash-attention 3's option, hopattn::KernelOptions::pack_gqa) on NumPy arrays: every
setting reaches the library and gives the reference's results. The CPU backend has no tiles to pack,
so these tests check the plumbing and the semantics; the kernels' packing is checked on a GPU
(test_torch_gpu_kernels.py, test_gpu_pack_gqa_*)."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close

SETTINGS = [None, True, False]

# GQA with sizes that fill nothing evenly: 3 query heads per K/V head, odd lengths and head dim.
BATCH, HEADS_Q, HEADS_KV, HEAD_DIM = 3, 15, 5, 40
LENGTHS_Q, LENGTHS_K = np.array([3, 7, 1]), np.array([45, 2, 17])


def prefix_sums(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def normal(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def dense_call(rng, dtype, pack_gqa):
    q = normal(rng, (BATCH, 7, HEADS_Q, HEAD_DIM), dtype)
    k, v = (normal(rng, (BATCH, 45, HEADS_KV, HEAD_DIM), dtype) for _ in range(2))
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, pack_gqa=pack_gqa,
                                       return_attn_probs=True)
    return (out, lse), reference.dense(q, k, v, causal=True)


def varlen_call(rng, dtype, pack_gqa):
    cu_q, cu_k = prefix_sums(LENGTHS_Q), prefix_sums(LENGTHS_K)
    q = normal(rng, (cu_q[-1], HEADS_Q, HEAD_DIM), dtype)
    k, v = (normal(rng, (cu_k[-1], HEADS_KV, HEAD_DIM), dtype) for _ in range(2))
    out, lse = hopattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, int(LENGTHS_Q.max()),
                                              int(LENGTHS_K.max()), window_size=(9, 2),
                                              pack_gqa=pack_gqa, return_attn_probs=True)
    return (out, lse), reference.varlen(q, k, v, cu_q, cu_k, window=(9, 2))


def kvcache_call(rng, dtype, pack_gqa):
    # A decoding step of 3 query rows over a dense cache of 50 rows, 45, 3 and 17 of them in use.
    q = normal(rng, (BATCH, 3, HEADS_Q, HEAD_DIM), dtype)
    k_cache, v_cache = (normal(rng, (BATCH, 50, HEADS_KV, HEAD_DIM), dtype) for _ in range(2))
    cache_seqlens = np.array([45, 3, 17], np.int32)
    out, lse = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                               causal=True, softcap=7.0, pack_gqa=pack_gqa,
                                               return_softmax_lse=True)
    return (out, lse), reference.kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                         causal=True, softcap=7.0)


CALLS = {"dense": dense_call, "varlen": varlen_call, "kvcache": kvcache_call}


@pytest.mark.parametrize("pack_gqa", SETTINGS)
@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_setting_matches_the_reference(rng, dtype, call, pack_gqa):
    (out, lse), (expected_out, expected_lse) = CALLS[call](rng, dtype, pack_gqa)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)


@pytest.mark.parametrize("call", CALLS)
def test_the_setting_reaches_the_binding(rng, pack_gqa_passed, call):
    for pack_gqa in SETTINGS:
        CALLS[call](rng, "float32", pack_gqa)
    assert pack_gqa_passed == SETTINGS


def test_cpu_backend_ignores_it_where_the_gpu_kernels_refuse_it(rng):
    # The C++ API checks pack_gqa in the sm_90a backend only (kUnsupported there for FP8, head dims
    # above 128, more than 128 query heads per K/V head); the CPU reference computes as with any
    # setting.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q = normal(rng, (2, 3, 258, 256), np.float32)
    k, v = (normal(rng, (2, 9, 2, 256), np.float32) for _ in range(2))
    assert_close(hopattn.flash_attn_func(q, k, v, pack_gqa=True), reference.dense(q, k, v)[0],
                 "float32")
    q8, k8, v8 = (x[:, :, :4, :64].astype(ml_dtypes.float8_e4m3fn) for x in (q, k, v))
    packed = hopattn.flash_attn_func(q8, k8, v8, pack_gqa=True)
    automatic = hopattn.flash_attn_func(q8, k8, v8)
    np.testing.assert_array_equal(packed.view(np.uint16), automatic.view(np.uint16))
