"""flash_attn_func on NumPy arrays (CPU reference backend) against the float64 oracle."""

import numpy as np
import pytest

import attention_reference as reference
import hopattn
from checks import assert_close, assert_lse_close

DTYPES = ["float32", "float16"]


def random_inputs(rng, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype):
    q = rng.standard_normal((batch, seqlen_q, heads_q, head_dim)).astype(dtype)
    k = rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)).astype(dtype)
    v = rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)).astype(dtype)
    return q, k, v


def random_options(rng, seqlen_q, seqlen_k):
    causal = bool(rng.integers(2))
    left = -1 if rng.integers(2) else int(rng.integers(0, seqlen_k + 1))
    right = -1 if causal or rng.integers(2) else int(rng.integers(0, seqlen_q + 1))
    return dict(causal=causal, window=(left, right),
                softcap=0.0 if rng.integers(2) else float(rng.uniform(2.0, 30.0)),
                softmax_scale=None if rng.integers(2) else float(rng.uniform(0.05, 0.5)))


def run(q, k, v, options, **kwargs):
    return hopattn.flash_attn_func(q, k, v, softmax_scale=options["softmax_scale"],
                                   causal=options["causal"], window_size=options["window"],
                                   softcap=options["softcap"], **kwargs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(12))
def test_random_shapes_match_reference(rng, dtype, case):
    heads_kv = int(rng.integers(1, 4))
    shape = dict(batch=int(rng.integers(1, 4)), seqlen_q=int(rng.choice([1, rng.integers(2, 70)])),
                 seqlen_k=int(rng.choice([1, rng.integers(2, 90)])), heads_kv=heads_kv,
                 heads_q=heads_kv * int(rng.choice([1, 2, 4])),
                 head_dim=int(rng.choice([1, 8, 33, 64, 128])))
    q, k, v = random_inputs(rng, dtype=dtype, **shape)
    options = random_options(rng, shape["seqlen_q"], shape["seqlen_k"])
    print(shape, options)
    out, lse = run(q, k, v, options, return_attn_probs=True)
    expected_out, expected_lse = reference.dense(q, k, v, **options)
    assert isinstance(out, np.ndarray) and out.dtype == q.dtype
    assert lse.dtype == np.float32
    assert_close(out, expected_out, dtype)
    assert_lse_close(lse, expected_lse)


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_sizes_one(rng, dtype):
    q, k, v = random_inputs(rng, 1, 1, 1, 1, 1, 1, dtype)
    out, lse = hopattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert_close(out, v.astype(np.float64), dtype)  # one key: the output is its value
    assert_lse_close(lse, (q.astype(np.float64) * k.astype(np.float64)).reshape(1, 1, 1))


def test_rows_seeing_no_key_give_zero_and_minus_infinity(rng):
    # Bottom-right causal with seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows see no key.
    q, k, v = random_inputs(rng, 2, 9, 4, 2, 1, 16, "float32")
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert (out[:, :5] == 0).all() and np.isneginf(lse[:, :, :5]).all()
    expected_out, expected_lse = reference.dense(q, k, v, causal=True)
    assert_close(out, expected_out, "float32")
    assert_lse_close(lse, expected_lse)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_views_are_read_in_place(rng, dtype):
    # q as a (b, h, s, d) array transposed, k and v as every other position and a slice of heads.
    batch, seqlen, heads, head_dim = 2, 13, 3, 24
    q = rng.standard_normal((batch, heads, seqlen, head_dim)).astype(dtype).transpose(0, 2, 1, 3)
    kv = rng.standard_normal((2, batch, 2 * seqlen, heads + 2, head_dim)).astype(dtype)
    k, v = kv[0, :, ::2, 1:heads + 1], kv[1, :, ::2, 1:heads + 1]
    assert not (q.flags.c_contiguous or k.flags.c_contiguous)
    out = hopattn.flash_attn_func(q, k, v, causal=True)
    assert_close(out, reference.dense(q, k, v, causal=True)[0], dtype)


def test_out_argument_is_written_in_place(rng):
    q, k, v = random_inputs(rng, 2, 7, 11, 4, 2, 32, "float32")
    out = np.full(q.shape, np.nan, dtype=np.float32)  # poisoned: every element must be written
    result = hopattn.flash_attn_func(q, k, v, softcap=8.0, out=out)
    assert result is out
    assert_close(out, reference.dense(q, k, v, softcap=8.0)[0], "float32")


def test_read_only_inputs_are_accepted(rng):
    q, k, v = random_inputs(rng, 1, 5, 6, 2, 2, 16, "float32")
    for x in (q, k, v):
        x.flags.writeable = False
    assert_close(hopattn.flash_attn_func(q, k, v), reference.dense(q, k, v)[0], "float32")


def test_bfloat16_through_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in random_inputs(rng, 2, 6, 9, 4, 1, 64, "float32"))
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert out.dtype == ml_dtypes.bfloat16
    expected_out, expected_lse = reference.dense(q, k, v, causal=True)
    assert_close(out, expected_out, "bfloat16")
    assert_lse_close(lse, expected_lse)


def test_float8_with_descales(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    batch, heads_q, heads_kv = 2, 4, 2
    q, k, v = (x.astype(ml_dtypes.float8_e4m3fn)
               for x in random_inputs(rng, batch, 5, 8, heads_q, heads_kv, 32, "float32"))
    q_descale, k_descale, v_descale = (rng.uniform(0.5, 2.0, (batch, heads_kv)).astype(np.float32)
                                       for _ in range(3))
    out = hopattn.flash_attn_func(q, k, v, q_descale=q_descale, k_descale=k_descale,
                                  v_descale=v_descale)
    assert out.dtype == ml_dtypes.bfloat16  # FP8 inputs give a bfloat16 output
    group = heads_q // heads_kv
    # q's descale is indexed by the kv head its q head reads, as in flash-attention.
    q64 = q.astype(np.float64) * np.repeat(q_descale, group, axis=1)[:, None, :, None]
    k64 = k.astype(np.float64) * k_descale[:, None, :, None]
    v64 = v.astype(np.float64) * v_descale[:, None, :, None]
    assert_close(out, reference.dense(q64, k64, v64)[0], "bfloat16")


def test_float8_with_softcap_caps_the_descaled_scores(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = (x.astype(ml_dtypes.float8_e4m3fn) for x in random_inputs(rng, 1, 7, 11, 2, 1, 64, "float32"))
    q = (q.astype(np.float32) * 4).astype(ml_dtypes.float8_e4m3fn)  # scores large enough to be capped
    k_descale = np.full((1, 1), 1.5, np.float32)
    out = hopattn.flash_attn_func(q, k, v, k_descale=k_descale, softcap=2.0, causal=True)
    expected = reference.dense(q.astype(np.float64), k.astype(np.float64) * 1.5, v.astype(np.float64),
                               softcap=2.0, causal=True)[0]
    assert_close(out, expected, "bfloat16")
