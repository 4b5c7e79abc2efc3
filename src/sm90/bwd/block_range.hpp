// Which q blocks a CTA of the backward visits, and which of those need the mask. A CTA owns one block
// of keys; a q row contributes to it only if it sees one of the block's keys (bottom-right-aligned
// window, causal = window_right 0), so the CTA walks the q blocks that hold such rows and masks only
// the blocks where some (row, key) pair is not visible. constexpr and __host__ __device__ so that the
// CPU tests can check the bounds (tests/cpu/test_bwd_block_range.cpp).
#pragma once

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

struct QBlockRange {
  int begin;  // first q block (of kBlockM rows) that sees a key of the key block
  int end;    // one past the last; begin == end when no row sees any of them
};

// Row i sees keys [i + seqlen_k - seqlen_q - window_left, i + seqlen_k - seqlen_q + window_right] of
// [0, seqlen_k) (-1 = unbounded side). n0: the key block's first key; kBlockN keys per block.
template <int kBlockM, int kBlockN>
HOPATTN_HOST_DEVICE constexpr QBlockRange q_blocks_seeing(int n0, int seqlen_q, int seqlen_k, int window_left,
                                                          int window_right) {
  const int offset = seqlen_k - seqlen_q;
  // The first row whose last visible key reaches the block, and the last row whose first visible key
  // is still inside it (a row's first visible key is never past seqlen_k - 1).
  int first_row = window_right >= 0 ? n0 - offset - window_right : 0;
  if (first_row < 0) first_row = 0;
  int last_row = window_left >= 0 ? n0 + kBlockN - 1 - offset + window_left : seqlen_q - 1;
  if (last_row > seqlen_q - 1) last_row = seqlen_q - 1;
  if (last_row < first_row) return QBlockRange{0, 0};
  return QBlockRange{first_row / kBlockM, last_row / kBlockM + 1};
}

// Whether some (row, key) of q block m0 .. m0 + kBlockM - 1 and key block n0 .. n0 + kBlockN - 1 is not
// visible: keys past seqlen_k, or the window's edges crossing the block pair.
template <int kBlockM, int kBlockN>
HOPATTN_HOST_DEVICE constexpr bool block_pair_needs_mask(int m0, int n0, int seqlen_q, int seqlen_k, int window_left,
                                                         int window_right) {
  const int offset = seqlen_k - seqlen_q;
  if (n0 + kBlockN > seqlen_k) return true;
  if (window_right >= 0 && n0 + kBlockN - 1 > m0 + offset + window_right) return true;
  if (window_left >= 0 && n0 < m0 + kBlockM - 1 + offset - window_left) return true;
  return false;
}

}  // namespace hopattn::sm90
