// Q and dO rows past the q rows a sequence uses (seqused_q) in the backward. A step loads kBlockM rows
// of Q and dO from its q block's first row; when seqused_q[b] ends inside the block, the rows past it
// hold whatever the caller's memory holds there: rows between seqused_q and the sequence's stored end,
// the next sequence's rows (past its own seqused_q maybe), NaN or Inf where nobody wrote (torch.empty).
// Their row statistics (lse_log2 = +inf, D = 0: row_stats.cuh) give P^T = 0 and dS^T = 0 only for
// finite scores: NaN in a Q row makes its scores NaN (exp2(NaN - inf) = NaN), and even with P^T and
// dS^T exactly 0, dV += P^T dO and dK += dS^T Q multiply those rows, 0 x NaN = 0 x Inf = NaN, into
// every dk and dv row of the CTA. With the rows zeroed, S^T = dP^T = 0 there, so P^T = exp2(-inf) = 0
// and dS^T = 0 (0 - 0) = 0 exactly, and every product is finite. Without seqused_q the rows past a
// sequence are the next sequence's or TMA's zero fill past the tensor's end, both finite: no clear.
// At most the last q block a CTA visits of each q head has such rows.
#pragma once

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/bwd/key_tail.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// Zeroes rows [first_row, kBlockM) of the stage's Q tile (consumer 0) or dO tile (consumer 1), which
// must have landed (q_full waited for), fences the proxies (generic-proxy stores before the async-proxy
// reads of wgmma), then waits for the other consumer's half: both consumers' GEMMs read every row of
// both tiles. 4 predicated 16-byte stores a thread per column block, the blocks in a loop: unrolled,
// they made ptxas spill 4 bytes in the deterministic d 128 kernel (232 registers a consumer thread).
template <class Traits>
__device__ __forceinline__ void clear_query_rows(typename Traits::SharedStorage& s, int stage, int first_row,
                                                 int warpgroup, int thread_in_warpgroup) {
  static_assert(Traits::kConsumerWarpgroups == 2, "one consumer per tile");
  static_assert(Traits::QTile::kColumnBlockBytes == Traits::DoTile::kColumnBlockBytes, "Q and dO: rows alike");
  const std::uint32_t tile = smem_address(warpgroup == 0 ? s.q[stage] : s.dout[stage]);
  const int blocks = warpgroup == 0 ? Traits::QTile::kColumnBlocks : Traits::DoTile::kColumnBlocks;
#pragma unroll 1
  for (int block = 0; block < blocks; ++block) {
    clear_rows_from<Traits::kBlockM, Traits::kWarpgroupThreads>(tile + block * Traits::QTile::kColumnBlockBytes,
                                                                first_row, thread_in_warpgroup);
  }
  fence_proxy_async_shared();
  named_barrier_sync(Traits::kQueryTailBarrier, Traits::kConsumerThreads);
}

}  // namespace hopattn::sm90
