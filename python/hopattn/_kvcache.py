"""flash_attn_with_kvcache's extras that the core has no argument for, turned into ones it has.

- k, v: the new keys and values are written into the caller's cache in place, at positions
  cache_seqlens[b] + i; attention then runs over cache_seqlens + seqlen_new keys (seqused_k).
- rotary_cos, rotary_sin: the new keys are rotated before they are written, q into a copy.
- cache_batch_idx: a dense cache (batch_cache, seqlen_cache, ...) goes to the core as a paged one
  whose pages are its rows (or power-of-two pieces of them) through a page table built from the
  indices; where no such view exists without a copy, the rows are gathered into a temporary.
- cache_leftpad: the dense cache goes to the core as packed keys (batch * seqlen_cache, ...) with
  cu_seqlens_k starting sequence b at row b * seqlen_cache + cache_leftpad[b] (see _left_padded).

All of it runs as array operations of the caller's library (torch, NumPy, CuPy) on the caller's
device and stream. Index values on a GPU are trusted, as in flash-attention (reading them would
need a device sync); those of host arrays are checked before anything is written, so that a
rejected call leaves the cache as it was.
"""

import numbers
from types import SimpleNamespace

from ._arrays import check_int32_vector, common_library

_INT32_MAX = 2**31 - 1
# The sm_90a kernels take a paged cache whose page size is a power of two from this; those that copy
# K/V (bf16/fp16 at head dims up to _MAX_ANY_PAGE_HEAD_DIM) take any page size.
_MIN_GPU_PAGE = 16
_MAX_ANY_PAGE_HEAD_DIM = 128


class _TorchOps:
    """The few array operations used here, for torch tensors."""

    def __init__(self, like):
        import torch
        self.torch, self.device = torch, like.device
        self.host = like.device.type == "cpu"

    def index(self, x):
        return x.long()  # older torch versions index with int64 tensors only

    def arange(self, n):
        return self.torch.arange(n, device=self.device)

    def float32(self, x):
        return x.float()

    def cast(self, x, like):
        return x.to(like.dtype)

    def int32(self, x):
        return x.to(self.torch.int32)

    def concat(self, arrays):
        return self.torch.cat(arrays, dim=-1)

    def interleave(self, a, b):
        return self.torch.stack((a, b), dim=-1).flatten(-2)

    def contiguous(self, x):
        return x.contiguous()

    def swap_leading(self, x):
        return x.transpose(0, 1).contiguous()

    def view(self, x, shape):
        """x reshaped without a copy, or None where its strides do not allow that."""
        try:
            return x.view(shape)
        except RuntimeError:
            return None

    def writable(self, x):
        return True

    def same_device(self, x):
        return x.device == self.device

    def first_true(self, mask):
        return tuple(int(i[0]) for i in mask.nonzero(as_tuple=True))

    def minimum(self, x, bound):
        return x.clamp(max=bound)

    def write(self, cache, index, values):
        torch = self.torch
        # The cache is a buffer, not a differentiable input (flash-attention's append has no
        # gradient either): written outside autograd, which refuses in-place writes into leaves.
        with torch.no_grad():
            if cache.dtype == torch.float8_e4m3fn:  # index_put_ lacks float8 kernels on some builds
                cache, values = cache.view(torch.uint8), values.view(torch.uint8)
            cache[index] = values


class _NumPyLikeOps:
    """The same for NumPy and CuPy arrays (one API)."""

    device = None

    def __init__(self, xp, host):
        self.xp, self.host = xp, host

    def index(self, x):
        return x

    def arange(self, n):
        return self.xp.arange(n)

    def float32(self, x):
        return x.astype(self.xp.float32)

    def cast(self, x, like):
        return x.astype(like.dtype)

    def int32(self, x):
        return x.astype(self.xp.int32)

    def concat(self, arrays):
        return self.xp.concatenate(arrays, axis=-1)

    def interleave(self, a, b):
        return self.xp.stack((a, b), axis=-1).reshape(a.shape[:-1] + (2 * a.shape[-1],))

    def contiguous(self, x):
        return self.xp.ascontiguousarray(x)

    def swap_leading(self, x):
        return self.xp.ascontiguousarray(x.swapaxes(0, 1))

    def view(self, x, shape):
        # Only ever asked to merge the two leading axes (and maybe split the result): possible
        # without a copy exactly when axis 0 steps over whole runs of axis 1. reshape would copy.
        if x.shape[0] > 1 and x.shape[1] > 1 and x.strides[0] != x.shape[1] * x.strides[1]:
            return None
        return x.reshape(shape)

    def writable(self, x):
        flags = getattr(x, "flags", None)
        return flags is None or getattr(flags, "writeable", True)

    def same_device(self, x):
        return True  # NumPy: host only; CuPy: the core's checks name a foreign device

    def first_true(self, mask):
        return tuple(int(i[0]) for i in mask.nonzero())

    def minimum(self, x, bound):
        return self.xp.minimum(x, bound)

    def write(self, cache, index, values):
        cache[index] = values


