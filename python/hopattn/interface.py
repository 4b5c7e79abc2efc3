"""The flash-attention-style entry points.

Arguments after the required ones are keyword-only: flash-attention 2 and 3 disagree on their
positional order (FA2's fourth argument is dropout_p, FA3's is softmax_scale), and a silently
misplaced float is worse than a TypeError.

torch tensors go through the torch operators of hopattn.torch (autograd, torch.compile); other
arrays (NumPy, CuPy, JAX) go straight to the core. Passing `out=` writes into that array and, for
torch, bypasses autograd.

flash-attention 3's qv (forward only; on CUDA arrays the library decides which calls it runs),
sm_margin, scheduler_metadata (get_scheduler_metadata makes an empty one), cu_seqlens_k_new and
rotary_seqlens are taken, with its names and defaults, so that its callers run unchanged; values
other than the defaults (and that empty schedule) that hopattn does not implement are refused,
never ignored. cu_seqlens_k_new and rotary_seqlens without new keys are not read, as in FA3.
"""

import numbers

from . import _core, _kvcache
from ._arrays import check_int32_vector, library_of

_INT32_MAX = 2**31 - 1

_FEATURES = ("hopattn supports softmax_scale, causal, window_size, attention_chunk, softcap, "
             "learnable_sink, GQA/MQA, variable lengths (cu_seqlens), seqused_q, seqused_k / "
             "cache_seqlens, qv (host arrays; CUDA arrays: q/k head dim 64 with v 512), "
             "v's own head dim, "
             "paged KV (page_table), FP8 e4m3 inputs with q/k/v_descale (and per-block "
             "q/k/v_block_descale in flash_attn_func), deterministic backward passes, and in "
             "flash_attn_with_kvcache k/v appends, rotary embedding, cache_batch_idx and "
             "cache_leftpad")


def _reject(name, value, default=None):
    """NotImplementedError for a flash-attention option hopattn does not implement."""
    unsupported = value is not None if default is None else value != default
    if unsupported:
        shown = f"an array of shape {tuple(value.shape)}" if hasattr(value, "shape") else repr(value)
        raise NotImplementedError(f"{name}: {shown} is not supported (only {name}={default!r}); "
                                  f"{_FEATURES}")


def _new_key_lengths(name, value, length, appends):
    """flash-attention 3's cu_seqlens_k_new (new keys as packed variable-length rows, `length`
    batch + 1) and rotary_seqlens (the rotary positions of the new keys, `length` batch). Its
    kernels read them only where new keys are appended; without k and v they skip them, and
    inference engines pass cu_seqlens_k_new with every call (SGLang's FA3 backend: the cache's
    cumulative lengths). So here: without k and v (`appends`), checked as what they would be, an
    int32 array of `length` entries, and not read; with k and v, not implemented."""
    if value is None:
        return
    if appends:
        raise NotImplementedError(
            f"{name}: not implemented with new keys k and v; hopattn appends k and v of shape "
            "(batch, seqlen_new, heads_kv, head_dim) at positions cache_seqlens[b] + i (rotary "
            f"positions too). Without k and v, {name} is taken and not read, as in "
            "flash-attention 3")
    check_int32_vector(value, name, length, "batch + 1" if name == "cu_seqlens_k_new" else "batch")


def _check_kvcache_qv(qv, q, v_cache):
    """flash_attn_with_kvcache's qv, before the cache is written (the library checks it again):
    out's shape (q's with v_cache's head dim), q's dtype, not FP8 (which the library refuses on
    any device). Which CUDA calls run with qv the library decides, after any append."""
    if qv is None:
        return
    expected = tuple(q.shape[:-1]) + (int(v_cache.shape[-1]),)
    if tuple(qv.shape) != expected:
        raise ValueError(f"qv: shape {tuple(qv.shape)} is not allowed; it must be q's with "
                         f"v_cache's head dim last, {expected}")
    lib = library_of(q, "q")
    qv_dtype = library_of(qv, "qv").dtype_name(qv)
    if qv_dtype != lib.dtype_name(q):
        raise ValueError(f"qv: dtype {qv_dtype} is not q's {lib.dtype_name(q)}; qv must have q's "
                         "dtype")
    if lib.dtype_name(q).startswith("float8"):
        raise NotImplementedError("qv: given with float8_e4m3 inputs; qv is supported with "
                                  "float32, float16 and bfloat16 host arrays and float16 and "
                                  "bfloat16 CUDA arrays")


