// The deterministic backward's fixed order of dQ reductions (BwdTraits::kDeterministic): each bulk
// reduction into a q block's share of the float32 dq workspace waits its turn, so that the shares are
// summed over key blocks in one fixed order, whatever order the CTAs run in. The two consumers of a
// CTA add disjoint halves of the block's columns (consumer.cuh, dq_share), so each half has its own
// counter (BwdParams::dq_order, zeroed with the dq workspace): the reductions into it done so far.
// Key block n's turn comes when the counter reaches n's place in the order among the key blocks that
// see the q block; its writer (dq_writer.cuh) then adds, waits until the reduction has completed, and
// counts one more.
//
// The order is the one in which the key blocks would reach the q block if none waited, so that turns
// come without waits: every CTA walks its q blocks upwards from the first it sees (StepList).
//   - With a bound on the right of the window (causal, window_right >= 0), key block n's first q block
//     moves down the sequence with n, so higher key blocks reach a q block first: decreasing key-block
//     order (dq_order_descending).
//   - Without one, every key block starts at q block 0: increasing key-block order, and a key block's
//     first turns wait for the one before it (a wavefront across the first CTAs of a head). The
//     kernels interleave the key blocks of several heads in dispatch order so that the wavefront
//     costs no SM idle time (cta_dispatch.hpp).
//
// No deadlock: one CTA per SM, and CTAs are dispatched in increasing linear index of the grid
// (blockIdx.x fastest). key_block_of_cta maps that index to (key block, head) so that the key blocks
// of a head come in the order's direction (cta_dispatch.hpp), so a CTA only waits for CTAs of its own
// head that were dispatched before it: they run or have finished, whatever their waiting CTAs hold.
// The waits form no cycle whatever order a CTA walks its q blocks in: the first unfinished CTA of a
// head in dispatch order waits for no one, finishes its reductions, and by induction so do all.
// Inside a CTA the writer waits only for its consumer's staged shares, and the consumer only for the
// writer to have read the share kDqBuffers uses back, so the CTA's own waits form no cycle either. A
// CTA increments a counter only after its reduction completed, and waits on nothing across CTAs
// between issuing a reduction and counting it. CTAs that leave early (past their sequence's keys) and
// key blocks past seqused_k see no q block, and key_blocks_seeing counts only the blocks below the
// sequence's keys in use.
#pragma once

#include <cstdint>

#include "sm90/arch/global_semaphore.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/bwd/block_range.hpp"
#include "sm90/bwd/cta_dispatch.hpp"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/producer.cuh"

namespace hopattn::sm90 {

// Also read on the host: only the increasing order interleaves heads (launch.cuh).
HOPATTN_HOST_DEVICE inline bool dq_order_descending(const BwdParams& p) { return p.window_right >= 0; }

// The key block a CTA takes. The other kernels dispatch key block 0 of a head first (the one with the
// most q blocks under a causal mask), head after head; the deterministic kernels in the order's
// direction, with p.dq_head_interleave heads interleaved (cta_dispatch.hpp).
template <class Traits>
__device__ __forceinline__ KeyBlock key_block_of_cta(const BwdParams& p) {
  if constexpr (!Traits::kDeterministic) return KeyBlock{int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
  const long long linear = blockIdx.x + static_cast<long long>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
  const DispatchedKeyBlock d = dispatched_key_block(linear, int(gridDim.x), int(gridDim.y * gridDim.z),
                                                    p.dq_head_interleave, dq_order_descending(p));
  return KeyBlock{d.n_block, d.head % int(gridDim.y), d.head / int(gridDim.y)};
}

// The counter of consumer `warpgroup`'s half of the workspace block that starts at `workspace_row` (a
// multiple of kBlockM: sequence.cuh).
template <class Traits>
__device__ __forceinline__ int* dq_order_counter(const BwdParams& p, std::int64_t workspace_row, int warpgroup) {
  return p.dq_order + (workspace_row / Traits::kBlockM) * Traits::kConsumerWarpgroups + warpgroup;
}

// Before key block n_block's reduction into the q block at row m0: wait until the key blocks before
// it in the order that see the q block have added theirs. b: the sequence's bounds (what the step list
// saw).
template <class Traits, class Bounds>
__device__ __forceinline__ void wait_dq_turn(const BwdParams& p, const int* counter, int n_block, int m0,
                                             const Bounds& b) {
  const int m = m0 / Traits::kBlockM;
  const int chunk = kernel_chunk<Traits>(b);
  const int before =
      dq_order_descending(p)
          ? key_blocks_after_seeing<Traits::kBlockM, Traits::kBlockN>(n_block, m, b.seqlen_q, b.seqlen_k,
                                                                      b.window_left, b.window_right, chunk)
          : key_blocks_before_seeing<Traits::kBlockM, Traits::kBlockN>(n_block, m, b.seqlen_q, b.seqlen_k,
                                                                       b.window_left, b.window_right, chunk);
  wait_counter_at_least(counter, before);
  fence_proxy_async_global();  // the acquire before the bulk reduction (async proxy)
}

// After issuing (and committing) the reduction: its global writes complete, then the next key
// block's turn.
__device__ __forceinline__ void pass_dq_turn(int* counter) {
  tma_store_wait_all();
  fence_proxy_async_global();  // the async proxy's completed writes before the generic release
  increment_release_gpu(counter);
}

}  // namespace hopattn::sm90
