// Shared-memory transaction barriers (PTX mbarrier.*). The K/V ring and the Q buffer hand data from
// the TMA producer to the consumer warpgroups through these: a "full" barrier completes when the TMA
// bytes have landed (expect_tx), an "empty" barrier when every consumer warp has released the slot.
#pragma once

#include <cstdint>

namespace hopattn::sm90 {

__device__ __forceinline__ std::uint32_t smem_address(const void* ptr) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, int arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrive_count) : "memory");
}

// Makes mbarrier.init visible to the async proxy (TMA) and the other threads of the cluster.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}

// Arrive and announce that `bytes` more bytes will land (complete_tx) before this phase completes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)),
               "r"(bytes)
               : "memory");
}

// Blocks until the phase with parity `phase` has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, std::uint32_t phase) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_address(bar)),
      "r"(phase)
      : "memory");
}

}  // namespace hopattn::sm90
