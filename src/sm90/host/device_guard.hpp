// Makes a CUDA device current for a scope and puts the caller's current device back at its end, so
// that library calls on one GPU's tensors leave the caller's device selection as it was.
#pragma once

#include <cuda_runtime_api.h>

namespace hopattn::sm90 {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      previous_ = -1;
      return;
    }
    selected_ = previous_ == device || cudaSetDevice(device) == cudaSuccess;
  }
  ~DeviceGuard() {
    int current = 0;
    if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // Whether the device asked for is current now.
  bool selected() const { return selected_; }

 private:
  int previous_ = -1;
  bool selected_ = false;
};

}  // namespace hopattn::sm90
