// cp.async: 16-byte copies from global to shared memory that bypass registers and L1, each thread
// issuing its own; an mbarrier can count them in as they land. The copies write shared memory through
// the generic proxy: a thread that saw them land (the barrier's wait) runs fence.proxy.async
// (sync.cuh) before its wgmma (the async proxy) reads them.
#pragma once

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"

namespace hopattn::sm90 {

// Copies 16 bytes from `src` to shared address `smem_dst` (both 16-byte aligned), or writes 16 zero bytes when
// `valid` is false (src-size 0: nothing is read, so `src` may point anywhere).
__device__ __forceinline__ void cp_async_16_or_zero(std::uint32_t smem_dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// Copies 4 bytes from `src` to shared address `smem_dst` (both 4-byte aligned), through L1 (.ca: 4-byte
// copies take no other cache mode). For small reads that must not hold registers while they land.
__device__ __forceinline__ void cp_async_4(std::uint32_t smem_dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_dst), "l"(src) : "memory");
}

// Closes this thread's copies issued since the last commit into a group (cp_async_wait_group counts
// groups); a commit with no copy makes an empty group, which counts as landed.
__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most kPending of this thread's latest committed groups are still landing; what the
// others copied is then visible to this thread.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Arrives on `bar` once every cp.async this thread issued so far has landed, counting against the
// barrier's expected arrivals (.noinc): a barrier fed this way is initialized with one arrival per
// copying thread.
__device__ __forceinline__ void cp_async_arrive_when_landed(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_address(bar)) : "memory");
}

// Waits until every cp.async this thread issued has landed (no mbarrier: a one-off copy, such as a
// tile loaded once per CTA).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace hopattn::sm90
