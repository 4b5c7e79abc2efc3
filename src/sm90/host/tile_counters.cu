#include "sm90/host/tile_counters.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "sm90/host/capture_safe.hpp"

namespace hopattn::sm90 {
namespace {

struct CounterPool {
  int* slots = nullptr;
  std::atomic<unsigned> next_slot{0};

  // Runs at process exit (static destruction). The pool map is first built after the caller has
  // asked the CUDA runtime for the device, so after the runtime registered its own teardown: it is
  // destroyed first. Were the runtime gone, cudaFree would only report that. Freeing here keeps
  // compute-sanitizer's leak check (scripts/device_tests.sh) meaningful for everything else.
  ~CounterPool() {
    if (slots != nullptr) cudaFree(slots);
  }
};

// Pools live as long as the process.
std::map<int, CounterPool>& pools() {
  static std::map<int, CounterPool> by_device;
  return by_device;
}

// Zeroes device memory on a private stream: a plain cudaMemset runs on the legacy stream, which a
// capture on a blocking stream would take in (and fail).
cudaError_t zero_outside_any_capture(void* memory, std::size_t bytes) {
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return e;
  e = cudaMemsetAsync(memory, 0, bytes, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  return e;
}

}  // namespace

Status acquire_tile_counter(int device, int** counter) {
  static std::mutex mutex;
  CounterPool* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    pool = &pools()[device];
    if (pool->slots == nullptr) {
      const RelaxedCaptureScope relaxed;  // this may be the first call, under graph capture
      void* memory = nullptr;
      const size_t bytes = sizeof(int) * kTileCounterInts * kTileCounterSlots;
      cudaError_t e = cudaMalloc(&memory, bytes);
      if (e == cudaSuccess) e = zero_outside_any_capture(memory, bytes);
      if (e != cudaSuccess) {
        if (memory != nullptr) cudaFree(memory);
        return Status(StatusCode::kCudaError,
                      std::string("allocating the persistent tile counters: ") + cudaGetErrorString(e));
      }
      pool->slots = static_cast<int*>(memory);
    }
  }
  const unsigned slot = pool->next_slot.fetch_add(1) % kTileCounterSlots;
  *counter = pool->slots + kTileCounterInts * slot;
  return Status::Ok();
}

}  // namespace hopattn::sm90
