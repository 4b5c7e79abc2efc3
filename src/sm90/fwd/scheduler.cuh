// Which tile a CTA works on, and which K/V blocks that tile visits.
//
// Tile order: (batch, head) pairs are cut into equal groups of `heads_per_group` whose K/V fit in L2
// together; within a group, tiles go m-block by m-block across the group's heads, heaviest (last)
// causal rows first. So the CTAs in flight share K/V in L2, and the light causal tiles come last,
// where they fill the tail of the schedule.
//
// Hand-out: each CTA starts with tile blockIdx.x; a persistent CTA then takes the next unclaimed
// tile from a global counter (atomicAdd), so CTAs that drew light tiles take more of them. The
// producer fetches the index and publishes it to the consumers beside the Q tile (q_full).
#pragma once

#include "sm90/fwd/params.hpp"

namespace hopattn::sm90 {

struct TileCoord {
  int m_block;
  int head;
  int batch;
};

__device__ __forceinline__ TileCoord decode_tile(const FwdParams& p, int tile) {
  const unsigned group = p.group_tiles_divisor.divide(unsigned(tile));
  const unsigned in_group = unsigned(tile) - group * p.group_tiles_divisor.divisor;
  const unsigned m = p.heads_per_group_divisor.divide(in_group);
  const unsigned head_batch = group * p.heads_per_group_divisor.divisor + in_group - m * p.heads_per_group_divisor.divisor;
  const unsigned batch = p.heads_q_divisor.divide(head_batch);
  TileCoord c;
  c.m_block = p.causal ? p.num_m_blocks - 1 - int(m) : int(m);
  c.head = int(head_batch - batch * p.heads_q_divisor.divisor);
  c.batch = int(batch);
  return c;
}

// The index of this CTA's next tile; num_tiles or more means none is left. Called by the one thread
// that publishes tiles (the producer), once per tile after the first.
__device__ __forceinline__ int claim_next_tile(const FwdParams& p) {
  if (p.tile_counter == nullptr) return p.num_tiles;  // one CTA per tile
  return static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1);
}

// Called once per CTA by the thread that claimed tiles, after its last claim: the last CTA to get
// here zeroes the counter pair for the next launch that draws it (host/tile_counters.hpp).
__device__ __forceinline__ void finish_schedule(const FwdParams& p) {
  if (p.tile_counter == nullptr) return;
  if (atomicAdd(p.tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
    p.tile_counter[0] = 0;
    p.tile_counter[1] = 0;
  }
}

// K/V blocks [begin, end) that rows [m_block * kBlockM, +kBlockM) can see (window and causal limits
// are bottom-right aligned: row i's diagonal is key i + seqlen_k - seqlen_q).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ void kv_block_range(const FwdParams& p, int m_block, int* begin, int* end) {
  const int n_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
  const int diagonal0 = m_block * kBlockM + p.seqlen_k - p.seqlen_q;  // diagonal key of the first row
  *begin = 0;
  *end = n_blocks;
  if (p.window_right >= 0) {
    const int last_visible = diagonal0 + kBlockM - 1 + p.window_right;
    *end = last_visible < 0 ? 0 : min(n_blocks, last_visible / kBlockN + 1);
  }
  if (p.window_left >= 0) {
    const int first_visible = diagonal0 - p.window_left;
    *begin = first_visible <= 0 ? 0 : min(*end, first_visible / kBlockN);
  }
}

}  // namespace hopattn::sm90
