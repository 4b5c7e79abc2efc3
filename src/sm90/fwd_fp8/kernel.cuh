// The FP8 forward kernel: warpgroup 0 produces (warp 0 loads by TMA, warps 1..3 transpose V unless
// V^T comes from global memory), warpgroups 1 and 2 consume (64 query rows each). See producer.cuh
// and consumer.cuh.
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/fwd_fp8/consumer.cuh"
#include "sm90/fwd_fp8/params.hpp"
#include "sm90/fwd_fp8/producer.cuh"

namespace hopattn::sm90 {

template <class Traits>
__device__ __forceinline__ typename Traits::SharedStorage& fp8_shared_storage() {
  extern __shared__ std::uint8_t dynamic_smem[];
  // The 128B swizzle is a function of address bits 4-9: tiles must start 1024-byte aligned.
  const std::uint32_t base = smem_address(dynamic_smem);
  const std::uint32_t pad = (kSwizzleAtomBytes - base % kSwizzleAtomBytes) % kSwizzleAtomBytes;
  return *reinterpret_cast<typename Traits::SharedStorage*>(dynamic_smem + pad);
}

template <class Traits>
__device__ __forceinline__ void fp8_init_barriers(typename Traits::SharedStorage& s) {
  mbarrier_init(&s.q_full, 1);
  mbarrier_init(&s.q_empty, Traits::kConsumerWarps);
  for (int i = 0; i < Traits::kStages; ++i) {
    s.v_end[i] = 0;
    mbarrier_init(&s.k_full[i], 1);
    mbarrier_init(&s.k_empty[i], Traits::kConsumerWarps);
    mbarrier_init(&s.v_full[i], 1);
    mbarrier_init(&s.v_empty[i], Traits::kTransposeWarps);
    mbarrier_init(&s.vt_full[i], Traits::kVtWriters);
    mbarrier_init(&s.vt_empty[i], Traits::kConsumerWarps);
  }
  fence_barrier_init();
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    attention_forward_fp8_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                 const __grid_constant__ CUtensorMap tm_k_permuted,
                                 const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                                 const __grid_constant__ Fp8FwdParams params) {
  typename Traits::SharedStorage& s = fp8_shared_storage<Traits>();
  const int warpgroup = warpgroup_of_thread<Traits::kWarpgroupThreads, Traits::kWarpUniformWarpgroup>();
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&tm_q);
    tma_prefetch_descriptor(&tm_k);
    if constexpr (Traits::kVtFromGlobal) tma_prefetch_descriptor(&tm_k_permuted);
    tma_prefetch_descriptor(&tm_v);
    fp8_init_barriers<Traits>(s);
  }
  // A programmatic dependent, as the 16-bit kernel (fwd/kernel.cuh): no global memory before the wait;
  // then the split combines (split_combine.cuh; fwd/varlen_combine.cuh) or the caller's next kernel.
  wait_for_primary_then_allow_dependents();
  __syncthreads();

  if (warpgroup == 0) {
    warpgroup_release_registers<Traits::kProducerRegisters>();
    const int warp = threadIdx.x / 32;
    if (warp == 0) {
      if (elect_one_lane()) run_fp8_loads<Traits>(s, &tm_q, &tm_k, &tm_k_permuted, &tm_v, params);
    } else if constexpr (!Traits::kVtFromGlobal) {
      run_v_transposer<Traits>(s, static_cast<unsigned>(warp - 1));
    }
  } else {
    warpgroup_claim_registers<Traits::kConsumerRegisters>();
    Fp8Consumer<Traits>(s, params, &tm_o, warpgroup - 1).run();
  }
}

}  // namespace hopattn::sm90
