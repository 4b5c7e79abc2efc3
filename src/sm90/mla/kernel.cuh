// The MLA forward kernel (qv): one CTA per (split, tile, K/V head, batch entry), two warpgroups whose
// first threads also load K and V (mla/producer.cuh). Consumer is MlaConsumer (64-row tiles: roles in
// mla/traits.cuh) or MlaNarrowConsumer (16 or 32 rows, transposed: mla/narrow_traits.cuh).
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/mla/params.hpp"
#include "sm90/mla/producer.cuh"
#include "sm90/mla/tile.cuh"

namespace hopattn::sm90 {

template <class Traits, class Consumer>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    mla_forward_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                       const __grid_constant__ MlaParams params) {
  // 1024-byte aligned (the 128B swizzle's atom); no static shared memory, so the window's start.
  extern __shared__ __align__(kSwizzleAtomBytes) std::uint8_t dynamic_smem[];
  auto& s = *reinterpret_cast<typename Traits::SharedStorage*>(dynamic_smem);
  if (threadIdx.x == 0) {
    if (smem_address(&s) % kSwizzleAtomBytes != 0) __trap();
    tma_prefetch_descriptor(&tm_k);
    tma_prefetch_descriptor(&tm_v);
    Consumer::init_barriers(s);
    fence_barrier_init();
  }
  // A programmatic dependent, as the 16-bit forward kernel (fwd/kernel.cuh): no global memory before
  // the wait; then the split combine (mla/combine.cuh) or the caller's next kernel may launch.
  wait_for_primary_then_allow_dependents();
  __syncthreads();
  const MlaTile tile = mla_tile<Traits::kBlockM, Traits::kBlockN>(params);
  Consumer(s, params, tile, warpgroup_of_thread<Traits::kWarpgroupThreads, /*kWarpUniform=*/true>(), KvMaps{&tm_k, &tm_v})
      .run();
}

}  // namespace hopattn::sm90
