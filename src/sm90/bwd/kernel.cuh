// The backward's main kernel: one CTA per (key block, K/V head, batch entry or sequence). Warpgroup 0
// is the producer (setmaxnreg.dec; one elected thread issues every load, producer.cuh; in the
// deterministic kernels one thread of each of warps 1 and 2 writes a consumer's dQ, dq_writer.cuh),
// warpgroups 1 and 2 the consumers (setmaxnreg.inc; 64 keys each, consumer.cuh).
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/bwd/consumer.cuh"
#include "sm90/bwd/dq_order.cuh"
#include "sm90/bwd/dq_writer.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/producer.cuh"

namespace hopattn::sm90 {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    attention_backward_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                              const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_dout,
                              const __grid_constant__ CUtensorMap tm_row_stats, const __grid_constant__ BwdParams params,
                              const __grid_constant__ CUtensorMap tm_dk, const __grid_constant__ CUtensorMap tm_dv) {
  const KeyBlock block = key_block_of_cta<Traits>(params);
  const BwdSequence seq = backward_sequence<Traits::kBlockM, Traits::kChunksAndSequsedQ>(params, block.batch);
  // The grid has the longest sequence's key blocks for every sequence: the whole CTA leaves, before
  // any barrier, when its block starts past its sequence's keys (whose CTAs store all its dk, dv).
  if (block.n_block * Traits::kBlockN >= seq.key_rows) return;
  // No static shared memory: the dynamic block starts the CTA's window, 1024-byte aligned as the
  // 128B swizzle needs (checked below).
  extern __shared__ __align__(kSwizzleAtomBytes) std::uint8_t dynamic_smem[];
  auto& s = *reinterpret_cast<typename Traits::SharedStorage*>(dynamic_smem);
  if (threadIdx.x == 0) {
    if (smem_address(&s) % kSwizzleAtomBytes != 0) __trap();
    tma_prefetch_descriptor(&tm_q);
    tma_prefetch_descriptor(&tm_k);
    tma_prefetch_descriptor(&tm_v);
    tma_prefetch_descriptor(&tm_dout);
    tma_prefetch_descriptor(&tm_row_stats);
    tma_prefetch_descriptor(&tm_dk);
    tma_prefetch_descriptor(&tm_dv);
    mbarrier_init(&s.kv_full, 1);  // the producer's arrive_expect_tx
    for (int i = 0; i < Traits::kStages; ++i) {
      mbarrier_init(&s.q_full[i], 1);
      mbarrier_init(&s.q_empty[i], Traits::kConsumerWarps);
    }
    for (int w = 0; w < Traits::kConsumerWarpgroups; ++w) {
      for (int b = 0; b < Traits::kDsBuffers; ++b) mbarrier_init(&s.ds_ready[w][b], Traits::kConsumerWarps / Traits::kConsumerWarpgroups);
      if constexpr (Traits::kDeterministic) {
        for (int b = 0; b < Traits::kDqBuffers; ++b) {
          mbarrier_init(&s.dq_staged[w][b], Traits::kConsumerWarps / Traits::kConsumerWarpgroups);  // the consumer's warps
          mbarrier_init(&s.dq_free[w][b], 1);    // the writer
        }
      }
    }

    fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = warpgroup_of_thread<Traits::kWarpgroupThreads, Traits::kWarpUniformWarpgroup>();
  if (warpgroup == 0) {
    warpgroup_release_registers<Traits::kProducerRegisters>();
    const BwdTensorMaps maps{&tm_q, &tm_k, &tm_v, &tm_dout, &tm_row_stats};
    const int warp = threadIdx.x / 32;
    if (warp == 0 && elect_one_lane()) run_backward_producer<Traits>(s, maps, params, block, seq);
    if constexpr (Traits::kDeterministic) {
      if (warp >= 1 && warp <= Traits::kConsumerWarpgroups && elect_one_lane()) {
        run_dq_writer<Traits>(s, params, block, seq, warp - 1);
      }
    }
  } else {
    warpgroup_claim_registers<Traits::kConsumerRegisters>();
    BwdConsumer<Traits>(s, params, block, seq, warpgroup - 1).run(GradientMaps{&tm_dk, &tm_dv});
  }
}

}  // namespace hopattn::sm90
