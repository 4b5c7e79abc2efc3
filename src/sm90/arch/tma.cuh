// Tensor Memory Accelerator loads (PTX cp.async.bulk.tensor). One thread issues a load of a whole
// box; the bytes land in shared memory (swizzled as the tensor map says) and complete_tx on an
// mbarrier. Tensor maps are built on the host (src/sm90/host/tensor_map.cu) and passed as
// __grid_constant__ kernel parameters, so they live in the param space TMA can read.
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

}  // namespace hopattn::sm90
