// Host helpers every kernel launch shares: tensors as TMA views, CUDA errors as Status, device
// attributes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "hopattn/hopattn.hpp"
#include "sm90/host/tensor_map.hpp"

namespace hopattn::sm90 {

inline BshdView bshd_view(const Tensor& t, CUtensorMapDataType dtype) {
  // Dense layout (batch, rows, heads, dim), or a packed variable-length one (total rows, heads, dim) as
  // a single batch entry (sequence.cuh addresses its sequences by row).
  if (t.rank == 3) {
    return BshdView{t.data, dtype, 2, 1, t.shape[0], t.shape[1], t.shape[2],
                    t.shape[0] * t.stride[0], t.stride[0], t.stride[1]};
  }
  return BshdView{t.data, dtype, 2, t.shape[0], t.shape[1], t.shape[2], t.shape[3],
                  t.stride[0], t.stride[1], t.stride[2]};
}

// A dense (batch, rows, heads, dim) or packed variable-length (total rows, heads, dim) e4m3 tensor as
// raw bytes for TMA (bshd_view's layouts): a 128-element box is one 128-byte swizzled row.
inline BshdView fp8_byte_view(const Tensor& t) {
  BshdView view = bshd_view(t, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  view.element_bytes = 1;
  return view;
}

// The tensor-map element type of a bf16 or fp16 tensor.
inline CUtensorMapDataType sixteen_bit_map_type(Dtype dtype) {
  return dtype == Dtype::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// Whether TMA can address the view: base and every stride 16-byte aligned (cuTensorMapEncodeTiled's
// rule). q, k and v must be; out may have any 4-byte-aligned strides, and gets register stores if not.
inline bool tma_addressable(const BshdView& v) {
  const auto aligned = [](std::int64_t bytes) { return bytes % 16 == 0; };
  return reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0 && aligned(v.row_stride * v.element_bytes) &&
         aligned(v.head_stride * v.element_bytes) && aligned(v.batch_stride * v.element_bytes);
}

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

inline int device_attribute(cudaDeviceAttr attr, int device, int fallback) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) return fallback;
  return value;
}

// Launches `kernel` (128-thread CTAs) on `stream` as a programmatic dependent of the kernel queued
// before it (programmatic stream serialization): it may start once every CTA of that kernel has run
// griddepcontrol.launch_dependents or exited, and must griddepcontrol.wait before reading its
// results. The split combine kernels use it to start as the forward kernel's CTAs exit. `what` names
// the kernel in the error.
template <class Kernel, class Params>
Status launch_dependent_kernel(Kernel kernel, dim3 grid, cudaStream_t stream, const Params& params, const char* what) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(128);
  config.stream = stream;
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &overlap;
  config.numAttrs = 1;
  return cuda_status(cudaLaunchKernelEx(&config, kernel, params), what);
}

}  // namespace hopattn::sm90
