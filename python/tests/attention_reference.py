"""float64 NumPy attention with the softmax materialized: the oracle of the Python tests. Written from
the semantics (flash-attention's), independently of the C++ reference backend."""

import numpy as np


def dense(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0, sink=None,
          attention_chunk=0):
    """q (b, sq, hq, d); k, v (b, sk, hk, d). Returns out (b, sq, hq, d), lse (b, hq, sq), float64.
    sink (hq,): learnable_sink, a logit per q head appended to every row's scores before the
    softmax, its weight then dropped (a key whose value is 0); -inf is no sink.
    attention_chunk c > 0: row i sees only keys j with floor(j / c) == floor(diagonal / c), the
    chunk of its diagonal key (a negative diagonal's chunk holds no key); 0 is off."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    _, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    # The library takes softmax_scale and softcap as float32 and computes the default in float32.
    scale = np.float32(1) / np.sqrt(np.float32(head_dim)) if softmax_scale is None else softmax_scale
    scale, softcap = float(np.float32(scale)), float(np.float32(softcap))
    group = heads_q // heads_kv  # q head h reads kv head h // group
    k = np.repeat(k, group, axis=2)
    v = np.repeat(v, group, axis=2)
    scores = np.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    left, right = window
    if causal:
        right = 0
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    diagonal = i + seqlen_k - seqlen_q  # bottom-right aligned
    allowed = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if right >= 0:
        allowed &= j <= diagonal + right
    if left >= 0:
        allowed &= j >= diagonal - left
    if attention_chunk > 0:
        allowed &= j // attention_chunk == diagonal // attention_chunk  # floor division, as defined
    scores = np.where(allowed, scores, -np.inf)
    if sink is not None:
        sink_scores = np.asarray(sink, dtype=np.float64)[None, :, None, None]
        scores = np.concatenate([scores, np.broadcast_to(sink_scores, scores.shape[:-1] + (1,))], axis=-1)
    keys = scores.shape[-1]  # the sink counts as one
    row_max = scores.max(axis=-1, keepdims=True) if keys else np.full(scores.shape[:-1] + (1,), -np.inf)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    weights = np.exp(scores - row_max)
    denom = weights.sum(axis=-1, keepdims=True)
    seen = denom > 0
    lse = np.where(seen, np.log(np.where(seen, denom, 1.0)) + row_max, -np.inf)[..., 0]
    probs = weights / np.where(seen, denom, 1.0)
    if sink is not None:
        probs = probs[..., :-1]  # the sink's weight: it has no value to add to out
    out = np.einsum("bhij,bjhd->bihd", probs, v)
    return out, lse


def varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, seqused_k=None, seqused_q=None, **options):
    """q (total_q, hq, d), k, v (total_k, hk, d). Returns out like q, lse (hq, total_q); with
    seqused_q, sequence b's queries are its first seqused_q[b] rows, and the rows past them are 0
    in both (their values are not defined)."""
    out = np.zeros(q.shape[:-1] + v.shape[-1:], dtype=np.float64)
    lse = np.zeros((q.shape[1], q.shape[0]), dtype=np.float64)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = cu_seqlens_q[b], cu_seqlens_q[b + 1]
        k0, k1 = cu_seqlens_k[b], cu_seqlens_k[b + 1]
        if seqused_q is not None:
            q1 = q0 + seqused_q[b]
        if seqused_k is not None:
            k1 = k0 + seqused_k[b]
        o, l = dense(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], **options)
        out[q0:q1] = o[0]
        lse[:, q0:q1] = l[0]
    return out, lse


def gather_pages(cache, page_table, seqlen):
    """Sequence keys (seqlen, hk, d) of one row of page_table from a (pages, page_size, hk, d) cache."""
    page_size = cache.shape[1]
    rows = [cache[page_table[j // page_size], j % page_size] for j in range(seqlen)]
    return np.stack(rows) if rows else np.zeros((0,) + cache.shape[2:], dtype=cache.dtype)


def kvcache(q, k_cache, v_cache, *, cache_seqlens, page_table=None, **options):
    """q (b, sq, hq, d) over the first cache_seqlens[b] keys of a dense or paged cache."""
    out = np.zeros(q.shape[:-1] + v_cache.shape[-1:], dtype=np.float64)
    lse = np.zeros((q.shape[0], q.shape[2], q.shape[1]), dtype=np.float64)
    for b in range(q.shape[0]):
        used = int(cache_seqlens[b])
        if page_table is None:
            k, v = k_cache[b, :used], v_cache[b, :used]
        else:
            k, v = gather_pages(k_cache, page_table[b], used), gather_pages(v_cache, page_table[b], used)
        o, l = dense(q[b:b + 1], k[None], v[None], **options)
        out[b], lse[b] = o[0], l[0]
    return out, lse