def _ops(lib, q):
    if lib.name == "torch":
        return _TorchOps(q)
    if lib.name == "numpy":
        return _NumPyLikeOps(lib.np, host=True)
    return _NumPyLikeOps(lib.cupy, host=False)


def _shape(x):
    return tuple(int(n) for n in x.shape)


def _is_int(x):
    return not isinstance(x, bool) and isinstance(x, numbers.Integral)


def _check_combination(k, v, cache_seqlens, page_table, cache_batch_idx, cache_leftpad, rotary_cos,
                       rotary_sin, varlen_q, descaled):
    """flash-attention's rules on which arguments go together."""
    if (k is None) != (v is None):
        missing, given = ("v", "k") if v is None else ("k", "v")
        raise ValueError(f"{missing}: required with {given}; new keys and values are appended "
                         "together")
    if k is not None and varlen_q:
        raise ValueError("k, v: appending new keys is not supported with cu_seqlens_q (varlen q); "
                         "it takes dense q (batch, seqlen_q, heads_q, head_dim) with k and v "
                         "(batch, seqlen_new, heads_kv, head_dim)")
    if k is not None and cache_seqlens is None:
        raise ValueError("cache_seqlens: required with k and v: the new keys are written at "
                         "positions cache_seqlens[b], cache_seqlens[b] + 1, ...")
    if (rotary_cos is None) != (rotary_sin is None):
        missing, given = ("rotary_sin", "rotary_cos") if rotary_sin is None else \
            ("rotary_cos", "rotary_sin")
        raise ValueError(f"{missing}: required with {given}")
    if rotary_cos is not None and k is None:
        raise ValueError("rotary_cos, rotary_sin: rotary embedding is applied only when new keys "
                         "k and v are given (as in flash-attention)")
    if cache_batch_idx is not None and page_table is not None:
        raise ValueError("cache_batch_idx: cannot be combined with page_table (block_table); the "
                         "page table already says where each sequence's keys are")
    if cache_leftpad is not None and page_table is not None:
        raise NotImplementedError("cache_leftpad: not supported with a paged cache (page_table), "
                                  "as in flash-attention; it takes a dense cache")
    if cache_leftpad is not None and descaled:
        raise NotImplementedError("cache_leftpad: not implemented with FP8 descales "
                                  "(q/k/v_descale)")


def prepare(q, k_cache, v_cache, k, v, *, batch, cache_seqlens, page_table, cache_batch_idx,
            cache_leftpad, rotary_cos, rotary_sin, rotary_interleaved, causal, window,
            attention_chunk, cu_seqlens_q, max_seqlen_q, out, descaled):
    """Appends k, v to the cache (in place) and returns (arguments, finish): the core's arguments
    for the attention (q, k, v, out, seqused_k, page_table, cu_seqlens_q, max_seqlen_q,
    cu_seqlens_k, max_seqlen_k), and None or a function that turns the result of that call
    (out, lse) into the caller's. q's rank was checked; batch is the number of sequences."""
    _check_combination(k, v, cache_seqlens, page_table, cache_batch_idx, cache_leftpad, rotary_cos,
                       rotary_sin, cu_seqlens_q is not None, descaled)
    int_seqlens = _is_int(cache_seqlens)
    lib = common_library(dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v,
                              cache_seqlens=None if int_seqlens else cache_seqlens,
                              page_table=page_table, cache_batch_idx=cache_batch_idx,
                              cache_leftpad=cache_leftpad, rotary_cos=rotary_cos,
                              rotary_sin=rotary_sin))
    if lib.name == "jax":
        if k is not None:
            raise TypeError("k, v: appending writes the new keys into k_cache and v_cache in "
                            "place, which needs a mutable array library (torch, NumPy, CuPy); "
                            "JAX arrays are immutable: write the new keys into the cache yourself "
                            "(e.g. with .at[].set) and pass the grown cache_seqlens")
        raise NotImplementedError("cache_batch_idx, cache_leftpad: not implemented for JAX arrays "
                                  "(torch, NumPy and CuPy arrays take them)")
    a = SimpleNamespace(lib=lib, ops=_ops(lib, q), q=q, k_cache=k_cache, v_cache=v_cache, k=k,
                        v=v, batch=batch, cache_seqlens=cache_seqlens, int_seqlens=int_seqlens,
                        page_table=page_table, cache_batch_idx=cache_batch_idx,
                        cache_leftpad=cache_leftpad, rotary_cos=rotary_cos, rotary_sin=rotary_sin)
    with lib.device_scope(q):  # CuPy: the arrays made here land on q's device
        _check_shapes(a)
        _check_values(a)
        # flash-attention 3 rotates q at per-row positions for any local mask: causal, a window
        # or an attention_chunk (its is_local covers the chunk).
        local = causal or window[0] >= 0 or window[1] >= 0 or attention_chunk > 0
        seqused = _append(a, bool(rotary_interleaved), local)
        arguments = dict(q=a.q, k=k_cache, v=v_cache, out=out, seqused_k=seqused,
                         page_table=page_table, cu_seqlens_q=cu_seqlens_q,
                         max_seqlen_q=max_seqlen_q, cu_seqlens_k=None, max_seqlen_k=0)
        if cache_leftpad is not None:
            return _left_padded(a, arguments)
        if cache_batch_idx is not None:
            arguments.update(_indexed_rows(a, seqused))
        return arguments, None


