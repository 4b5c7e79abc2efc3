// Host helpers every kernel launch shares: tensors as TMA views, CUDA errors as Status, device
// attributes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
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

// Launches `kernel` on `stream`; with `programmatic`, as a programmatic dependent of the kernel queued
// before it (programmatic stream serialization): it may start once every CTA of that kernel has run
// griddepcontrol.launch_dependents or exited, so that its launch and prologue overlap that kernel's
// last CTAs (0.8-0.9 us of a kernel boundary's 1.8 on an H100: bench/probes/launch_floor.cu). Such a kernel
// must run griddepcontrol.wait (wait_for_primary_grid) before it reads or writes global memory the
// kernels before it may use, and launch_dependents only after that wait: the split combine kernels
// read the sequence arrays before their own wait. `what` names the kernel in the error.
template <class Kernel, class... Args>
Status launch_kernel(Kernel kernel, dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
                     bool programmatic, const char* what, const Args&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &overlap;
  config.numAttrs = programmatic ? 1 : 0;
  return cuda_status(cudaLaunchKernelEx(&config, kernel, args...), what);
}

// The split combine kernels (128-thread CTAs, no dynamic shared memory): programmatic dependents of
// the forward kernel, so their CTAs are dispatched as the forward CTAs exit.
template <class Kernel, class Params>
Status launch_dependent_kernel(Kernel kernel, dim3 grid, cudaStream_t stream, const Params& params, const char* what) {
  return launch_kernel(kernel, grid, dim3(128), 0, stream, /*programmatic=*/true, what, params);
}

}  // namespace hopattn::sm90
