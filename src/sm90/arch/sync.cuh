// Thread-group synchronization beyond __syncthreads: named barriers (bar.sync/bar.arrive on ids 1..15,
// id 0 is __syncthreads), register reallocation between warpgroups, and proxy fences.
#pragma once

namespace hopattn::sm90 {

// Waits until `count` threads (a multiple of 32) have reached barrier `id` via sync or arrive.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// The same for a barrier that the threads of different roles reach at different instructions (the
// MLA kernel's P hand-over): bar.sync is barrier.sync.aligned, which PTX requires every participating
// thread of the CTA to reach at the same instruction (compute-sanitizer synccheck reports it);
// barrier.sync without .aligned takes them from anywhere.
__device__ __forceinline__ void named_barrier_sync_unaligned(int id, int count) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Counts this warp towards barrier `id` without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// named_barrier_sync that also ORs a predicate over the `count` threads and returns it to each.
__device__ __forceinline__ bool named_barrier_or(int id, int count, bool predicate) {
  unsigned result;
  asm volatile(
      "{\n.reg .pred in, out;\n"
      "setp.ne.u32 in, %1, 0;\n"
      "bar.red.or.pred out, %2, %3, in;\n"
      "selp.u32 %0, 1, 0, out;\n}\n"
      : "=r"(result)
      : "r"(static_cast<unsigned>(predicate)), "r"(id), "r"(count)
      : "memory");
  return result != 0;
}

// Programmatic dependent launch: a kernel launched after this one with programmatic stream
// serialization may start once every CTA here has executed allow_dependent_launch (or exited); it
// must call wait_for_primary_grid before reading what this grid writes, which waits for the grid to
// complete and its memory operations to be visible.
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void wait_for_primary_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// The start of a forward kernel launched as a programmatic dependent (host/launch_support.hpp,
// launch_kernel), after its shared-memory setup and before any global memory access: wait for the
// kernel ahead, and only then let the next kernel launch. The order matters: the split combines read
// the sequence arrays before their own wait, which a kernel ahead of this one may still be writing.
__device__ __forceinline__ void wait_for_primary_then_allow_dependents() {
  wait_for_primary_grid();
  allow_dependent_launch();
}

// setmaxnreg: a warpgroup gives registers back to (dec) or takes them from (inc) the SM's pool. The
// producer needs few registers; the consumers need many for the S and O accumulators.
template <int kRegisters>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Orders generic-proxy shared-memory writes before later async-proxy (TMA/wgmma) accesses.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// This thread's warpgroup. kWarpUniform: read from lane 0, so that ptxas knows it is the same across
// the warp and keeps what derives from it (the consumers' wgmma descriptors, shared-memory offsets) in
// uniform registers instead of moving it there (R2UR) before every use; whether that pays is a
// kernel's measured choice (its traits' kWarpUniformWarpgroup).
template <int kWarpgroupThreads, bool kWarpUniform>
__device__ __forceinline__ int warpgroup_of_thread() {
  static_assert(kWarpgroupThreads % 32 == 0, "a warp lies in one warpgroup");
  const int warpgroup = int(threadIdx.x / kWarpgroupThreads);
  if constexpr (kWarpUniform) return __shfl_sync(0xffffffffu, warpgroup, 0);
  return warpgroup;
}

// One elected lane of the warp returns true.
__device__ __forceinline__ bool elect_one_lane() {
  unsigned int pred = 0;
  asm volatile(
      "{\n.reg .pred p;\n.reg .b32 lane;\n"
      "elect.sync lane|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(pred));
  return pred != 0;
}

}  // namespace hopattn::sm90
