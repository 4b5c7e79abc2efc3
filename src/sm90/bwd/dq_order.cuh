// The deterministic backward's fixed order of dQ reductions (BwdTraits::kDeterministic): each
// consumer's bulk reduction into a q block's share of the float32 dq workspace waits its turn, so
// that the shares are summed over key blocks in increasing key-block order, whatever order the CTAs
// run in. The two consumers of a CTA add disjoint halves of the block's columns (consumer.cuh,
// dq_share), so each half has its own counter (BwdParams::dq_order, zeroed with the dq workspace):
// the reductions into it done so far. Key block n's turn comes when the counter reaches the number
// of key blocks before n that see the q block (key_blocks_before_seeing); it then adds, waits until
// its reduction has completed, and counts one more.
//
// No deadlock: the grid is (key blocks, K/V heads, batch) with one CTA per SM, and CTAs are dispatched
// in increasing linear index (blockIdx.x fastest). A CTA only waits for CTAs of its own (y, z) with a
// smaller blockIdx.x, which were dispatched before it: they run or have finished, whatever their
// waiting CTAs hold. Every wait goes to a strictly lower key block, so the waits form no cycle
// whatever order a CTA walks its q blocks in (StepList): the lowest unfinished CTA of a (y, z) waits
// for no one, finishes its reductions, and by induction so do all. A CTA increments a counter only
// after its reduction completed, and waits on nothing across CTAs between issuing a reduction and
// counting it. CTAs that leave early (past their sequence's keys) and key blocks past seqused_k see
// no q block, and key_blocks_seeing counts only the blocks below the sequence's keys in use.
#pragma once

#include <cstdint>

#include "sm90/arch/global_semaphore.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/bwd/block_range.hpp"
#include "sm90/bwd/params.hpp"

namespace hopattn::sm90 {

// The counter of consumer `warpgroup`'s half of the workspace block that starts at `workspace_row` (a
// multiple of kBlockM: sequence.cuh).
template <class Traits>
__device__ __forceinline__ int* dq_order_counter(const BwdParams& p, std::int64_t workspace_row, int warpgroup) {
  return p.dq_order + (workspace_row / Traits::kBlockM) * Traits::kConsumerWarpgroups + warpgroup;
}

// Before key block n_block's reduction into the q block at row m0: wait until the key blocks before
// it that see the q block have added theirs. b: the sequence's bounds (what the step list saw).
template <class Traits, class Bounds>
__device__ __forceinline__ void wait_dq_turn(const int* counter, int n_block, int m0, const Bounds& b) {
  const int before = key_blocks_before_seeing<Traits::kBlockM, Traits::kBlockN>(n_block, m0 / Traits::kBlockM, b.seqlen_q,
                                                                                b.seqlen_k, b.window_left, b.window_right);
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
