// Which tile a CTA works on, and which K/V blocks that tile visits. The producer and the consumers
// walk the same sequence, so they agree on every stage of the K/V ring without talking.
#pragma once

#include "sm90/fwd/params.hpp"

namespace hopattn::sm90 {

struct TileCoord {
  int m_block;
  int head;
  int batch;
};

// Static persistent schedule: CTA c takes tiles c, c + gridDim.x, ... (a non-persistent launch has
// one CTA per tile and runs the loop once). Tiles are numbered head-major so the CTAs in flight at
// one time share the K/V of few heads in L2; within a head, causal tiles go heaviest (last rows)
// first so the short tiles fill the tail of the schedule.
__device__ __forceinline__ TileCoord decode_tile(const FwdParams& p, int tile) {
  int head_batch = tile / p.num_m_blocks;
  int m = tile % p.num_m_blocks;
  TileCoord c;
  c.m_block = p.causal ? p.num_m_blocks - 1 - m : m;
  c.head = head_batch % p.heads_q;
  c.batch = head_batch / p.heads_q;
  return c;
}

// K/V blocks [begin, end) that rows [m_block * kBlockM, +kBlockM) can see.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ void kv_block_range(const FwdParams& p, int m_block, int* begin, int* end) {
  int n_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
  *begin = 0;
  *end = n_blocks;
  if (p.causal) {
    // Bottom-right aligned: row i sees keys j <= i + seqlen_k - seqlen_q.
    int last_visible = m_block * kBlockM + kBlockM - 1 + p.seqlen_k - p.seqlen_q;
    int causal_end = last_visible < 0 ? 0 : last_visible / kBlockN + 1;
    *end = causal_end < n_blocks ? causal_end : n_blocks;
  }
}

}  // namespace hopattn::sm90
