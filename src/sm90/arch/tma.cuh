// Tensor Memory Accelerator loads and stores (PTX cp.async.bulk.tensor). One thread issues a load of
// a whole box; the bytes land in shared memory (swizzled as the tensor map says) and complete_tx on an
// mbarrier. Stores go the other way and are tracked with bulk groups. Tensor maps are built on the
// host (src/sm90/host/tensor_map.cu) and passed as __grid_constant__ kernel parameters, so they live
// in the param space TMA can read.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"

namespace hopattn::sm90 {

// Pulls the descriptor into the TMA unit's cache ahead of the first load.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

// 4D tiled load: coordinates are (innermost first) element indices; out-of-bounds elements read 0.
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map, std::uint64_t* bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_address(smem_dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_address(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// 5D tiled load, as tma_load_4d (the permuted K rows of host/tensor_map.hpp's make_permuted_rows_map).
__device__ __forceinline__ void tma_load_5d(void* smem_dst, const CUtensorMap* map, std::uint64_t* bar, int c0,
                                            int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::"r"(smem_address(smem_dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_address(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// Bulk reduction of `bytes` contiguous bytes of float32 (a multiple of 16, both addresses 16-byte
// aligned) from shared memory into global memory: global[i] += shared[i], performed in L2. Tracked by
// the issuing thread's bulk groups, like the tiled stores.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem_dst, const float* smem_src, std::uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(gmem_dst)),
               "r"(smem_address(smem_src)), "r"(bytes)
               : "memory");
}

// 4D tiled store of a whole box from shared memory (swizzled as the tensor map says); elements whose
// coordinates fall outside the tensor are not written. Tracked by the issuing thread's bulk groups.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* smem_src, int c0, int c1, int c2,
                                             int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<std::uint64_t>(map)),
      "r"(smem_address(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Closes the bulk group of the stores issued so far by this thread.
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until all but the kPending most recent of this thread's committed store groups have finished
// reading shared memory (their sources may be overwritten); their global writes may still be in flight.
template <int kPending = 0>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Waits until this thread's committed stores are complete, writes included (before the CTA exits).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

}  // namespace hopattn::sm90
