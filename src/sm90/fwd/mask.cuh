// Masking of one S block: keys past seqlen_k (the zero-filled tail of the last K tile) and, when
// causal, keys after the bottom-right-aligned diagonal. Only blocks that straddle a boundary are
// masked; the consumer skips this for interior blocks.
#pragma once

#include <cmath>

#include "sm90/tile/fragment.hpp"

namespace hopattn::sm90 {

// Does block [n0, n0 + kBlockN) have any key that some row of [m0, m0 + kBlockM) must not see?
template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool block_needs_mask(int m0, int n0, int seqlen_q, int seqlen_k, bool causal) {
  if (n0 + kBlockN > seqlen_k) return true;
  return causal && n0 + kBlockN - 1 > m0 + seqlen_k - seqlen_q;
}

// row0: sequence row of this warpgroup's fragment row 0; n0: first key of the block.
template <int kSRegisters>
__device__ __forceinline__ void apply_mask(float (&s)[kSRegisters], int thread_in_warpgroup, int row0, int n0,
                                           int seqlen_q, int seqlen_k, bool causal) {
#pragma unroll
  for (int i = 0; i < kSRegisters; ++i) {
    const int row = row0 + accumulator_row(thread_in_warpgroup, i);
    const int col = n0 + accumulator_col(thread_in_warpgroup, i);
    int key_end = seqlen_k;
    if (causal) key_end = min(key_end, row + seqlen_k - seqlen_q + 1);
    if (col >= key_end) s[i] = -INFINITY;
  }
}

}  // namespace hopattn::sm90
