#include "api/device.hpp"

#include <cuda_runtime_api.h>

#include <string>

namespace hopattn {
namespace detail {

Status require_hopper(int device_index) {
#ifndef HOPATTN_WITH_SM90
  (void)device_index;
  return Status(StatusCode::kUnsupported,
                "this build of hopattn has no sm_90a kernels (configured with HOPATTN_SM90=OFF); "
                "use host tensors for the CPU reference backend");
#else
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return Status(StatusCode::kNoDevice, "no CUDA device is present; CUDA tensors need a Hopper GPU (sm_90)");
  }
  if (device_index < 0 || device_index >= count) {
    return Status(StatusCode::kInvalidArgument, "device_index " + std::to_string(device_index) +
                                                    " is out of range: " + std::to_string(count) +
                                                    " CUDA device(s) present");
  }
  // Two attribute queries, not cudaGetDeviceProperties: this runs on every forward() call, and the
  // full property query costs far more host time than a small kernel takes on the GPU.
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_index) != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kCudaError, "reading the compute capability of device " + std::to_string(device_index));
  }
  if (major != 9 || minor != 0) {
    cudaDeviceProp prop;
    const std::string name = cudaGetDeviceProperties(&prop, device_index) == cudaSuccess ? prop.name : "?";
    return Status(StatusCode::kUnsupported, "GPU '" + name + "' has compute capability " + std::to_string(major) +
                                                "." + std::to_string(minor) +
                                                "; hopattn's kernels need a Hopper GPU (compute capability 9.0)");
  }
  return Status::Ok();
#endif
}

}  // namespace detail

bool hopper_available() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return detail::require_hopper(device).ok();
}

std::string device_description() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return "no CUDA device present";
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "CUDA device properties unavailable";
  Status hopper = detail::require_hopper(device);
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(prop.multiProcessorCount) + " SMs)" + (hopper.ok() ? "" : ": " + hopper.message());
}

}  // namespace hopattn
