"""Array-library adapters: which library an argument belongs to, how to allocate outputs with that
library, and which CUDA stream the caller is on. No array library is imported before the caller has
handed us one of its arrays, so `import hopattn` needs none of them."""

import contextlib

# Element types that DLPack producers may be unable to export; they travel as raw bits of this width
# and _C reinterprets them (its raw_bits flag).
_RAW_BITS = {"bfloat16": "uint16", "float8_e4m3fn": "uint8"}


class _Library:
    """What the core needs from an array library. The defaults suit a host-only library."""

    name = ""

    def dtype_name(self, x):
        return x.dtype.name

    def operand(self, x):
        """(object _C imports through DLPack, whether it carries raw bits)."""
        raw = _RAW_BITS.get(self.dtype_name(x))
        return (x, False) if raw is None else (x.view(raw), True)

    def stream(self, x):
        return 0

    def synchronize(self, x):
        """True when the library exposes no CUDA stream for x: _C then waits for its own work."""
        return False

    def device_scope(self, x):
        return contextlib.nullcontext()


class _Torch(_Library):
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch

    def dtype_name(self, x):
        return str(x.dtype).replace("torch.", "")

    def operand(self, x):
        x = x.detach()
        if x.dtype == self.torch.float8_e4m3fn:  # DLPack export of float8 is not universal yet
            return x.view(self.torch.uint8), True
        return x, False

    def empty(self, like, shape, dtype_name):
        return self.torch.empty(shape, dtype=getattr(self.torch, dtype_name), device=like.device)

    def int32_full(self, like, shape, value):
        return self.torch.full(shape, value, dtype=self.torch.int32, device=like.device)

    def stream(self, x):
        return self.torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0

    def device_scope(self, x):
        return self.torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


class _NumPy(_Library):
    name = "numpy"

    def __init__(self):
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


class _CuPy(_Library):
    name = "cupy"

    def __init__(self):
        import cupy
        self.cupy = cupy

    def empty(self, like, shape, dtype_name):
        with like.device:
            return self.cupy.empty(shape, dtype=dtype_name)

    def int32_full(self, like, shape, value):
        with like.device:
            return self.cupy.full(shape, value, dtype=self.cupy.int32)

    def stream(self, x):
        with x.device:
            return self.cupy.cuda.get_current_stream().ptr

    def device_scope(self, x):
        return x.device


class _Jax(_Library):
    """JAX arrays are immutable and JAX exposes no stream: outputs are fresh buffers that only this
    call writes, inputs are waited for before the call, and _C synchronizes after it. Works on
    concrete arrays (eager mode), not inside jax.jit."""

    name = "jax"

    def __init__(self):
        import jax
        import jax.numpy as jnp
        self.jax, self.jnp = jax, jnp

    def operand(self, x):
        x.block_until_ready()
        return x, False  # JAX exports bfloat16 and float8 through DLPack itself

    def synchronize(self, x):
        return self._device(x).platform != "cpu"

    def _device(self, like):
        return next(iter(like.devices()))

    def empty(self, like, shape, dtype_name):
        return self.jnp.zeros(shape, dtype=dtype_name, device=self._device(like)).block_until_ready()

    def int32_full(self, like, shape, value):
        return self.jnp.full(shape, value, dtype=self.jnp.int32, device=self._device(like))


_FACTORIES = {"torch": _Torch, "numpy": _NumPy, "cupy": _CuPy, "jax": _Jax, "jaxlib": _Jax}
_instances = {}


def library_of(x, name):
    """The adapter for array `x` (argument `name`), or TypeError when `x` is no supported array."""
    root = type(x).__module__.split(".")[0]
    factory = _FACTORIES.get(root)
    if factory is None:
        raise TypeError(f"{name}: expected a torch.Tensor, jax.Array, cupy.ndarray or numpy.ndarray, "
                        f"got {type(x).__module__}.{type(x).__qualname__}")
    if factory not in _instances:
        _instances[factory] = factory()
    return _instances[factory]


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
