// The deterministic backward's dQ writers: one elected thread per consumer, in warps 1 and 2 of the
// producer warpgroup (idle otherwise), takes each dQ share its consumer staged (dq_staged), waits for
// the reduction's turn (dq_order.cuh), adds the share into the workspace by one bulk reduction, frees
// the buffer once the reduction has read it (dq_free), and counts the turn done once its writes have
// completed. The consumer goes on computing meanwhile: the turn's wait and the L2 round trip of the
// completion are off its path, which they held for every step when its own thread 0 did this (perf-notes
// v97).
#pragma once

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/bwd/dq_order.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/producer.cuh"
#include "sm90/bwd/sequence.cuh"

namespace hopattn::sm90 {

// Consumer `warpgroup`'s shares, one per step, in the consumer's step order (StepList): step u in
// buffer u % kDqBuffers, as the consumer's PendingDq::uses counts them.
template <class Traits>
__device__ void run_dq_writer(typename Traits::SharedStorage& s, const BwdParams& p, const KeyBlock& block,
                              const BwdSequence& seq, int warpgroup) {
  static_assert(Traits::kDeterministic, "only the deterministic kernels hand dQ to writers");
  const StepList<Traits> steps(p, block, seq.bounds);
  const std::uint32_t share_bytes = Traits::dq_pieces(warpgroup) * Traits::kDqPieceFloats * sizeof(float);
  const int share_offset = Traits::dq_first_piece(warpgroup) * Traits::kDqPieceFloats;
  int use = 0;
  for (int head = steps.first_head; head < steps.first_head + p.head_ratio; ++head) {
    for (int m = steps.m_begin; m < steps.m_begin + steps.m_blocks; ++m, ++use) {
      const int buffer = use % Traits::kDqBuffers;
      mbarrier_wait(&s.dq_staged[warpgroup][buffer], (use / Traits::kDqBuffers) % 2);  // consumer -> us
      const int m0 = m * Traits::kBlockM;
      const std::int64_t row = workspace_row<Traits::kBlockM>(p, seq, head, m0);
      int* order = dq_order_counter<Traits>(p, row, warpgroup);
      wait_dq_turn<Traits>(p, order, block.n_block, m0, seq.bounds);
      bulk_reduce_add_f32(p.dq_accum + row * Traits::kHeadDim + share_offset, s.dq[buffer] + share_offset,
                          share_bytes);
      tma_store_commit();
      tma_store_wait_read();
      mbarrier_arrive(&s.dq_free[warpgroup][buffer]);  // us -> consumer: the buffer may be written again
      pass_dq_turn(order);
    }
  }
}

}  // namespace hopattn::sm90
