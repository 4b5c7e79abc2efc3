"""learnable_sink on NumPy arrays (CPU reference backend) against the float64 oracle: a softmax over
each row's scores with the sink's logit appended, whose weight is then dropped."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close
from test_numpy_dense import DTYPES, random_inputs, random_options


def random_sink(rng, heads_q):
    """float32 (heads_q,) logits in the scores' range, so that the sink takes a real share of each
    row, and one head without a sink (-inf) when there are several."""
    sink = rng.uniform(-3.0, 3.0, heads_q).astype(np.float32)
    if heads_q > 1:
        sink[rng.integers(heads_q)] = -np.inf
    return sink


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(6))
def test_random_shapes_with_a_sink_match_reference(rng, dtype, case):
    heads_kv = int(rng.integers(1, 3))
    shape = dict(batch=int(rng.integers(1, 3)), seqlen_q=int(rng.choice([1, rng.integers(2, 40)])),
                 seqlen_k=int(rng.choice([1, rng.integers(2, 50)])), heads_kv=heads_kv,
                 heads_q=heads_kv * int(rng.choice([1, 2, 4])), head_dim=int(rng.choice([1, 16, 40])))
    q, k, v = random_inputs(rng, dtype=dtype, **shape)
    options = random_options(rng, shape["seqlen_q"], shape["seqlen_k"])
    sink = random_sink(rng, shape["heads_q"])
    print(shape, options, sink)
    out = np.full(q.shape, np.nan, dtype=dtype)  # poisoned: every element must be written
    result, lse = hopattn.flash_attn_func(q, k, v, softmax_scale=options["softmax_scale"],
                                          causal=options["causal"], window_size=options["window"],
                                          softcap=options["softcap"], learnable_sink=sink,
                                          return_attn_probs=True, out=out)
    assert result is out
    expected_out, expected_lse = reference.dense(q, k, v, sink=sink, **options)
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)


def test_rows_seeing_no_key_give_zero_and_the_sink(rng):
    # Bottom-right causal with seqlen_q > seqlen_k: the first 5 rows see no key. GQA (4 q heads over
    # 2 kv heads), and head 1 has no sink, so its empty rows keep lse -inf.
    q, k, v = random_inputs(rng, 2, 9, 4, 4, 2, 16, "float32")
    sink = np.array([0.5, -np.inf, -2.0, 3.0], np.float32)
    out = np.full(q.shape, np.nan, np.float32)
    _, lse = hopattn.flash_attn_func(q, k, v, causal=True, learnable_sink=sink,
                                     return_attn_probs=True, out=out)
    assert (out[:, :5] == 0).all()
    np.testing.assert_array_equal(lse[:, :, :5], np.broadcast_to(sink[None, :, None], (2, 4, 5)))
    expected_out, expected_lse = reference.dense(q, k, v, causal=True, sink=sink)
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)


def test_a_sink_of_minus_infinity_is_no_sink(rng):
    q, k, v = random_inputs(rng, 1, 6, 7, 2, 1, 8, "float32")
    without = hopattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    with_sink = hopattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True,
                                        learnable_sink=np.full(2, -np.inf, np.float32))
    for a, b in zip(without, with_sink):
        np.testing.assert_array_equal(a, b)


def test_varlen_and_kvcache_take_a_sink(rng):
    q = rng.standard_normal((7, 4, 16)).astype(np.float32)
    k = rng.standard_normal((9, 2, 16)).astype(np.float32)
    v = rng.standard_normal((9, 2, 16)).astype(np.float32)
    cu_q, cu_k = np.array([0, 3, 7], np.int32), np.array([0, 5, 9], np.int32)
    sink = random_sink(rng, 4)
    out, lse = hopattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 5, causal=True,
                                              learnable_sink=sink, return_attn_probs=True)
    expected_out, expected_lse = reference.varlen(q, k, v, cu_q, cu_k, causal=True, sink=sink)
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)

    q = q[:6].reshape(2, 3, 4, 16)
    k_cache, v_cache = (rng.standard_normal((2, 8, 2, 16)).astype(np.float32) for _ in range(2))
    cache_seqlens = np.array([2, 8], np.int32)  # causal: sequence 0's first query sees no key
    out, lse = hopattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                               causal=True, learnable_sink=sink,
                                               return_softmax_lse=True)
    expected_out, expected_lse = reference.kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                                   causal=True, sink=sink)
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)


def test_packed_variants_pass_the_sink_on(rng):
    sink = random_sink(rng, 2)
    qkv = rng.standard_normal((2, 6, 3, 2, 8)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    expected = hopattn.flash_attn_func(q, k, v, causal=True, learnable_sink=sink)
    assert_close(expected, reference.dense(q, k, v, causal=True, sink=sink)[0], "float32")
    np.testing.assert_array_equal(
        hopattn.flash_attn_qkvpacked_func(qkv, causal=True, learnable_sink=sink), expected)
    np.testing.assert_array_equal(
        hopattn.flash_attn_kvpacked_func(q, qkv[:, :, 1:], causal=True, learnable_sink=sink),
        expected)

    cu = np.array([0, 6, 12], np.int32)
    packed = qkv.reshape(12, 3, 2, 8)
    flat = expected.reshape(12, 2, 8)
    np.testing.assert_array_equal(
        hopattn.flash_attn_varlen_qkvpacked_func(packed, cu, 6, causal=True, learnable_sink=sink),
        flat)
    np.testing.assert_array_equal(
        hopattn.flash_attn_varlen_kvpacked_func(packed[:, 0], packed[:, 1:], cu, cu, 6, 6,
                                                causal=True, learnable_sink=sink),
        flat)