def _is_int(w):
    return type(w) is int or isinstance(w, numbers.Integral)  # the ABC check is slower


def _window(window_size):
    # No try/except here: torch.compile traces this function.
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2
            and _is_int(window_size[0]) and _is_int(window_size[1])):
        raise TypeError(f"window_size: expected a pair (left, right) of ints, -1 meaning unbounded; "
                        f"got {window_size!r}")
    return int(window_size[0]), int(window_size[1])


def _non_negative_int(name, value, meaning, zero):
    # An int, not a bool (True would silently mean 1), >= 0. meaning: what the int counts; zero:
    # what 0 means. No try/except: torch.compile traces this function.
    if isinstance(value, bool) or not _is_int(value):
        raise TypeError(f"{name}: expected an int ({meaning}), got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: {int(value)} is not allowed; it must be >= 0 ({zero})")
    return int(value)


def _attention_chunk(attention_chunk):
    # A negative value is refused here as the library refuses it, so that flash_attn_with_kvcache
    # refuses it before appending to the cache. Any chunk at least as long as a sequence's keys
    # masks alike, so values past the C++ int's range are clamped, not refused.
    chunk = _non_negative_int("attention_chunk", attention_chunk,
                              "0 = off, else the chunk length in keys", "0 = off: no chunks")
    return min(chunk, _INT32_MAX)


def _pack_gqa(pack_gqa):
    # Only the three values flash-attention 3 takes; an int is refused rather than read as a truth
    # value, since num_splits=0 means automatic and pack_gqa=0 could be meant either way.
    if not (pack_gqa is None or pack_gqa is True or pack_gqa is False):
        raise TypeError(f"pack_gqa: expected None (automatic), True (always pack) or False (never "
                        f"pack), got {pack_gqa!r}")
    return pack_gqa


def _sm_margin(sm_margin):
    # flash-attention 3's SMs to leave idle for other work (communication kernels, say).
    # hopattn's persistent kernels size their grid to the SM count and take no margin yet, so a
    # margin is refused rather than ignored: the caller counts on those SMs being free.
    margin = _non_negative_int("sm_margin", sm_margin, "the SMs to leave idle, 0 = none",
                               "0 = leave no SM idle")
    if margin > 0:
        raise NotImplementedError(f"sm_margin: {margin} is not supported (only sm_margin=0); "
                                  "hopattn's persistent kernels size their grid to the GPU's SM "
                                  "count and cannot leave SMs idle yet")


_NO_SCHEDULE = ("hopattn plans its schedule at launch and takes no precomputed one: pass None or "
                "what hopattn.get_scheduler_metadata returns (an empty int32 array)")


def _scheduler_metadata(scheduler_metadata):
    # flash-attention 3's precomputed tile schedule. hopattn's get_scheduler_metadata returns an
    # empty int32 array, of any library (it carries nothing), which is taken as None is; anything
    # else would be a schedule that hopattn cannot follow.
    if scheduler_metadata is None:
        return
    if not (hasattr(scheduler_metadata, "shape") and hasattr(scheduler_metadata, "dtype")):
        raise TypeError(f"scheduler_metadata: expected None or an array, got "
                        f"{type(scheduler_metadata).__name__}; {_NO_SCHEDULE}")
    dtype = library_of(scheduler_metadata, "scheduler_metadata").dtype_name(scheduler_metadata)
    if dtype != "int32":
        raise TypeError(f"scheduler_metadata: dtype {dtype} is not int32; {_NO_SCHEDULE}")
    shape = tuple(int(n) for n in scheduler_metadata.shape)
    if shape != (0,):
        raise ValueError(f"scheduler_metadata: shape {shape} is not (0,); {_NO_SCHEDULE}")


# hopattn.torch's forward, set when that module is imported (hopattn/__init__.py imports it when
# torch is already loaded), so that torch.compile never traces an import here.
torch_forward = None