def _check_index_array(a, name, x):
    check_int32_vector(x, name, a.batch, "batch")
    _check_device(a, name, x)


def _check_device(a, name, x):
    if not a.ops.same_device(x):
        raise ValueError(f"{name}: on {x.device}, but q is on {a.ops.device}; pass arrays of one "
                         "device")


def _check_shapes(a):
    """Shapes, dtypes and devices, all before the cache is written. Sets a.slots (cache rows or
    pages), a.rows (seqlen_cache or page_size), a.capacity (keys per sequence), a.seqlen_new."""
    paged = a.page_table is not None
    for name, cache in (("k_cache", a.k_cache), ("v_cache", a.v_cache)):
        if len(cache.shape) != 4:
            layout = "(num_pages, page_size, heads_kv, head_dim)" if paged \
                else "(batch_cache, seqlen_cache, heads_kv, head_dim)"
            raise ValueError(f"{name}: expected shape {layout}, got {_shape(cache)}")
    if _shape(a.v_cache)[:-1] != _shape(a.k_cache)[:-1]:
        raise ValueError(f"v_cache: shape {_shape(a.v_cache)} differs from k_cache's "
                         f"{_shape(a.k_cache)}; only their head dims may differ")
    a.slots, a.rows, heads_kv, head_dim = _shape(a.k_cache)
    head_dim_v = _shape(a.v_cache)[-1]
    heads_q, q_dim = int(a.q.shape[-2]), int(a.q.shape[-1])
    if q_dim != head_dim or heads_q % heads_kv:
        raise ValueError(f"q: heads_q {heads_q} and head_dim {q_dim} do not fit the cache's "
                         f"heads_kv {heads_kv} and head_dim {head_dim}; heads_q must be a multiple "
                         "of heads_kv and the head dims must match")
    if paged:
        if a.lib.dtype_name(a.page_table) != "int32":
            raise TypeError(f"page_table: expected an int32 array, got dtype "
                            f"{a.lib.dtype_name(a.page_table)}")
        if len(a.page_table.shape) != 2 or int(a.page_table.shape[0]) != a.batch:
            raise ValueError(f"page_table: expected shape (batch, pages_per_seq) with batch = "
                             f"{a.batch}, got {_shape(a.page_table)}")
        a.capacity = int(a.page_table.shape[1]) * a.rows
    else:
        a.capacity = a.rows
        if a.cache_batch_idx is None and a.slots != a.batch:
            raise ValueError(f"k_cache: batch_cache {a.slots} does not match q's batch {a.batch}; "
                             "without cache_batch_idx sequence b uses cache row b")
    a.seqlen_new = int(a.k.shape[1]) if a.k is not None and len(a.k.shape) == 4 else 0
    if a.k is not None:
        for name, new, cache, dim in (("k", a.k, a.k_cache, head_dim),
                                      ("v", a.v, a.v_cache, head_dim_v)):
            expected = (a.batch, a.seqlen_new, heads_kv, dim)
            if _shape(new) != expected:
                raise ValueError(f"{name}: expected shape (batch, seqlen_new, heads_kv, head_dim) "
                                 f"= {expected} ({name}_cache's head_dim), got {_shape(new)}")
            if a.lib.dtype_name(new) != a.lib.dtype_name(cache):
                raise ValueError(f"{name}: dtype {a.lib.dtype_name(new)} differs from "
                                 f"{name}_cache's {a.lib.dtype_name(cache)}; new rows are written "
                                 "into the cache as they are")
            _check_device(a, name, new)
            if not a.ops.writable(cache):
                raise ValueError(f"{name}_cache: read-only; new keys and values are written into "
                                 "the cache in place")
        if a.seqlen_new > a.capacity:
            raise ValueError(f"k: seqlen_new {a.seqlen_new} exceeds the cache's {a.capacity} keys "
                             "per sequence")
    for name in ("cache_seqlens", "cache_batch_idx", "cache_leftpad"):
        x = getattr(a, name)
        if x is not None and not (name == "cache_seqlens" and a.int_seqlens):
            _check_index_array(a, name, x)
    if a.cache_leftpad is not None and a.batch * a.rows > _INT32_MAX:
        raise ValueError(f"cache_leftpad: takes a cache of at most 2^31 - 1 keys in all (batch "
                         f"{a.batch} x seqlen_cache {a.rows} here)")
    if a.rotary_cos is not None:
        if a.lib.dtype_name(a.q).startswith("float8"):
            raise NotImplementedError("rotary_cos, rotary_sin: not implemented for FP8 inputs "
                                      "(rotating e4m3 codes would lose their scale); rotate before "
                                      "quantizing")
        shape = _shape(a.rotary_cos)
        if len(shape) != 2 or _shape(a.rotary_sin) != shape or not 1 <= 2 * shape[1] <= head_dim:
            raise ValueError(f"rotary_cos, rotary_sin: expected one shape (seqlen_ro, rotary_dim "
                             f"/ 2) with rotary_dim <= head_dim {head_dim}, got {shape} and "
                             f"{_shape(a.rotary_sin)}")
        if shape[0] < a.capacity:
            raise ValueError(f"rotary_cos: has {shape[0]} positions; it needs one per key the "
                             f"cache holds per sequence, {a.capacity} (as in flash-attention)")
        _check_device(a, "rotary_cos", a.rotary_cos)
        _check_device(a, "rotary_sin", a.rotary_sin)


