// The MLA forward's K/V loads: the first consumer thread issues block i of the split into ring
// stage i % 2, K as the tile's first column block and V as the next eight (TMA, 128B swizzle). A dense cache loads whole 64-key boxes (rows past k's read zeros); a paged one
// loads the block in boxes of at most a page, and only those that hold a key in use: the consumers
// mask the rest of the block and zero its V rows (mla/consumer.cuh), so stale shared memory there is
// never read into O.
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/mla/params.hpp"
#include "sm90/mla/tile.cuh"

namespace hopattn::sm90 {

struct KvMaps {
  const CUtensorMap* k;
  const CUtensorMap* v;
};

template <class Traits>
__device__ void load_kv_block(typename Traits::SharedStorage& s, const CUtensorMap* tm_k, const CUtensorMap* tm_v,
                              const MlaParams& p, const MlaTile& t, int i) {
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kColumnBlockBytes = Traits::kColumnBlockBytes;
  constexpr int kVColumnBlocks = Traits::kHeadDimV / 64;
  const int stage = i % Traits::kStages;
  std::uint64_t* full = &s.kv_full[stage];
  std::uint8_t* dst = s.kv[stage];
  const int key0 = (t.block_begin + i) * kBlockN;
  if (p.page_table == nullptr) {
    mbarrier_arrive_expect_tx(full, Traits::KvTile::kBytes);
    tma_load_4d(dst, tm_k, full, 0, key0, t.kv_head, t.batch);
    for (int cb = 0; cb < kVColumnBlocks; ++cb)
      tma_load_4d(dst + (1 + cb) * kColumnBlockBytes, tm_v, full, cb * 64, key0, t.kv_head, t.batch);
    return;
  }
  // Paged: boxes of box_rows (a power of two, a multiple of 8: each starts on a swizzle atom).
  const int box_rows = p.page_size < kBlockN ? p.page_size : kBlockN;
  const int live_keys = min(kBlockN, t.seqlen_k - key0);
  const int boxes = (live_keys + box_rows - 1) / box_rows;
  mbarrier_arrive_expect_tx(full, boxes * box_rows * kSwizzleBytes * (1 + kVColumnBlocks));
  const int* table = p.page_table + t.batch * p.page_table_batch_stride;
  for (int b = 0; b < boxes; ++b) {
    const int key = key0 + b * box_rows;
    const int page = table[key / p.page_size * p.page_table_page_stride];
    const int row = key % p.page_size;
    std::uint8_t* box_dst = dst + b * box_rows * kSwizzleBytes;
    tma_load_4d(box_dst, tm_k, full, 0, row, t.kv_head, page);
    for (int cb = 0; cb < kVColumnBlocks; ++cb)
      tma_load_4d(box_dst + (1 + cb) * kColumnBlockBytes, tm_v, full, cb * 64, row, t.kv_head, page);
  }
}

// P is 0 for keys past the sequence, but 0 times a NaN in their V rows is NaN (a dense cache's rows
// past seqused_k, a paged block's boxes that were not loaded): zeroes rows [live_keys, kBlockN) of
// `column_blocks` V column blocks from `v` (the shared address of the first), each of `threads` threads
// every threads-th 16-byte chunk. The caller fences and synchronizes before its P V reads them.
template <class Traits>
__device__ void zero_v_rows_past_keys(std::uint32_t v, int live_keys, int column_blocks, int thread, int threads) {
  const int dead_rows = Traits::kBlockN - live_keys;
  v += live_keys * kSwizzleBytes;
  for (int idx = thread; idx < dead_rows * column_blocks * 8; idx += threads) {
    const int chunk = idx % 8, row = idx / 8 % dead_rows, block = idx / 8 / dead_rows;
    store_zero_16b(v + block * Traits::kColumnBlockBytes + row * kSwizzleBytes + chunk * 16);
  }
}

}  // namespace hopattn::sm90
