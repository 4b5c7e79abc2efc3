// Which tile and key blocks a CTA of the MLA forward takes (blockIdx.x is the split, blockIdx.y the
// (tile row block, K/V head) pair, blockIdx.z the batch entry), and which query row and head a tile row
// is. Producer and consumers decode them alike.
#pragma once

#include <cstdint>

#include "sm90/mla/params.hpp"

namespace hopattn::sm90 {

struct MlaTile {
  int batch, kv_head, m_block, split;
  int index;     // (batch * heads_kv + kv_head) * m_blocks + m_block: the partials' tile index
  int seqlen_k;  // this batch entry's keys (seqused_k, else seqlen_k)
  int key_end;   // past the last key any of the tile's rows sees
  int block_begin, block_end;  // the split's K/V blocks
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ MlaTile mla_tile(const MlaParams& p) {
  MlaTile t;
  t.split = blockIdx.x;
  t.m_block = blockIdx.y % p.m_blocks;
  t.kv_head = blockIdx.y / p.m_blocks;
  t.batch = blockIdx.z;
  t.index = (t.batch * p.heads_kv + t.kv_head) * p.m_blocks + t.m_block;
  t.seqlen_k = p.seqused_k != nullptr ? p.seqused_k[t.batch] : p.seqlen_k;
  t.key_end = t.seqlen_k;
  if (p.causal) {
    const int last_row = min(p.packed_rows, (t.m_block + 1) * kBlockM) - 1;
    const int last_q_row = int(p.head_ratio_divisor.divide(unsigned(last_row)));
    t.key_end = max(0, min(t.seqlen_k, last_q_row + t.seqlen_k - p.seqlen_q + 1));
  }
  const int blocks = (t.key_end + kBlockN - 1) / kBlockN;
  t.block_begin = min(blocks, t.split * p.blocks_per_split);
  t.block_end = min(blocks, t.block_begin + p.blocks_per_split);
  return t;
}

// Packed tile row -> (query row, query head); live: a row of the output at all.
struct MlaRow {
  int q_row, head;
  bool live;
};

// Packed row `packed` of K/V head kv_head's query rows (query row major, its heads minor).
__device__ __forceinline__ MlaRow mla_packed_row(const MlaParams& p, int kv_head, int packed) {
  MlaRow r;
  r.q_row = int(p.head_ratio_divisor.divide(unsigned(packed)));
  r.head = kv_head * p.head_ratio + packed - r.q_row * p.head_ratio;
  r.live = packed < p.packed_rows;
  return r;
}

__device__ __forceinline__ MlaRow mla_row(const MlaParams& p, const MlaTile& t, int tile_row, int block_m) {
  return mla_packed_row(p, t.kv_head, t.m_block * block_m + tile_row);
}

// Where a row's results go: its row of out, and its LSE entry.
template <typename Element>
__device__ __forceinline__ Element* mla_out_row(const MlaParams& p, int batch, const MlaRow& row) {
  return static_cast<Element*>(p.out.data) + batch * p.out.batch_stride + std::int64_t(row.q_row) * p.out.row_stride +
         std::int64_t(row.head) * p.out.head_stride;
}
__device__ __forceinline__ float* mla_lse_entry(const MlaParams& p, int batch, const MlaRow& row) {
  return p.lse + batch * p.lse_batch_stride + std::int64_t(row.head) * p.lse_head_stride +
         std::int64_t(row.q_row) * p.lse_row_stride;
}

// With splits: the index of split `split`'s partial for row tile_row of tile `tile` (of block_m rows),
// a row of kHeadDimV floats in partial_o and an entry of partial_lse. The forward's tiles write them,
// mla/combine.cuh reads them.
__device__ __forceinline__ std::int64_t mla_partial_index(const MlaParams& p, int tile, int split, int block_m,
                                                          int tile_row) {
  return (std::int64_t(tile) * p.splits + split) * block_m + tile_row;
}

// The first key a row may not see. Bottom-right causal: query row i sees keys up to
// i + seqlen_k - seqlen_q; every row stops at the sequence's keys (seqused_k, the tensor's end).
__device__ __forceinline__ int mla_first_masked_key(const MlaParams& p, const MlaTile& t, const MlaRow& row) {
  return p.causal ? min(t.seqlen_k, max(0, row.q_row + t.seqlen_k - p.seqlen_q + 1)) : t.seqlen_k;
}

}  // namespace hopattn::sm90