def _first_outside(a, x, low, high):
    """(index, value) of the first entry of host array x outside [low, high] (high may be an array
    of x's shape), or None."""
    bad = (x < low) | (x > high)
    if not bool(bad.any()):
        return None
    b, = a.ops.first_true(bad)
    return b, int(x[b])


def _check_values(a):
    """Index values: a Python int always, host arrays here, GPU arrays trusted."""
    last = a.capacity - a.seqlen_new  # the last position a sequence may start its new keys at
    seqlens = a.cache_seqlens
    if a.int_seqlens and not 0 <= seqlens <= last:
        raise ValueError(f"cache_seqlens: {seqlens}; with seqlen_new {a.seqlen_new} it must be in "
                         f"[0, {last}] (the cache holds {a.capacity} keys per sequence)")
    if not a.ops.host:
        return
    if seqlens is not None and not a.int_seqlens:
        bad = _first_outside(a, seqlens, 0, last)
        if bad:
            raise ValueError(f"cache_seqlens: entry {bad[0]} is {bad[1]}; with seqlen_new "
                             f"{a.seqlen_new} it must be in [0, {last}] (the cache holds "
                             f"{a.capacity} keys per sequence)")
    if a.k is not None and a.page_table is not None:  # the append reads the table before the core
        bad = (a.page_table < 0) | (a.page_table >= a.slots)
        if bool(bad.any()):
            b, p = a.ops.first_true(bad)
            raise ValueError(f"page_table: entry ({b}, {p}) is {int(a.page_table[b, p])}; page "
                             f"indices must be in [0, {a.slots}), the pages of k_cache and v_cache")
    if a.cache_batch_idx is not None:
        bad = _first_outside(a, a.cache_batch_idx, 0, a.slots - 1)
        if bad:
            raise ValueError(f"cache_batch_idx: entry {bad[0]} is {bad[1]}; it must be in "
                             f"[0, {a.slots}), the rows of k_cache and v_cache")
    if a.cache_leftpad is not None:
        bad = _first_outside(a, a.cache_leftpad, 0, a.rows if seqlens is None else seqlens)
        if bad:
            limit = "seqlen_cache" if seqlens is None else "cache_seqlens[b]"
            raise ValueError(f"cache_leftpad: entry {bad[0]} is {bad[1]}; it must be in [0, "
                             f"{limit}]: the keys in use are [cache_leftpad, cache_seqlens)")


