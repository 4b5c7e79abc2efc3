"""hopattn: FlashAttention-3-class attention for NVIDIA Hopper, with a CPU reference backend.

Arrays of any DLPack library (torch, JAX, CuPy, NumPy) go in without copies; outputs come back as
arrays of the same library, on the same device, computed on the caller's current CUDA stream.
Host arrays run on the CPU reference backend (float64 accumulation).

Errors: TypeError when an argument is not an array or has an element type hopattn never takes
(float64, int64, ...); ValueError for everything the library's validation rejects (shapes, strides,
devices, dtype combinations such as q float16 with k bfloat16, bad lengths); NotImplementedError
for well-formed requests this build or device does not implement (dropout, ALiBi, a feature the GPU
kernels lack); RuntimeError when no usable GPU is present or CUDA reports an error. Messages name
the argument and what is allowed.
"""

from ._C import device_description, hopper_available
from ._core import quantize_fp8
from .flash_mla import flash_mla_with_kvcache, get_mla_metadata
from .interface import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                        flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                        flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache,
                        get_scheduler_metadata)

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache", "get_scheduler_metadata",
           "flash_mla_with_kvcache", "get_mla_metadata", "quantize_fp8", "hopper_available",
           "device_description"]
__version__ = "0.1.0"

import sys as _sys

if "torch" in _sys.modules:  # register torch.ops.hopattn now; never import torch ourselves
    from . import torch as _torch_ops  # noqa: F401
