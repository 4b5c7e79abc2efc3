"""Array-library adapters: which library an argument belongs to, how to allocate outputs with that
library, and which CUDA stream the caller is on. No array library is imported before the caller has
handed us one of its arrays, so `import hopattn` needs none of them.

These run on every call, so what is constant per type (the adapter of an array type, the name of a
dtype) is looked up once and cached. _C makes the arrays' GPU current for the call itself."""

import contextlib

_NO_SCOPE = contextlib.nullcontext()  # reusable; saves building one per call
# Element types that DLPack producers may be unable to export; they travel as raw bits of this width
# and _C reinterprets them (its raw_bits flag).
_RAW_BITS = {"bfloat16": "uint16", "float8_e4m3fn": "uint8"}


class _Library:
    """What the core needs from an array library. The defaults suit a host-only library."""

    name = ""

    def __init__(self):
        self._dtype_names = {}

    def dtype_name(self, x):
        # Cached per dtype: NumPy's dtype.name alone costs about 2 us.
        dtype = x.dtype
        name = self._dtype_names.get(dtype)
        if name is None:
            name = self._dtype_names[dtype] = self._name_of(dtype)
        return name

    def _name_of(self, dtype):
        return dtype.name

    def operand(self, x):
        """(object _C imports through DLPack, whether it carries raw bits)."""
        raw = _RAW_BITS.get(self.dtype_name(x))
        return (x, False) if raw is None else (x.view(raw), True)

    def stream(self, x):
        return 0

    def on_host(self, x):
        """Whether x lives in host memory (what the CPU reference backend runs on)."""
        return True

    def synchronize(self, x):
        """True when the library exposes no CUDA stream for x: _C then waits for its own work."""
        return False

    def device_scope(self, x):
        """Context for exporting x and calling _C (whose call makes x's GPU current by itself)."""
        return _NO_SCOPE

    def empty_keys_contiguous(self, like, shape, dtype_name):
        """An uninitialized (batch, seqlen, heads, d) array whose dimension 1 is contiguous: a
        (batch, heads, d, seqlen padded to a multiple of 16) buffer viewed with its axes moved, so
        that every other stride is a multiple of 16 bytes at one byte per element (TMA)."""
        batch, seqlen, heads, d = shape
        buffer = self.empty(like, (batch, heads, d, -(-seqlen // 16) * 16), dtype_name)
        return self._moved_axes(buffer[..., :seqlen])

    def _moved_axes(self, x):
        return x.transpose(0, 3, 1, 2)


class _Torch(_Library):
    name = "torch"

    def __init__(self):
        super().__init__()
        import torch
        from torch.utils.dlpack import to_dlpack
        self.torch = torch
        # Tensor.__dlpack__ is Python code with device and stream checks (on CUDA tensors, tens of
        # microseconds each, and a wait of the default stream on ours when they differ); to_dlpack
        # is one C call. _C runs on the stream it is given, so no synchronization is needed.
        self._to_dlpack = to_dlpack
        self._float8 = torch.float8_e4m3fn
        # The current stream's handle without building a torch.cuda.Stream (what inductor calls).
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    def _name_of(self, dtype):
        return str(dtype).replace("torch.", "")

    def operand(self, x):
        raw = x.dtype is self._float8  # DLPack export of float8 is not universal yet
        if raw:
            x = x.view(self.torch.uint8)
        try:
            return self._to_dlpack(x), raw  # exports the data only: no need to detach first
        except Exception:  # e.g. a sparse tensor: _C's own import rejects it, naming the argument
            return x.detach(), raw

    def empty(self, like, shape, dtype_name):
        return self.torch.empty(shape, dtype=getattr(self.torch, dtype_name), device=like.device)

    def _moved_axes(self, x):
        return x.permute(0, 3, 1, 2)

    def int32_full(self, like, shape, value):
        return self.torch.full(shape, value, dtype=self.torch.int32, device=like.device)

    def full(self, like, shape, dtype_name, value):
        dtype = getattr(self.torch, dtype_name)
        return self.torch.full(shape, value, dtype=dtype, device=like.device)

    def on_host(self, x):
        return not x.is_cuda

    def stream(self, x):
        if not x.is_cuda:
            return 0
        if self._raw_stream is not None:
            return self._raw_stream(x.get_device())
        return self.torch.cuda.current_stream(x.device).cuda_stream


class _NumPy(_Library):
    name = "numpy"

    def __init__(self):
        super().__init__()
        import numpy
        self.np = numpy

    def _dtype(self, dtype_name):
        if dtype_name in _RAW_BITS:  # NumPy knows these only through ml_dtypes
            import ml_dtypes
            return getattr(ml_dtypes, dtype_name)
        return self.np.dtype(dtype_name)

    def empty(self, like, shape, dtype_name):
        return self.np.empty(shape, dtype=self._dtype(dtype_name))

    def int32_full(self, like, shape, value):
        return self.np.full(shape, value, dtype=self.np.int32)

    def full(self, like, shape, dtype_name, value):
        return self.np.full(shape, value, dtype=self._dtype(dtype_name))


class _CuPy(_Library):
    name = "cupy"

    def __init__(self):
        super().__init__()
        import cupy
        self.cupy = cupy

    def empty(self, like, shape, dtype_name):
        with like.device:
            return self.cupy.empty(shape, dtype=dtype_name)

    def int32_full(self, like, shape, value):
        with like.device:
            return self.cupy.full(shape, value, dtype=self.cupy.int32)

    def full(self, like, shape, dtype_name, value):
        with like.device:
            return self.cupy.full(shape, value, dtype=dtype_name)

    def on_host(self, x):
        return False

    def stream(self, x):
        with x.device:
            return self.cupy.cuda.get_current_stream().ptr

    def device_scope(self, x):
        return x.device  # CuPy's __dlpack__ waits on the current device's stream


class _Jax(_Library):
    """JAX arrays are immutable and JAX exposes no stream: outputs are fresh buffers that only this
    call writes, inputs are waited for before the call, and _C synchronizes after it. Works on
    concrete arrays (eager mode), not inside jax.jit."""

    name = "jax"

    def __init__(self):
        super().__init__()
        import jax
        import jax.numpy as jnp
        self.jax, self.jnp = jax, jnp

    def operand(self, x):
        x.block_until_ready()
        return x, False  # JAX exports bfloat16 and float8 through DLPack itself

    def on_host(self, x):
        return self._device(x).platform == "cpu"

    def synchronize(self, x):
        return self._device(x).platform != "cpu"

    def _device(self, like):
        return next(iter(like.devices()))

    def empty(self, like, shape, dtype_name):
        return self.jnp.zeros(shape, dtype=dtype_name, device=self._device(like)).block_until_ready()

    def int32_full(self, like, shape, value):
        return self.jnp.full(shape, value, dtype=self.jnp.int32, device=self._device(like))

    def full(self, like, shape, dtype_name, value):
        array = self.jnp.full(shape, value, dtype=dtype_name, device=self._device(like))
        return array.block_until_ready()

    def empty_keys_contiguous(self, like, shape, dtype_name):
        raise NotImplementedError("v_keys_contiguous: JAX arrays are always stored row-major, so no "
                                  "JAX array has its keys contiguous; use v_keys_contiguous=False")


_FACTORIES = {"torch": _Torch, "numpy": _NumPy, "cupy": _CuPy, "jax": _Jax, "jaxlib": _Jax}
_instances = {}
_by_type = {}  # array type -> adapter, filled on first sight of each type


def library_of(x, name):
    """The adapter for array `x` (argument `name`), or TypeError when `x` is no supported array."""
    library = _by_type.get(type(x))
    if library is None:
        root = type(x).__module__.split(".")[0]
        factory = _FACTORIES.get(root)
        if factory is None:
            raise TypeError(f"{name}: expected a torch.Tensor, jax.Array, cupy.ndarray or "
                            f"numpy.ndarray, got {type(x).__module__}.{type(x).__qualname__}")
        if factory not in _instances:
            _instances[factory] = factory()
        library = _by_type[type(x)] = _instances[factory]
    return library


def check_int32_vector(x, name, length, entries):
    """Array `x` (argument `name`) as an int32 array of shape (length,), else TypeError or
    ValueError naming it; `entries` says what the length counts ("batch", "batch + 1")."""
    dtype = library_of(x, name).dtype_name(x)
    if dtype != "int32":
        raise TypeError(f"{name}: expected an int32 array, got dtype {dtype}")
    shape = tuple(int(n) for n in x.shape)
    if shape != (length,):
        raise ValueError(f"{name}: expected shape ({entries},) = ({length},), got {shape}")


def common_library(named_arrays):
    """The one library that all given arrays (name -> array, None skipped) belong to."""
    library, first = None, None
    for name, x in named_arrays.items():
        if x is None:
            continue
        lib = library_of(x, name)
        if library is None:
            library, first = lib, name
        elif lib is not library:
            raise TypeError(f"{name} is a {lib.name} array but {first} is a {library.name} array; "
                            "pass arrays of one library")
    return library