def _rotate(ops, x, cos, sin, positions, interleaved):
    """x (batch, seqlen, heads, d) with its first rotary_dim = 2 * cos.shape[1] features rotated by
    the angles at `positions` ((batch, seqlen), or (batch, 1) for one per sequence) in float32,
    rounded to x's dtype; the other features unchanged. A new array."""
    half = cos.shape[1]
    c = cos[positions][:, :, None, :]  # (batch, seqlen, 1, half): one angle for every head
    s = sin[positions][:, :, None, :]
    part = ops.float32(x[..., :2 * half])
    if interleaved:  # GPT-J: features (0, 1), (2, 3), ... are the pairs
        x1, x2 = part[..., 0::2], part[..., 1::2]
    else:  # GPT-NeoX: feature i pairs with i + half
        x1, x2 = part[..., :half], part[..., half:]
    r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c
    rotated = ops.interleave(r1, r2) if interleaved else ops.concat([r1, r2])
    return ops.concat([ops.cast(rotated, x), x[..., 2 * half:]])


def _rotary_rows(a, positions):
    """Query positions run to cache_seqlens + seqlen_q - 1, past the cache when seqlen_q exceeds
    seqlen_new: refused for host arrays where a row of rotary_cos is missing; on a GPU, whose
    values are not read here, clamped to its last row rather than read out of bounds."""
    seqlen_ro = int(a.rotary_cos.shape[0])
    if not a.ops.host:
        return a.ops.minimum(positions, seqlen_ro - 1)
    if int(positions.max()) >= seqlen_ro:
        raise ValueError(f"rotary_cos: has {seqlen_ro} positions, but query positions reach "
                         f"{int(positions.max())} (cache_seqlens + seqlen_q - 1 with a causal "
                         "mask, a window or an attention_chunk)")
    return positions


