// V rows past a variable-length sequence's keys. A tile's last K/V block loads kBlockN rows from the
// block's first key, and in a variable-length batch the rows past the sequence's keys hold whatever
// the caller's memory holds there: the rest of a paged cache's last page, the rows between seqused_k
// and the next sequence, padding after a packed tensor's last sequence. The mask gives those keys
// P = 0 exactly (a select, so NaN or Inf in K is dropped too), but P V multiplies 0 by their V rows,
// and 0 x NaN and 0 x Inf are NaN. So before either consumer warpgroup issues that block's P V, the
// two zero those rows of the V stage, each thread every 256th 16-byte chunk (one writer per byte),
// and count on SharedStorage::v_tail_cleared, whose phase completes once per tile with such a block.
// Only the sequence's last block can have such rows: every earlier block lies within its keys.
#pragma once

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/pipeline/warpgroup_turns.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// The first row of block n_end - 1 that lies past seqlen_k keys; kBlockN when none does.
template <int kBlockN>
__device__ __forceinline__ int first_row_past_keys(int seqlen_k, int n_end) {
  return min(seqlen_k - (n_end - 1) * kBlockN, kBlockN);
}

// Zeroes rows [first_row, kBlockN) of the V stage (its V block landed: v_full waited for): this thread's
// share, then its release of v_tail_cleared. Whole 128-byte rows of each column block, so the swizzle
// (a permutation within a row) does not matter. Each 16-byte chunk of a column block has one owner,
// consumer thread (chunk index mod the 256 consumer threads), whatever first_row is: a byte is only
// ever zeroed by the same thread. The proxy fence orders these generic-proxy stores before the wgmma
// (async proxy) reads of the stage that follow the other warps' wait.
template <class Traits>
__device__ __forceinline__ void clear_v_rows(typename Traits::SharedStorage& s, int stage, int first_row,
                                             int warpgroup, int thread_in_warpgroup) {
  using VTile = typename Traits::VTile;
  constexpr int kChunksPerRow = kSwizzleBytes / 16;
  constexpr int kConsumerThreads = Traits::kConsumerWarpgroups * Traits::kWarpgroupThreads;
  constexpr int kStoresPerBlock = (Traits::kBlockN * kChunksPerRow + kConsumerThreads - 1) / kConsumerThreads;
  const int first_chunk = first_row * kChunksPerRow;
  const int own_chunk = warpgroup * Traits::kWarpgroupThreads + thread_in_warpgroup;
  const std::uint32_t stage_base = smem_address(s.v[stage]);
#pragma unroll
  for (int block = 0; block < VTile::kColumnBlocks; ++block) {
#pragma unroll
    for (int i = 0; i < kStoresPerBlock; ++i) {
      const int chunk = own_chunk + i * kConsumerThreads;
      if (chunk >= first_chunk && chunk < Traits::kBlockN * kChunksPerRow) {
        store_zero_16b(stage_base + block * VTile::kColumnBlockBytes + chunk * 16);
      }
    }
  }
  fence_proxy_async_shared();
  release_from_warp(&s.v_tail_cleared, thread_in_warpgroup);
}

}  // namespace hopattn::sm90