def _forward(q, k, v, out, return_lse, deterministic=False, **kwargs):
    # deterministic reaches the torch backward; other arrays (and out=) have no autograd to use it.
    if out is None and type(q).__module__.split(".")[0] == "torch":
        if torch_forward is None:
            from . import torch  # noqa: F401  (sets torch_forward)
        result, lse = torch_forward(q, k, v, return_lse=return_lse, deterministic=deterministic,
                                    **kwargs)
    else:
        result, lse = _core.forward(q, k, v, out=out, return_lse=return_lse, **kwargs)
    return (result, lse) if return_lse else result


def flash_attn_func(q, k, v, *, softmax_scale=None, causal=False, window_size=(-1, -1),
                    attention_chunk=0, softcap=0.0, learnable_sink=None, return_attn_probs=False,
                    q_descale=None, k_descale=None, v_descale=None, q_block_descale=None,
                    k_block_descale=None, v_block_descale=None, descale_block_rows_q=128,
                    descale_block_rows_kv=128, num_splits=0, pack_gqa=None, out=None,
                    dropout_p=0.0, alibi_slopes=None, deterministic=False, qv=None, sm_margin=0):
    """Attention over dense batches.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim), heads_q a
    multiple of heads_kv. Returns out like q (bfloat16 for FP8 inputs), or (out, lse) when
    return_attn_probs: like flash-attention 3, the log-sum-exp (float32, (batch, heads_q,
    seqlen_q), natural log) is returned, not the attention probabilities.

    head_dim: on CUDA, bfloat16/float16 take any multiple of 8 from 8 to 256, forward and backward
    (a head dim other than 64, 128 or 256 runs in the next wider kernel), FP8 any multiple of 16 from
    16 to 256 (64, 128, 192 and 256 native, others in the next wider of those); host
    arrays any head dim from 1 to 512. v (and v_cache) may have a head dim of its own
    (flash-attention 3's headdim_v, e.g. DeepSeek's q/k 192 and v 128): out then ends in it. Host
    arrays take any (1 to 512), bfloat16/float16 CUDA arrays any multiple of 8 up to 256 (forward
    and backward), FP8 any multiple of 16 up to 256 (the kernel of the wider head dim runs). The
    same holds for every function here.

    attention_chunk (flash-attention 3's; Llama 4's chunked local attention): 0 (default) is off;
    c > 0 cuts the keys into chunks [0, c), [c, 2c), ... and query i sees only the keys of the
    chunk that holds its diagonal key i + seqlen_k - seqlen_q (floor(j / c) == floor(diagonal /
    c)), on top of causal and window_size. A row whose diagonal lies before key 0 sees no key (out
    0, lse -inf). Not an int: TypeError; negative: ValueError. The same holds for every function
    here, with each sequence's own lengths (and keys in use) where they vary.

    learnable_sink (flash-attention's; gpt-oss's attention sinks): float32 (heads_q,), one logit per
    query head that joins every row's softmax as a key whose value is 0: out_i = sum_j
    exp(s_ij - lse_i) v_j with lse_i = log(exp(sink_h) + sum_j exp(s_ij)), so rows may put weight
    on nothing. A row that sees no key gives out 0 and lse sink_h; -inf is no sink for that head.
    torch tensors may be of any floating dtype (converted to float32 outside the operator, so the
    gradient comes back in the sink's dtype; with out= it must be float32), and the backward
    gives the sink its gradient. The same holds for every function here.

    FP8 e4m3 inputs take float32 descales: q/k/v_descale (batch, heads_kv) per head, and/or the
    per-block scales of quantize_fp8(granularity="block"): q_block_descale (batch, heads_q,
    ceil(seqlen_q / descale_block_rows_q)), k/v_block_descale (batch, heads_kv,
    ceil(seqlen_k / descale_block_rows_kv)); row i of q (key j) is multiplied by entry
    i // descale_block_rows_q (j // descale_block_rows_kv), on top of the per-head factor.

    pack_gqa (flash-attention 3's): None lets the sm_90a kernels put the query heads that share a
    K/V head into one tile where that needs fewer tiles (GQA with fewer query rows than a 128-row
    tile: decoding); True packs every call they can (bf16/fp16 at head dims up to 128, at most 128
    query heads per K/V head; above 128, decoding steps of at most 8 query rows a K/V head; FP8 not
    over a q block descale; any other call raises NotImplementedError); False never packs.
    Results match either way, to rounding. The CPU backend ignores it, as it does in the C++ API.

    deterministic: torch's backward gives bitwise reproducible dq, dk, dv (the CUDA kernel then
    sums dq in a fixed order, which is slower; see hopattn::BwdArgs).

    qv (flash-attention 3's; DeepSeek's multi-head latent attention, decoding with the projections
    absorbed): a second query of v's head dim, in out's shape: the scores become softmax_scale *
    (q . k + qv . v), and the default softmax_scale 1/sqrt(head_dim + v's head_dim). Forward only,
    as in FA3 (torch's backward raises NotImplementedError naming qv). Host arrays of float32,
    float16 or bfloat16 take it with every other option (the CPU reference). CUDA arrays go to the
    library, which decides: the sm_90a kernel takes bfloat16 / float16 q and k of head dim 64 with
    v, qv and out of head dim 512 (DeepSeek's MLA decoding shapes), dense or paged k/v,
    seqused_k / cache_seqlens, causal or not, any GQA ratio, softmax_scale, the lse and
    num_splits; any other CUDA call with qv (other head dims, variable lengths, seqused_q, a
    sliding window, softcap, learnable_sink, attention_chunk) raises NotImplementedError naming qv
    and what it was given with. FP8 inputs raise NotImplementedError naming qv on any device.

    flash-attention 3's sm_margin (SMs to leave idle for other work) is taken so that its callers
    run unchanged: 0 runs as without it. It must be an int (TypeError otherwise, bools included)
    and >= 0 (ValueError); above 0 it raises NotImplementedError: hopattn's persistent kernels size
    their grid to the GPU's SM count and cannot leave SMs idle yet. The same holds for every
    function here that takes qv and sm_margin.
    """
    _reject("dropout_p", dropout_p, 0.0)
    _reject("alibi_slopes", alibi_slopes)
    _sm_margin(sm_margin)
    left, right = _window(window_size)
    return _forward(q, k, v, out, return_attn_probs, deterministic, softmax_scale=softmax_scale,
                    causal=causal, window_left=left, window_right=right,
                    attention_chunk=_attention_chunk(attention_chunk), softcap=softcap,
                    learnable_sink=learnable_sink, qv=qv, num_splits=num_splits,
                    pack_gqa=_pack_gqa(pack_gqa),
                    q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                    q_block_descale=q_block_descale, k_block_descale=k_block_descale,
                    v_block_descale=v_block_descale, descale_block_rows_q=descale_block_rows_q,
                    descale_block_rows_kv=descale_block_rows_kv)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False,
                           window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                           learnable_sink=None, return_attn_probs=False, block_table=None,
                           page_table=None, q_descale=None, k_descale=None, v_descale=None,
                           num_splits=0, pack_gqa=None, out=None, dropout_p=0.0,
                           alibi_slopes=None, deterministic=False, qv=None,
                           scheduler_metadata=None, sm_margin=0):
    """Attention over packed variable-length sequences.

    q: (total_q, heads_q, head_dim); k, v: (total_k, heads_kv, head_dim), or paged
    (num_pages, page_size, heads_kv, head_dim) with block_table/page_table (batch, pages_per_seq).
    cu_seqlens_q/k: int32 (batch + 1) prefix sums; sequence b owns rows cu[b]..cu[b+1].
    seqused_k: int32 (batch), keys actually used per sequence; with a paged cache, cu_seqlens_k may
    give those counts instead (flash-attention 2's convention).
    seqused_q (flash-attention 3's): int32 (batch), query rows actually used per sequence, in [0,
    that sequence's rows]: sequence b's first seqused_q[b] rows are its queries (causal, windows and
    chunks align to them), and the rest are not read. Their out and lse rows are not written:
    given out= keeps what it held there (as in flash-attention 3), while arrays hopattn allocates
    hold what a row that sees no key gives (out 0, lse -inf), never uninitialized memory. The
    backward gives them dq = 0.
    Returns out, or (out, lse) with lse float32 (heads_q, total_q) when return_attn_probs.
    attention_chunk, learnable_sink, pack_gqa, deterministic, qv and sm_margin: as in
    flash_attn_func (chunks count from each sequence's first key).
    scheduler_metadata (flash-attention 3's precomputed schedule): None, or what
    get_scheduler_metadata returns, an empty int32 array, which runs as None does: hopattn plans
    its schedule at launch. Any other array raises ValueError (TypeError for one not int32 or no
    array at all), naming scheduler_metadata.
    """
    _reject("dropout_p", dropout_p, 0.0)
    _reject("alibi_slopes", alibi_slopes)
    _scheduler_metadata(scheduler_metadata)
    _sm_margin(sm_margin)
    if block_table is not None and page_table is not None:
        raise ValueError("block_table and page_table name the same argument; pass one of them")
    if page_table is None:
        page_table = block_table
    if page_table is not None and cu_seqlens_k is not None:
        # flash-attention 2 gives a paged cache's key counts as cu_seqlens_k; hopattn as seqused_k.
        if seqused_k is not None:
            raise ValueError("cu_seqlens_k and seqused_k: with a page_table give the key counts once")
        seqused_k, cu_seqlens_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1], None
    left, right = _window(window_size)
    return _forward(q, k, v, out, return_attn_probs, deterministic, softmax_scale=softmax_scale,
                    causal=causal, window_left=left, window_right=right,
                    attention_chunk=_attention_chunk(attention_chunk), softcap=softcap,
                    learnable_sink=learnable_sink, qv=qv, cu_seqlens_q=cu_seqlens_q,
                    cu_seqlens_k=cu_seqlens_k,
                    max_seqlen_q=int(max_seqlen_q), max_seqlen_k=int(max_seqlen_k),
                    seqused_k=seqused_k, seqused_q=seqused_q, page_table=page_table,
                    num_splits=num_splits, pack_gqa=_pack_gqa(pack_gqa), q_descale=q_descale,
                    k_descale=k_descale, v_descale=v_descale)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None,
                            page_table=None, block_table=None, cu_seqlens_q=None, max_seqlen_q=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1),
                            attention_chunk=0, softcap=0.0, learnable_sink=None, q_descale=None,
                            k_descale=None, v_descale=None, num_splits=0, pack_gqa=None,
                            return_softmax_lse=False, out=None, rotary_cos=None, rotary_sin=None,
                            rotary_interleaved=False, cache_batch_idx=None, cache_leftpad=None,
                            alibi_slopes=None, qv=None, cu_seqlens_k_new=None, rotary_seqlens=None,
                            scheduler_metadata=None, sm_margin=0):
    """Attention of new queries over a KV cache (decoding), with flash-attention's semantics.

    q: (batch, seqlen_q, heads_q, head_dim), or (total_q, heads_q, head_dim) with cu_seqlens_q.
    k_cache, v_cache: (batch_cache, seqlen_cache, heads_kv, head_dim), or paged
    (num_pages, page_size, heads_kv, head_dim) with page_table/block_table (batch, pages_per_seq):
    position p of sequence b is row p % page_size of page page_table[b, p // page_size].
    cache_seqlens: int or int32 (batch): keys in use per sequence (seqused_k); causal, windows
    and attention_chunk align the queries to the end of the keys in use (chunks count from the
    first key in use: position 0, or cache_leftpad[b]). None: the whole cache.

    k, v (batch, seqlen_new, heads_kv, head_dim), of the cache's dtype: written into k_cache and
    v_cache IN PLACE at positions cache_seqlens[b] + i (cache_seqlens is then required; it is not
    modified); attention then runs over cache_seqlens + seqlen_new keys. Not with cu_seqlens_q.
    The append runs before the attention: an error of the attention itself (a head dim the GPU
    kernels lack, say) leaves the new keys written. No gradient flows into k and v.
    rotary_cos, rotary_sin (seqlen_ro >= the cache's keys per sequence, rotary_dim / 2), only with
    k and v: the new keys are rotated at positions cache_seqlens[b] + i before they are written;
    q (a rotated copy; q itself is unchanged) at cache_seqlens[b] + i when causal, with a window or
    with an attention_chunk (flash-attention 3's rule), else every query at cache_seqlens[b].
    Only the first rotary_dim (even, <= head_dim) features turn; computed in float32 and rounded
    to the inputs' dtype. rotary_interleaved: False rotates feature i with i + rotary_dim / 2
    (GPT-NeoX), True features 2i with 2i + 1 (GPT-J).
    cache_batch_idx int32 (batch), dense caches only: sequence b uses cache row
    cache_batch_idx[b], for the append and the attention. The cache is then read as a paged one
    whose pages are the cache rows (or power-of-two pieces of them, at least 16 keys, what the GPU
    kernels take), without a copy; where no such view exists (seqlen_cache without a power-of-two
    divisor >= 16, or rows not back to back), the rows are gathered into a temporary copy first:
    correct, but that costs a copy of batch cache rows per call.
    cache_leftpad int32 (batch), dense caches only: sequence b's keys start at cache_leftpad[b];
    the keys in use are [cache_leftpad[b], cache_seqlens[b] + seqlen_new), and rotary positions
    stay those of the cache. It reads the cache as packed keys through cu_seqlens_k (a cache whose
    rows do not lie back to back is copied first).
    Index values (cache_seqlens, cache_batch_idx, cache_leftpad, page tables) of CUDA arrays are
    trusted, as in flash-attention: checking them would need a device sync. Host arrays are
    checked (ValueError naming the argument) before anything is written. JAX arrays are immutable:
    k and v raise TypeError (write the cache yourself and pass the grown cache_seqlens), and
    cache_batch_idx and cache_leftpad are not implemented for them.

    num_splits: split-KV, 0 = heuristic, 1 = none, n = n pieces per query tile (the sm_90a
    kernels, for non-causal calls without a window; FP8 at head dims 64 and 128, not with block
    descales alone; results match to rounding either way). attention_chunk, learnable_sink,
    pack_gqa, qv and sm_margin: as in flash_attn_func; scheduler_metadata: as in
    flash_attn_varlen_func. Returns out, or (out, lse) when return_softmax_lse.

    flash-attention 3's cu_seqlens_k_new (new keys packed as variable-length rows) and
    rotary_seqlens (rotary positions other than cache_seqlens) are read by its kernels only when
    new keys are appended. Without k and v they are taken and not read, as there (inference
    engines such as SGLang pass cu_seqlens_k_new with every call), once checked as int32 arrays
    of shape (batch + 1,) and (batch,); with k and v they are not implemented
    (NotImplementedError). These arguments, like pack_gqa, attention_chunk and window_size, are
    checked before the cache is written: a call refused for them leaves k_cache and v_cache as
    they were.
    """
    _reject("alibi_slopes", alibi_slopes)
    _scheduler_metadata(scheduler_metadata)
    _sm_margin(sm_margin)
    pack_gqa = _pack_gqa(pack_gqa)  # before the append, as every check of the arguments alone
    _check_kvcache_qv(qv, q, v_cache)
    if block_table is not None and page_table is not None:
        raise ValueError("block_table and page_table name the same argument; pass one of them")
    if page_table is None:
        page_table = block_table
    varlen_q = cu_seqlens_q is not None
    _core.check_q_rank(q.shape, varlen_q)
    if varlen_q and max_seqlen_q is None:
        raise ValueError("max_seqlen_q: required with cu_seqlens_q")
    batch = int(cu_seqlens_q.shape[0]) - 1 if varlen_q else int(q.shape[0])
    appends = k is not None or v is not None
    _new_key_lengths("cu_seqlens_k_new", cu_seqlens_k_new, batch + 1, appends)
    _new_key_lengths("rotary_seqlens", rotary_seqlens, batch, appends)
    left, right = _window(window_size)
    chunk = _attention_chunk(attention_chunk)
    arguments = dict(q=q, k=k_cache, v=v_cache, out=out, seqused_k=cache_seqlens,
                     page_table=page_table, cu_seqlens_q=cu_seqlens_q,
                     max_seqlen_q=int(max_seqlen_q or 0), cu_seqlens_k=None, max_seqlen_k=0)
    finish = None
    if (k is not None or v is not None or rotary_cos is not None or rotary_sin is not None
            or cache_batch_idx is not None or cache_leftpad is not None):
        descaled = q_descale is not None or k_descale is not None or v_descale is not None
        arguments, finish = _kvcache.prepare(
            q, k_cache, v_cache, k, v, batch=batch, cache_seqlens=cache_seqlens,
            page_table=page_table, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
            rotary_cos=rotary_cos, rotary_sin=rotary_sin, rotary_interleaved=rotary_interleaved,
            causal=causal, window=(left, right), attention_chunk=chunk, cu_seqlens_q=cu_seqlens_q,
            max_seqlen_q=arguments["max_seqlen_q"], out=out, descaled=descaled)
    elif isinstance(cache_seqlens, int):
        arguments["seqused_k"] = library_of(q, "q").int32_full(q, (batch,), cache_seqlens)
    if qv is not None and len(arguments["q"].shape) != len(qv.shape):
        qv = qv.reshape((-1,) + tuple(qv.shape[2:]))  # q went to the core as packed rows: qv too
    q, k_cache, v_cache, out = (arguments.pop(name) for name in ("q", "k", "v", "out"))
    result = _forward(q, k_cache, v_cache, out, return_softmax_lse,
                      softmax_scale=softmax_scale, causal=causal, window_left=left,
                      window_right=right, attention_chunk=chunk, softcap=softcap,
                      learnable_sink=learnable_sink, qv=qv,
                      num_splits=num_splits, pack_gqa=pack_gqa, q_descale=q_descale,
                      k_descale=k_descale, v_descale=v_descale, **arguments)
    if finish is None:
        return result
    out, lse = finish(*(result if return_softmax_lse else (result, None)))
    return (out, lse) if return_softmax_lse else out


