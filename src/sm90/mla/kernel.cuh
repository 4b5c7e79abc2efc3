// The MLA forward kernel (qv): one CTA per (split, tile, K/V head, batch entry); roles as in
// mla/traits.cuh: two consumer warpgroups (mla/consumer.cuh), whose first thread also loads K and V
// (mla/producer.cuh).
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/mla/consumer.cuh"
#include "sm90/mla/params.hpp"
#include "sm90/mla/tile.cuh"

namespace hopattn::sm90 {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    mla_forward_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                       const __grid_constant__ MlaParams params) {
  // 1024-byte aligned (the 128B swizzle's atom); no static shared memory, so the window's start.
  extern __shared__ __align__(kSwizzleAtomBytes) std::uint8_t dynamic_smem[];
  auto& s = *reinterpret_cast<typename Traits::SharedStorage*>(dynamic_smem);
  allow_dependent_launch();  // the split combine (mla/combine.cuh) may start; it waits for this grid
  if (threadIdx.x == 0) {
    if (smem_address(&s) % kSwizzleAtomBytes != 0) __trap();
    tma_prefetch_descriptor(&tm_k);
    tma_prefetch_descriptor(&tm_v);
    for (int i = 0; i < Traits::kStages; ++i) {
      mbarrier_init(&s.kv_full[i], 1);
      mbarrier_init(&s.kv_empty[i], Traits::kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();
  const MlaTile tile = mla_tile<Traits::kBlockM, Traits::kBlockN>(params);
  MlaConsumer<Traits>(s, params, tile, warpgroup_of_thread<Traits::kWarpgroupThreads, /*kWarpUniform=*/true>(),
                      KvMaps{&tm_k, &tm_v})
      .run();
}

}  // namespace hopattn::sm90