def _append(a, interleaved, local):
    """Rotates (a.q to a copy) and writes the new keys; returns the keys in use per sequence
    (int32 array, or None for the whole cache)."""
    ops, seqlens = a.ops, a.cache_seqlens
    if a.int_seqlens:
        seqlens = a.lib.int32_full(a.q, (a.batch,), int(seqlens))
    if a.k is None:
        return seqlens
    starts = ops.index(seqlens)[:, None]  # (batch, 1)
    positions = starts + ops.arange(a.seqlen_new)[None, :]
    k = a.k
    if a.rotary_cos is not None:
        cos, sin = ops.float32(a.rotary_cos), ops.float32(a.rotary_sin)
        k = _rotate(ops, k, cos, sin, positions, interleaved)
        # flash-attention's rule: with a causal mask, a window or an attention_chunk (`local`)
        # query i sits at cache_seqlens + i (where the new keys are), otherwise every query at
        # cache_seqlens.
        q_positions = starts + ops.arange(int(a.q.shape[1]))[None, :] if local else starts
        a.q = _rotate(ops, a.q, cos, sin, _rotary_rows(a, q_positions), interleaved)
    if a.page_table is not None:
        pages = ops.index(a.page_table)[ops.arange(a.batch)[:, None], positions // a.rows]
        where = (pages, positions % a.rows)
    else:
        cache_rows = ops.arange(a.batch) if a.cache_batch_idx is None \
            else ops.index(a.cache_batch_idx)
        where = (cache_rows[:, None], positions)
    ops.write(a.k_cache, where, k)
    ops.write(a.v_cache, where, a.v)
    return ops.int32(seqlens + a.seqlen_new)  # a new array: the caller's cache_seqlens stays


def _gathered(a, cache):
    # Fancy indexing copies: (batch, seqlen_cache, heads_kv, head_dim), sequence b's row b.
    return cache[a.ops.index(a.cache_batch_idx)]


def _indexed_rows(a, seqused):
    """A dense cache read through cache_batch_idx: as a paged cache whose pages are the cache rows,
    or power-of-two pieces of them, without a copy, where the GPU's paged kernels take such pages
    (any page size where they copy K/V: bf16/fp16, head dims up to 128); else the rows gathered
    into a temporary dense cache."""
    ops = a.ops
    if seqused is None:
        seqused = a.lib.int32_full(a.q, (a.batch,), a.rows)
    page = a.rows & -a.rows  # the largest power of two dividing seqlen_cache
    if page < _MIN_GPU_PAGE:
        page = a.rows if _takes_any_page_size(a) else 0
    if page:
        per_row = a.rows // page
        k_pages, v_pages = (ops.view(cache, (a.slots * per_row, page) + _shape(cache)[2:])
                            for cache in (a.k_cache, a.v_cache))
        if k_pages is not None and v_pages is not None:
            first = ops.index(a.cache_batch_idx)[:, None] * per_row
            table = ops.int32(first + ops.arange(per_row)[None, :])  # (batch, per_row)
            return dict(k=k_pages, v=v_pages, page_table=table, seqused_k=seqused)
    return dict(k=_gathered(a, a.k_cache), v=_gathered(a, a.v_cache), seqused_k=seqused)


def _takes_any_page_size(a):
    """Whether every kernel that may run this call takes a page of any size: bf16/fp16 caches of
    head dims up to _MAX_ANY_PAGE_HEAD_DIM (the kernels that copy K/V)."""
    return (a.lib.dtype_name(a.k_cache) in ("bfloat16", "float16")
            and max(_shape(a.k_cache)[-1], _shape(a.v_cache)[-1]) <= _MAX_ANY_PAGE_HEAD_DIM)


def _packed(ops, x, shape):
    view = ops.view(x, shape)
    return view if view is not None else ops.view(ops.contiguous(x), shape)


def _left_padded(a, arguments):
    """A dense cache whose sequence b starts at row cache_leftpad[b]. Its rows go to the core as
    packed keys (batch * seqlen_cache, heads_kv, head_dim) with sequence b from row
    b * seqlen_cache + cache_leftpad[b] and seqused_k counting the keys from there, so that causal
    masks and windows align to the keys in use and attention_chunk's chunks start at
    cache_leftpad[b], as in flash-attention (rotary positions stay the cache's own). cu_seqlens_k
    must start at 0, and cache_leftpad[0] of a GPU array is not known here: an empty sequence goes
    first (no query, no key in use), which takes varlen q (dense q is viewed as packed rows, and
    the result viewed back by the returned finish)."""
    ops, batch, rows, q = a.ops, a.batch, a.rows, a.q
    k_cache, v_cache = arguments["k"], arguments["v"]
    if a.cache_batch_idx is not None:  # the rows in sequence order first
        k_cache, v_cache = _gathered(a, k_cache), _gathered(a, v_cache)

    def packed(cache):  # v's head dim may differ from k's
        return _packed(ops, cache, (batch * rows,) + _shape(cache)[2:])

    leftpad = ops.index(a.cache_leftpad)
    zero = a.lib.int32_full(q, (1,), 0)
    starts = ops.int32(ops.arange(batch) * rows + leftpad)
    end = rows if arguments["seqused_k"] is None else ops.index(arguments["seqused_k"])
    arguments.update(
        k=packed(k_cache), v=packed(v_cache),
        cu_seqlens_k=ops.concat([zero, starts, a.lib.int32_full(q, (1,), batch * rows)]),
        seqused_k=ops.concat([zero, ops.int32(end - leftpad)]),
        # A packed sequence runs to the next one's start: up to 2 * seqlen_cache keys.
        max_seqlen_k=rows * min(batch, 2))
    if arguments["cu_seqlens_q"] is not None:
        arguments["cu_seqlens_q"] = ops.concat([zero, arguments["cu_seqlens_q"]])
        return arguments, None
    seqlen_q = int(q.shape[1])
    rows_q = (batch * seqlen_q,) + _shape(q)[2:]
    user_out = arguments["out"]
    rows_out = (batch * seqlen_q,) + _shape(user_out)[2:] if user_out is not None else None
    core_out = None if user_out is None else ops.view(user_out, rows_out)
    arguments.update(q=_packed(ops, q, rows_q), out=core_out, max_seqlen_q=max(seqlen_q, 1),
                     cu_seqlens_q=ops.concat([zero, ops.int32(ops.arange(batch + 1) * seqlen_q)]))

    def finish(out, lse):
        out = out.reshape((batch, seqlen_q) + _shape(out)[1:])
        if user_out is not None:
            if core_out is None:  # rows not back to back: the core wrote a temporary
                user_out[...] = out
            out = user_out
        if lse is not None:  # (heads_q, batch * seqlen_q) -> (batch, heads_q, seqlen_q)
            lse = ops.swap_leading(lse.reshape((lse.shape[0], batch, seqlen_q)))
        return out, lse

    return arguments, finish
