// K and V rows past a sequence's keys in the backward. A CTA loads kBlockN rows of K and V from its key
// block's first key; when the keys the sequence uses (seqused_k[b], else its length) end inside the
// block, the rows past them hold whatever the caller's memory holds there: rows between seqused_k and
// the sequence's stored end, the next sequence's rows, padding after the last sequence; NaN or Inf
// where nobody wrote (a cache from torch.empty). The mask gives those keys P = 0 exactly (a select),
// but the GEMMs still multiply their rows, and 0 x NaN = 0 x Inf = NaN: NaN in V reaches dP^T = V dO^T
// and so dS^T = P^T (dP^T - D) (NaN in K too, under the softcap, through the slope 1 - tanh^2), which
// dK += dS^T Q carries into the dk rows those keys must get as 0 and dQ = dS K into every dq row; and
// dQ = dS K multiplies dS's zeros by the K rows themselves. With both tiles' rows zeroed, S^T and dP^T
// are 0 there, so P^T and dS^T are exactly 0 and every product is finite. Only the block holding the
// sequence's last key in use has such rows under its steps (blocks past that key take none), and a CTA
// owns one key block: the clear costs a CTA at most once.
#pragma once

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// Zeroes rows [first_row, kRows) of the kRows rows of a swizzled tile's column block that start at
// `rows` (a shared-window address; first_row < 0: all of them) with the kThreads threads of a
// warpgroup. Whole 128-byte rows, so the swizzle (a permutation within a row) does not matter; a warp
// stores 512 contiguous bytes at a time, conflict free. Also the backward's q rows (query_tail.cuh).
template <int kRows, int kThreads>
__device__ __forceinline__ void clear_rows_from(std::uint32_t rows, int first_row, int thread) {
  constexpr int kChunksPerRow = kSwizzleBytes / 16;
  constexpr int kStores = kRows * kChunksPerRow / kThreads;
  static_assert(kStores * kThreads == kRows * kChunksPerRow, "whole rows per pass of the threads");
  const int first_chunk = first_row * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < kStores; ++i) {
    const int chunk = thread + i * kThreads;
    if (chunk >= first_chunk) store_zero_16b(rows + chunk * 16);
  }
}

// Zeroes rows [first_row, kKeysPerWarpgroup) of this consumer warpgroup's keys in the K and V tiles
// (first_row < 0: all of them), which must have landed (kv_full waited for), and fences the proxies:
// generic-proxy stores before the async-proxy reads of wgmma. 8 (d 64) or 16 (d 128 to 256) predicated
// 16-byte stores a thread. Where the consumers share their keys (Traits::kSplitsRoles), consumer 0
// clears the first half of each tile's column blocks (rounded up), consumer 1 the rest.
template <class Traits, class Tile>
__device__ __forceinline__ void clear_key_rows_of(std::uint32_t tile, int first_row, int warpgroup,
                                                  int thread_in_warpgroup) {
  constexpr int kBlocksOfFirst = Traits::kSplitsRoles ? (Tile::kColumnBlocks + 1) / 2 : Tile::kColumnBlocks;
  const std::uint32_t rows_offset = Traits::kSplitsRoles ? 0 : warpgroup * Traits::kKeysPerWarpgroup * kSwizzleBytes;
  const int first_block = Traits::kSplitsRoles && warpgroup == 1 ? kBlocksOfFirst : 0;
  const int end_block = Traits::kSplitsRoles && warpgroup == 0 ? kBlocksOfFirst : Tile::kColumnBlocks;
#pragma unroll
  for (int block = 0; block < Tile::kColumnBlocks; ++block) {
    if (block < first_block || block >= end_block) continue;
    clear_rows_from<Traits::kKeysPerWarpgroup, Traits::kWarpgroupThreads>(
        tile + block * Tile::kColumnBlockBytes + rows_offset, first_row, thread_in_warpgroup);
  }
}

template <class Traits>
__device__ __forceinline__ void clear_key_rows(typename Traits::SharedStorage& s, int first_row, int warpgroup,
                                               int thread_in_warpgroup) {
  clear_key_rows_of<Traits, typename Traits::KTile>(smem_address(s.k), first_row, warpgroup, thread_in_warpgroup);
  clear_key_rows_of<Traits, typename Traits::VTile>(smem_address(s.v), first_row, warpgroup, thread_in_warpgroup);
  fence_proxy_async_shared();
}

// The barrier after the clear: a consumer's S^T and dP^T GEMMs, which read only its keys, issue once
// all four of its warps have stored and fenced; where the consumers share the keys, once both have. The
// other consumer reads these K rows otherwise only in its dQ GEMMs, each of which first waits for a dS
// of this consumer's (ds_ready), released after the clear.
template <class Traits>
__device__ __forceinline__ void wait_key_rows_cleared(int warpgroup) {
  if constexpr (Traits::kSplitsRoles) {
    named_barrier_sync(Traits::kKeyTailBarrierBase, Traits::kConsumerThreads);
  } else {
    named_barrier_sync(Traits::kKeyTailBarrierBase + warpgroup, Traits::kWarpgroupThreads);
  }
}

}  // namespace hopattn::sm90
