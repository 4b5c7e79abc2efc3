"""FlashMLA's decoding interface (deepseek-ai/FlashMLA: flash_mla_with_kvcache, get_mla_metadata), so
that an inference engine written against it runs on hopattn by changing the import.

FlashMLA keeps DeepSeek's MLA cache as one array of head_dim = head_dim_v + rope columns per key:
the latent part (head_dim_v, 512 in DeepSeek V2/V3), which serves as both key and value, then the
rotary part (64); q has the same columns. The scores are q . k over all head_dim columns. That is
hopattn's qv attention (flash-attention 3's) with q's and the cache's columns split into views, no
copy: q[..., head_dim_v:] as q, q[..., :head_dim_v] as qv, k_cache[..., head_dim_v:] as k and
k_cache[..., :head_dim_v] as v. On CUDA arrays this runs the sm_90a MLA kernel (head_dim 576 with
head_dim_v 512, bf16/fp16); host arrays run the CPU reference backend at any head dims.
"""

from .interface import _is_int, _reject, flash_attn_with_kvcache


class MlaSchedule:
    """What get_mla_metadata returns and flash_mla_with_kvcache takes as tile_scheduler_metadata:
    hopattn plans its schedule at launch, so there is nothing in it."""

    def __repr__(self):
        return "hopattn.flash_mla.MlaSchedule()"


def get_mla_metadata(*args, **kwargs):
    """FlashMLA's get_mla_metadata, for either of its signatures (the older one took
    cache_seqlens, num_heads_per_head_k and num_heads_k; the newer one takes none): returns
    (MlaSchedule(), None), the tile_scheduler_metadata and num_splits that flash_mla_with_kvcache
    takes. The arguments are not read."""
    return MlaSchedule(), None


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                           tile_scheduler_metadata=None, num_splits=None, softmax_scale=None,
                           causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None):
    """Dense MLA decoding with FlashMLA's arguments and results.

    q: (batch, seqlen_q, heads_q, head_dim), the latent columns first. k_cache: paged
    (num_blocks, page_block_size, heads_k, head_dim) with block_table int32
    (batch, max_blocks_per_seq), or, with block_table None, dense (batch, seqlen_k, heads_k,
    head_dim). cache_seqlens: int32 (batch,), the keys in use (None: the whole cache). head_dim_v:
    an int from 1 to head_dim - 1, the latent columns, which are also v. softmax_scale: default
    1 / sqrt(head_dim). causal: bottom-right aligned, for several query rows a step (MTP).
    tile_scheduler_metadata and num_splits (get_mla_metadata's, or FlashMLA's own) are taken and
    not read: hopattn plans at launch.

    Returns (out, softmax_lse): out (batch, seqlen_q, heads_q, head_dim_v) of q's dtype,
    softmax_lse float32 (batch, heads_q, seqlen_q), natural log; a row that sees no key gives out 0
    and lse -inf. FlashMLA's FP8 caches, sparse attention (indices, topk_length), attn_sink and
    extra caches raise NotImplementedError.

    On CUDA arrays: the sm_90a MLA kernel takes head_dim 576 with head_dim_v 512 (DeepSeek V2/V3),
    bfloat16 / float16, pages of a power of two from 16 keys (FlashMLA's 64 among them); other
    calls raise NotImplementedError naming what is taken.
    """
    _reject("is_fp8_kvcache", is_fp8_kvcache, False)  # FP8 MLA caches
    for name, value in (("indices", indices), ("topk_length", topk_length),  # sparse attention
                        ("attn_sink", attn_sink), ("extra_k_cache", extra_k_cache),
                        ("extra_indices_in_kvcache", extra_indices_in_kvcache),
                        ("extra_topk_length", extra_topk_length)):
        _reject(name, value)
    for name, array in (("q", q), ("k_cache", k_cache)):
        if len(array.shape) != 4:
            raise ValueError(f"{name}: rank {len(array.shape)} is not allowed; it must be 4-D "
                             "(q: batch, seqlen_q, heads_q, head_dim; k_cache: num_blocks, "
                             "page_block_size, heads_k, head_dim)")
    head_dim = int(q.shape[-1])
    if int(k_cache.shape[-1]) != head_dim:
        raise ValueError(f"k_cache: head dim {int(k_cache.shape[-1])} is not q's {head_dim}; "
                         "q and k_cache hold the same latent and rotary columns")
    if not _is_int(head_dim_v) or isinstance(head_dim_v, bool):
        raise TypeError(f"head_dim_v: {head_dim_v!r} is not an int")
    if not 0 < head_dim_v < head_dim:
        raise ValueError(f"head_dim_v: {head_dim_v} is not allowed; it must be from 1 to "
                         f"head_dim - 1 = {head_dim - 1} (the latent columns, before the rotary "
                         "ones)")
    head_dim_v = int(head_dim_v)
    if softmax_scale is None:
        softmax_scale = head_dim ** -0.5
    return flash_attn_with_kvcache(
        q[..., head_dim_v:], k_cache[..., head_dim_v:], k_cache[..., :head_dim_v],
        qv=q[..., :head_dim_v], cache_seqlens=cache_seqlens, page_table=block_table,
        softmax_scale=softmax_scale, causal=causal, return_softmax_lse=True)
