// One-time, per-device setup (the tile counters, the split-workspace pool) may happen on the first
// forward call, and that call may be under CUDA graph capture (an inference engine capturing its
// first decoding step). cudaMalloc and its kind are "potentially unsafe" during capture: in the
// global and thread-local capture modes they fail and invalidate the capture. The setup allocates
// memory that must outlive the graph, not be replayed by it, which is what the relaxed mode is for:
// this guard switches the calling thread to it for the setup's scope and restores the caller's mode.
#pragma once

#include <cuda_runtime_api.h>

namespace hopattn::sm90 {

class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureScope() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // the caller's mode while in scope
};

}  // namespace hopattn::sm90