def get_scheduler_metadata(batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv,
                           headdim, cache_seqlens, qkv_dtype=None, headdim_v=None,
                           cu_seqlens_q=None, cu_seqlens_k_new=None, cache_leftpad=None,
                           page_size=None, max_seqlen_k_new=0, causal=False,
                           window_size=(-1, -1), attention_chunk=0, has_softcap=False,
                           num_splits=0, pack_gqa=None, sm_margin=0):
    """flash-attention 3's get_scheduler_metadata, with its arguments, for callers that plan a
    flash_attn_with_kvcache (or flash_attn_varlen_func) call ahead and pass the result as its
    scheduler_metadata. hopattn plans its schedule at launch, so there is nothing to precompute:
    returns an empty int32 array (shape (0,)) of cache_seqlens' array library, on its device (a
    NumPy array when cache_seqlens is None or an int), which those functions take as they take
    None.

    The arguments describe the planned call; hopattn reads none of them beyond these checks:
    batch_size, max_seqlen_q, max_seqlen_k, max_seqlen_k_new and num_splits ints >= 0;
    num_heads_q, num_heads_kv, headdim and headdim_v (None: headdim) and page_size (None: no
    paged cache) ints >= 1 (TypeError when not an int, ValueError when out of range); window_size,
    attention_chunk, pack_gqa and sm_margin as in the attention functions (sm_margin > 0 raises
    NotImplementedError); cache_seqlens None, an int, or an int32 array of shape (batch_size,);
    cu_seqlens_k_new None or an int32 array of shape (batch_size + 1,), as flash_attn_with_kvcache
    takes it without new keys (with max_seqlen_k_new > 0 it plans an append of variable-length
    new keys, which flash_attn_with_kvcache does not implement: NotImplementedError).
    qkv_dtype, cu_seqlens_q, cache_leftpad, causal and has_softcap are taken as they are.
    """
    for name, value, minimum in (
            ("batch_size", batch_size, 0), ("max_seqlen_q", max_seqlen_q, 0),
            ("max_seqlen_k", max_seqlen_k, 0), ("num_heads_q", num_heads_q, 1),
            ("num_heads_kv", num_heads_kv, 1), ("headdim", headdim, 1),
            ("max_seqlen_k_new", max_seqlen_k_new, 0), ("num_splits", num_splits, 0)):
        _core._check_int(name, value, minimum)
    for name, value in (("headdim_v", headdim_v), ("page_size", page_size)):
        if value is not None:  # headdim's; no paged cache
            _core._check_int(name, value, 1)
    _window(window_size)
    _attention_chunk(attention_chunk)
    _pack_gqa(pack_gqa)
    _sm_margin(sm_margin)
    _new_key_lengths("cu_seqlens_k_new", cu_seqlens_k_new, int(batch_size) + 1,
                     appends=max_seqlen_k_new > 0)
    if cache_seqlens is None or _is_int(cache_seqlens):
        import numpy
        return numpy.empty((0,), numpy.int32)
    check_int32_vector(cache_seqlens, "cache_seqlens", int(batch_size), "batch_size")
    return library_of(cache_seqlens, "cache_seqlens").int32_full(cache_seqlens, (0,), 0)


