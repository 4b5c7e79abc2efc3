// Which tile and key blocks a CTA of the MLA forward takes: blockIdx.x is the split, blockIdx.y the
// (tile row block, K/V head) pair, blockIdx.z the batch entry. Producer and consumers decode it alike.
#pragma once

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

}  // namespace hopattn::sm90
