// Which q blocks a CTA of the backward visits, and which of those need the mask. A CTA owns one block
// of keys; a q row contributes to it only if it sees one of the block's keys (bottom-right-aligned
// window, causal = window_right 0, and the chunk of its diagonal: fwd/attention_chunk.hpp), so the CTA
// walks the q blocks that hold such rows and masks only the blocks where some (row, key) pair is not
// visible. A row's first and last visible keys both grow with the row, which keeps every range below
// contiguous. constexpr and __host__ __device__ so that the
// CPU tests can check the bounds (tests/cpu/test_bwd_block_range.cpp).
#pragma once

#include "sm90/fwd/attention_chunk.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

struct QBlockRange {
  int begin;  // first q block (of kBlockM rows) that sees a key of the key block
  int end;    // one past the last; begin == end when no row sees any of them
};

// Row i sees keys [i + seqlen_k - seqlen_q - window_left, i + seqlen_k - seqlen_q + window_right] of
// [0, seqlen_k) (-1 = unbounded side), within its diagonal's chunk when chunk > 0. n0: the key block's
// first key; kBlockN keys per block.
template <int kBlockM, int kBlockN>
HOPATTN_HOST_DEVICE constexpr QBlockRange q_blocks_seeing(int n0, int seqlen_q, int seqlen_k, int window_left,
                                                          int window_right, int chunk) {
  const int offset = seqlen_k - seqlen_q;
  // The first row whose last visible key reaches the block, and the last row whose first visible key
  // is still inside it (a row's first visible key is never past seqlen_k - 1). Under chunks: the first
  // row whose diagonal lies in n0's chunk, and the last whose diagonal lies in the chunk of the
  // block's last key.
  int first_row = window_right >= 0 ? n0 - offset - window_right : 0;
  if (chunk > 0 && chunk_first_key(n0, chunk) - offset > first_row) first_row = chunk_first_key(n0, chunk) - offset;
  if (first_row < 0) first_row = 0;
  int last_row = window_left >= 0 ? n0 + kBlockN - 1 - offset + window_left : seqlen_q - 1;
  if (chunk > 0) {
    const int chunk_last_row = chunk_first_key(n0 + kBlockN - 1, chunk) + chunk - 1 - offset;
    if (chunk_last_row < last_row) last_row = chunk_last_row;
  }
  if (last_row > seqlen_q - 1) last_row = seqlen_q - 1;
  if (last_row < first_row) return QBlockRange{0, 0};
  return QBlockRange{first_row / kBlockM, last_row / kBlockM + 1};
}

struct KeyBlockRange {
  int begin;  // first key block whose q_blocks_seeing range holds the q block
  int end;    // one past the last; begin == end when none does
};

// Integer division rounding toward -infinity (the bounds below have negative numerators).
HOPATTN_HOST_DEVICE constexpr int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The inverse of q_blocks_seeing: the key blocks (of ceil(seqlen_k / kBlockN)) whose range holds q
// block m, for m < ceil(seqlen_q / kBlockM). With a(n0) and b(n0) its first and last row before the
// clamps (a <= b, both non-decreasing in n0), q_blocks_seeing(n0) holds m exactly when
// b >= m * kBlockM and a <= last_row(m) (the block's last row that exists): contiguous key blocks.
// Under chunks b >= m * kBlockM needs the block to reach the chunk of the q block's first diagonal,
// and a <= last_row(m) the block to start within the chunk of its last.
template <int kBlockM, int kBlockN>
HOPATTN_HOST_DEVICE constexpr KeyBlockRange key_blocks_seeing(int m, int seqlen_q, int seqlen_k, int window_left,
                                                              int window_right, int chunk) {
  const int offset = seqlen_k - seqlen_q;
  const int last_row = ((m + 1) * kBlockM < seqlen_q ? (m + 1) * kBlockM : seqlen_q) - 1;
  int begin = window_left >= 0 ? -floor_div(-(m * kBlockM + offset - window_left - kBlockN + 1), kBlockN) : 0;
  if (chunk > 0) {
    const int chunk_begin = -floor_div(-(chunk_first_key(m * kBlockM + offset, chunk) - kBlockN + 1), kBlockN);
    if (chunk_begin > begin) begin = chunk_begin;
  }
  if (begin < 0) begin = 0;
  int end = (seqlen_k + kBlockN - 1) / kBlockN;
  if (window_right >= 0) {
    const int last = floor_div(last_row + offset + window_right, kBlockN) + 1;
    if (last < end) end = last;
  }
  if (chunk > 0) {
    const int last = floor_div(chunk_first_key(last_row + offset, chunk) + chunk - 1, kBlockN) + 1;
    if (last < end) end = last;
  }
  if (end < begin) end = begin;
  return KeyBlockRange{begin, end};
}

// How many key blocks before block n (after it) add into q block m's dQ: the deterministic backward's
// place of block n in the fixed order of those reductions, increasing (decreasing) key-block order
// (dq_order.cuh).
template <int kBlockM, int kBlockN>
HOPATTN_HOST_DEVICE constexpr int key_blocks_before_seeing(int n, int m, int seqlen_q, int seqlen_k, int window_left,
                                                           int window_right, int chunk) {
  const KeyBlockRange r = key_blocks_seeing<kBlockM, kBlockN>(m, seqlen_q, seqlen_k, window_left, window_right, chunk);
  const int before = (n < r.end ? n : r.end) - r.begin;
  return before > 0 ? before : 0;
}

template <int kBlockM, int kBlockN>
HOPATTN_HOST_DEVICE constexpr int key_blocks_after_seeing(int n, int m, int seqlen_q, int seqlen_k, int window_left,
                                                          int window_right, int chunk) {
  const KeyBlockRange r = key_blocks_seeing<kBlockM, kBlockN>(m, seqlen_q, seqlen_k, window_left, window_right, chunk);
  const int after = r.end - (n + 1 > r.begin ? n + 1 : r.begin);
  return after > 0 ? after : 0;
}

// Whether some (row, key) of q block m0 .. m0 + kBlockM - 1 and key block n0 .. n0 + kBlockN - 1 is not
// visible: keys past seqlen_k, or the window's or the chunks' edges crossing the block pair.
template <int kBlockM, int kBlockN>
HOPATTN_HOST_DEVICE constexpr bool block_pair_needs_mask(int m0, int n0, int seqlen_q, int seqlen_k, int window_left,
                                                         int window_right, int chunk) {
  const int offset = seqlen_k - seqlen_q;
  if (n0 + kBlockN > seqlen_k) return true;
  if (window_right >= 0 && n0 + kBlockN - 1 > m0 + offset + window_right) return true;
  if (window_left >= 0 && n0 < m0 + kBlockM - 1 + offset - window_left) return true;
  if (chunk <= 0) return false;
  return n0 + kBlockN > chunk_first_key(m0 + offset, chunk) + chunk ||
         n0 < chunk_first_key(m0 + kBlockM - 1 + offset, chunk);
}

}  // namespace hopattn::sm90