def _unpack(packed, name, count, rank, layout):
    """The `count` strided views of a packed q/k/v array along its packing axis (rank - 3), no copy."""
    shape = tuple(getattr(packed, "shape", ()))
    if len(shape) != rank or shape[rank - 3] != count:
        raise ValueError(f"{name}: expected {layout} with {count} at axis {rank - 3}, got shape {shape}")
    index = (slice(None),) * (rank - 3)
    return tuple(packed[index + (i,)] for i in range(count))


def flash_attn_qkvpacked_func(qkv, *, softmax_scale=None, causal=False, window_size=(-1, -1),
                              attention_chunk=0, softcap=0.0, learnable_sink=None,
                              return_attn_probs=False, out=None, dropout_p=0.0, alibi_slopes=None,
                              deterministic=False, sm_margin=0):
    """flash_attn_func on flash-attention's packed layout: qkv (batch, seqlen, 3, heads, head_dim).

    q, k and v are strided views of qkv (no copy); with torch, gradients flow back into qkv.
    """
    q, k, v = _unpack(qkv, "qkv", 3, 5, "(batch, seqlen, 3, heads, head_dim)")
    return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                           window_size=window_size, attention_chunk=attention_chunk,
                           softcap=softcap, learnable_sink=learnable_sink,
                           return_attn_probs=return_attn_probs, out=out, dropout_p=dropout_p,
                           alibi_slopes=alibi_slopes, deterministic=deterministic,
                           sm_margin=sm_margin)


