// Which K blocks of a CTA tile need the per-element mask, per block or once per tile.
// A block needs it when it holds a key that some row of the tile [m0, m0 + kBlockM) must not see:
// keys past seqlen_k (the zero-filled tail of the last K tile), right of the bottom-right-aligned
// window's right edge (causal: window_right 0) or of the first row's chunk, or left of the window's
// left edge or of the last row's chunk. The first three hold for every block from some index up, the
// others for every block below some index, so two bounds say it all.
// Host and device, so tests/cpu/test_masked_blocks.cpp can check the bounds against the definition.
// Bounds: FwdParams (a dense batch) or a variable-length tile's SequenceBounds (sequence.cuh): the
// fields seqlen_q, seqlen_k, window_left, window_right and attention_chunk; chunk: FwdParams's
// chunk_divisor (its multiply-high division: a 32-bit division here spilled the d 64 variable-length
// kernels).
#pragma once

#include "sm90/fwd/attention_chunk.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// The definition, per block: does [n0, n0 + kBlockN) hold a key some row of [m0, m0 + kBlockM) must
// not see? A row's last visible key grows with the row and its first too, so the first row's end and
// the last row's beginning decide. First without chunks (what kernels without
// Traits::kLeanAddressing test per block), then with them.
template <int kBlockM, int kBlockN, class Bounds>
HOPATTN_HOST_DEVICE constexpr bool block_needs_window_mask(const Bounds& seq, int m0, int n0) {
  if (n0 + kBlockN > seq.seqlen_k) return true;
  const int diagonal0 = m0 + seq.seqlen_k - seq.seqlen_q;
  if (seq.window_right >= 0 && n0 + kBlockN - 1 > diagonal0 + seq.window_right) return true;
  return seq.window_left >= 0 && n0 < diagonal0 + kBlockM - 1 - seq.window_left;
}

template <int kBlockM, int kBlockN, class Bounds>
HOPATTN_HOST_DEVICE constexpr bool block_needs_mask(const Bounds& seq, const ChunkDivisor& chunk, int m0, int n0) {
  if (block_needs_window_mask<kBlockM, kBlockN>(seq, m0, n0)) return true;
  if (seq.attention_chunk <= 0) return false;
  const int diagonal0 = m0 + seq.seqlen_k - seq.seqlen_q;
  return n0 + kBlockN > chunk.first_key(diagonal0) + chunk.size() || n0 < chunk.first_key(diagonal0 + kBlockM - 1);
}

struct MaskedBlocks {
  int top_begin;   // blocks n >= top_begin need the mask
  int bottom_end;  // blocks n < bottom_end need the mask
  HOPATTN_HOST_DEVICE constexpr bool needs(int n) const { return n >= top_begin || n < bottom_end; }
};

// The smallest block index n >= 0 with n * kBlockN >= x.
template <int kBlockN>
HOPATTN_HOST_DEVICE constexpr int first_block_at_or_after(int x) {
  return x <= 0 ? 0 : (x + kBlockN - 1) / kBlockN;
}

// kChunks: the kernel takes chunks (FwdTraits / Fp8FwdTraits::kChunksAndSequsedQ); without, the chunk
// tests here and below compile away, whatever seq.attention_chunk holds.
template <int kBlockM, int kBlockN, bool kChunks, class Bounds>
HOPATTN_HOST_DEVICE constexpr MaskedBlocks masked_blocks(const Bounds& seq, const ChunkDivisor& chunk, int m0) {
  const int diagonal0 = m0 + seq.seqlen_k - seq.seqlen_q;  // key on the first row's diagonal
  // n0 + kBlockN > seqlen_k
  int top = first_block_at_or_after<kBlockN>(seq.seqlen_k - kBlockN + 1);
  if (seq.window_right >= 0) {
    // n0 + kBlockN - 1 > diagonal0 + window_right: the last key lies right of the first row's window
    const int right = first_block_at_or_after<kBlockN>(diagonal0 + seq.window_right - kBlockN + 2);
    top = right < top ? right : top;
  }
  // n0 < diagonal0 + kBlockM - 1 - window_left: the first key lies left of the last row's window
  int bottom =
      seq.window_left >= 0 ? first_block_at_or_after<kBlockN>(diagonal0 + kBlockM - 1 - seq.window_left) : 0;
  if (kChunks && seq.attention_chunk > 0) {
    // The last key past the first row's chunk, or the first key before the last row's chunk.
    const int chunk_end = chunk.first_key(diagonal0) + chunk.size();
    const int right = first_block_at_or_after<kBlockN>(chunk_end - kBlockN + 1);
    top = right < top ? right : top;
    const int left = first_block_at_or_after<kBlockN>(chunk.first_key(diagonal0 + kBlockM - 1));
    bottom = left > bottom ? left : bottom;
  }
  return {top, bottom};
}

// K/V blocks [begin, end) that rows [m0, m0 + kBlockM) can see (window, causal and chunk limits are
// bottom-right aligned: row i's diagonal is key i + seqlen_k - seqlen_q); tests/cpu/test_masked_blocks.cpp
// checks it against the rows' visible keys. A packed GQA tile (packed_gqa.cuh) has fewer query rows
// than kBlockM: the range of kBlockM rows from its first is a superset, which the per-element mask
// makes exact.
template <int kBlockM, int kBlockN, bool kChunks, class Bounds>
HOPATTN_HOST_DEVICE inline void kv_block_range_from_row(const Bounds& p, const ChunkDivisor& chunk, int m0, int* begin,
                                                        int* end) {
  const int n_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
  const int diagonal0 = m0 + p.seqlen_k - p.seqlen_q;  // diagonal key of the first row
  *begin = 0;
  *end = n_blocks;
  if (p.window_right >= 0) {
    const int last_visible = diagonal0 + kBlockM - 1 + p.window_right;
    *end = last_visible < 0 ? 0 : (last_visible / kBlockN + 1 < n_blocks ? last_visible / kBlockN + 1 : n_blocks);
  }
  if (p.window_left >= 0) {
    const int first_visible = diagonal0 - p.window_left;
    *begin = first_visible <= 0 ? 0 : (first_visible / kBlockN < *end ? first_visible / kBlockN : *end);
  }
  if (kChunks && p.attention_chunk > 0) {
    // The last row sees no key past its chunk, the first row none before its own.
    const int last_visible = chunk.first_key(diagonal0 + kBlockM - 1) + chunk.size() - 1;
    if (last_visible < 0) *end = 0;
    else if (last_visible / kBlockN + 1 < *end) *end = last_visible / kBlockN + 1;
    const int first_visible = chunk.first_key(diagonal0);
    if (first_visible > 0 && first_visible / kBlockN > *begin) *begin = first_visible / kBlockN;
    if (*begin > *end) *begin = *end;
  }
}

// What a kernel tests per K block n: the tile's bounds (kPerTileBounds: Traits::kLeanAddressing, and
// every kernel that takes chunks, whose chunk bounds tested block by block spilled the d 64
// variable-length kernel's registers, 2026-12-05) or the window's definition.
template <int kBlockM, int kBlockN, bool kPerTileBounds, class Bounds>
HOPATTN_HOST_DEVICE constexpr bool block_needs_mask(const MaskedBlocks& masked, const Bounds& seq, int m0, int n) {
  if constexpr (kPerTileBounds) return masked.needs(n);
  else return block_needs_window_mask<kBlockM, kBlockN>(seq, m0, n * kBlockN);
}

}  // namespace hopattn::sm90
