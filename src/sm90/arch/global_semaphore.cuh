// A counter in global memory that orders work across CTAs: one thread waits (acquire) until it
// reaches a value, another counts one more (release). The async proxy's global writes (bulk
// reductions) are ordered with it by proxy fences.
#pragma once

namespace hopattn::sm90 {

__device__ __forceinline__ int load_acquire_gpu(const int* counter) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// Spins, sleeping from 32 ns up to 256 ns between reads, until *counter >= target. A waiter on the
// deterministic backward's chain of dQ reductions sees its turn that much sooner (a 1 us cap measured
// 1-1.5% slower at d 256: perf-notes v100); the reads are one 4-byte L2 load per waiter and sleep.
// Not inlined: inlined into one thread's branch of the backward consumer, where it first ran, it made
// ptxas spill at head dim 128; it now runs in the deterministic backward's dQ writers
// (bwd/dq_writer.cuh), where the call was kept as measured.
inline __device__ __noinline__ void wait_counter_at_least(const int* counter, int target) {
  unsigned sleep_ns = 32;
  while (load_acquire_gpu(counter) < target) {
    __nanosleep(sleep_ns);
    if (sleep_ns < 256) sleep_ns *= 2;
  }
}

__device__ __forceinline__ void increment_release_gpu(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

// Orders this thread's global accesses through one proxy before later ones through the other
// (generic <-> async, e.g. a completed bulk reduction before a generic release, an acquire before a
// bulk reduction).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

}  // namespace hopattn::sm90