def flash_attn_kvpacked_func(q, kv, *, softmax_scale=None, causal=False, window_size=(-1, -1),
                             attention_chunk=0, softcap=0.0, learnable_sink=None,
                             return_attn_probs=False, out=None, dropout_p=0.0, alibi_slopes=None,
                             deterministic=False, sm_margin=0):
    """flash_attn_func with k and v packed: kv (batch, seqlen_k, 2, heads_kv, head_dim)."""
    k, v = _unpack(kv, "kv", 2, 5, "(batch, seqlen_k, 2, heads_kv, head_dim)")
    return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                           window_size=window_size, attention_chunk=attention_chunk,
                           softcap=softcap, learnable_sink=learnable_sink,
                           return_attn_probs=return_attn_probs, out=out, dropout_p=dropout_p,
                           alibi_slopes=alibi_slopes, deterministic=deterministic,
                           sm_margin=sm_margin)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, *, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), attention_chunk=0,
                                     softcap=0.0, learnable_sink=None, return_attn_probs=False,
                                     out=None, dropout_p=0.0, alibi_slopes=None,
                                     deterministic=False, sm_margin=0):
    """flash_attn_varlen_func on packed sequences with q, k, v packed: qkv (total, 3, heads,
    head_dim); cu_seqlens and max_seqlen serve queries and keys alike."""
    q, k, v = _unpack(qkv, "qkv", 3, 4, "(total, 3, heads, head_dim)")
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  softmax_scale=softmax_scale, causal=causal,
                                  window_size=window_size, attention_chunk=attention_chunk,
                                  softcap=softcap, learnable_sink=learnable_sink,
                                  return_attn_probs=return_attn_probs, out=out,
                                  dropout_p=dropout_p, alibi_slopes=alibi_slopes,
                                  deterministic=deterministic, sm_margin=sm_margin)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, *, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                                    learnable_sink=None, return_attn_probs=False, out=None,
                                    dropout_p=0.0, alibi_slopes=None, deterministic=False,
                                    sm_margin=0):
    """flash_attn_varlen_func with k and v packed: kv (total_k, 2, heads_kv, head_dim)."""
    k, v = _unpack(kv, "kv", 2, 4, "(total_k, 2, heads_kv, head_dim)")
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  softmax_scale=softmax_scale, causal=causal,
                                  window_size=window_size, attention_chunk=attention_chunk,
                                  softcap=softcap, learnable_sink=learnable_sink,
                                  return_attn_probs=return_attn_probs, out=out,
                                  dropout_p=dropout_p, alibi_slopes=alibi_slopes,
                                  deterministic=deterministic, sm_margin=sm_margin)
