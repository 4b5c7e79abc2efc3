// The forward kernel: splits the CTA into roles and plans shared memory; the roles live in
// producer.cuh (TMA loads) and consumer.cuh (GEMMs, softmax, epilogue).
//
// Warp-specialized (the default): warpgroup 0 is the producer: it gives registers back
// (setmaxnreg.dec) and one elected thread issues every TMA load (the decoding kernels: the whole
// warpgroup copies K and V with cp.async, kv_cp_async.cuh). Warpgroups 1 and 2 are consumers:
// they take the registers (setmaxnreg.inc) and each computes 64 rows of the 128-row Q tile against
// the same K/V stages. Without warp specialization there are only the two consumer warpgroups and
// thread 0 issues the loads between its GEMMs.
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/fwd/consumer.cuh"
#include "sm90/fwd/kv_cp_async.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/producer.cuh"

namespace hopattn::sm90 {

// The 128B swizzle pattern is a function of address bits 4-9, so tiles must start 1024-byte aligned.
// The kernel has no static shared memory, so its dynamic shared memory starts at the beginning of the
// CTA's shared window; declaring that alignment lets every smem address be a compile-time constant
// instead of a register (the producer warpgroup runs on 24-32 registers).
template <class Traits>
__device__ __forceinline__ typename Traits::SharedStorage& shared_storage() {
  extern __shared__ __align__(kSwizzleAtomBytes) std::uint8_t dynamic_smem[];
  return *reinterpret_cast<typename Traits::SharedStorage*>(dynamic_smem);
}

template <class Traits>
__device__ __forceinline__ void init_barriers(typename Traits::SharedStorage& s) {
  mbarrier_init(&s.q_full, 1);  // the producer's arrive_expect_tx
  mbarrier_init(&s.q_empty, Traits::kConsumerWarps);
  // K/V stages: the TMA thread's arrive_expect_tx, or the cp.async producer's (kv_cp_async.cuh).
  const int k_full_arrivals = Traits::kKvByCpAsync ? cp_async_full_arrivals<Traits>(/*k_stage=*/true) : 1;
  const int v_full_arrivals = Traits::kKvByCpAsync ? cp_async_full_arrivals<Traits>(/*k_stage=*/false) : 1;
  for (int i = 0; i < Traits::kStages; ++i) {
    mbarrier_init(&s.k_full[i], k_full_arrivals);
    mbarrier_init(&s.v_full[i], v_full_arrivals);
    mbarrier_init(&s.k_empty[i], Traits::kConsumerWarps);
    mbarrier_init(&s.v_empty[i], Traits::kConsumerWarps);
  }
  if constexpr (Traits::kVarlen) mbarrier_init(&s.v_tail_cleared, Traits::kConsumerWarps);
  fence_barrier_init();
}

// kKvSource: where a kKvByCpAsync kernel's producer copies K/V from (fwd/params.hpp; kv_cp_async.cuh).
template <class Traits, KvCopySource kKvSource = KvCopySource::kRows>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    attention_forward_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                             const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                             const __grid_constant__ FwdParams params) {
  static_assert(kKvSource == KvCopySource::kRows || Traits::kKvByCpAsync,
                "paged K/V copies: the kernels that copy K/V");
  typename Traits::SharedStorage& s = shared_storage<Traits>();
  // Read from lane 0 in every 16-bit forward kernel (+1.5-2% at d 256, level elsewhere: perf-notes v98).
  const int warpgroup = warpgroup_of_thread<Traits::kWarpgroupThreads, /*kWarpUniform=*/true>();
  if (threadIdx.x == 0) {
    if (smem_address(&s) % kSwizzleAtomBytes != 0) __trap();  // the alignment promised above
    tma_prefetch_descriptor(&tm_q);
    tma_prefetch_descriptor(&tm_k);
    tma_prefetch_descriptor(&tm_v);
    if (params.store_o_by_tma) tma_prefetch_descriptor(&tm_o);
    init_barriers<Traits>(s);
  }
  // Launched as a programmatic dependent (launch.cuh): the kernel queued before this one may still be
  // running. Nothing above touches global memory; everything below may. Then the next kernel (the
  // split combine, or whatever the caller queues) may launch; it waits for this grid.
  wait_for_primary_then_allow_dependents();
  __syncthreads();

  const TensorMaps maps{&tm_q, &tm_k, &tm_v, &tm_o};
  if constexpr (Traits::kWarpSpecialized) {
    if (warpgroup == 0) {
      warpgroup_release_registers<Traits::kProducerRegisters>();
      if constexpr (Traits::kKvByCpAsync) {
        run_cp_async_producer<Traits, kKvSource>(s, maps, params);
      } else if constexpr (Traits::kVarlen) {
        const int warp = threadIdx.x / 32;
        if (warp < 2 && elect_one_lane()) run_varlen_producer<Traits>(s, maps, params, warp);
      } else if (threadIdx.x / 32 == 0 && elect_one_lane()) {
        run_producer<Traits>(s, maps, params);
      }
    } else {
      warpgroup_claim_registers<Traits::kConsumerRegisters>();
      Consumer<Traits>(s, params, maps, warpgroup - 1, false).run();
    }
  } else {
    Consumer<Traits>(s, params, maps, warpgroup, threadIdx.x == 0).run();
  }
}

}  // namespace hopattn::sm90
