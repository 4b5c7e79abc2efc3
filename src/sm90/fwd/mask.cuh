// Masking of one S block: keys past seqlen_k (the zero-filled tail of the last K tile) and keys
// outside the bottom-right-aligned window (causal is the window (-1, 0)) or the diagonal's chunk. Only
// blocks that straddle a boundary are masked (masked_blocks.hpp); the consumer skips this for interior
// blocks.
#pragma once

#include <cmath>

#include "sm90/fwd/attention_chunk.hpp"
#include "sm90/fwd/masked_blocks.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/tile/fragment.hpp"

namespace hopattn::sm90 {

// Chunked attention's part of a masked block (launches with attention_chunk > 0): accumulator i, of
// diagonal diagonal_of(i) and key n0 + block_key(i), stays only where the key lies in the diagonal's
// chunk, first_key <= key < first_key + chunk. A pass of its own after the window's, one row half at a
// time (accumulators 4j, 4j + 1 on one row, 4j + 2, 4j + 3 on the row 8 below), from an opaque
// n0 - first_key: folded into the window's bounds, or sharing their per-element keys, the chunk bounds
// spilled the d 256 and d 64 variable-length kernels' registers (2026-12-05).
template <int kSRegisters, class DiagonalOf, class BlockKey>
__device__ __forceinline__ void apply_chunk_mask(float (&s)[kSRegisters], const ChunkDivisor& chunk, int n0,
                                                 DiagonalOf diagonal_of, BlockKey block_key) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int to_block = opaque(n0 - chunk.first_key(diagonal_of(2 * half)));
#pragma unroll
    for (int i = 2 * half; i < kSRegisters; i += (i % 2 == 0) ? 1 : 3) {
      if (static_cast<unsigned>(to_block + block_key(i)) >= static_cast<unsigned>(chunk.size())) s[i] = -INFINITY;
    }
  }
}

// row0: sequence row of this warpgroup's fragment row 0; n0: first key of the block. Bounds: FwdParams
// or a variable-length tile's SequenceBounds (masked_blocks.hpp); chunk: FwdParams::chunk_divisor;
// kChunks: the kernel takes chunks (masked_blocks.hpp).
template <bool kChunks, int kSRegisters, class Bounds>
__device__ __forceinline__ void apply_mask(float (&s)[kSRegisters], int thread_in_warpgroup, int row0, int n0,
                                           const Bounds& p, const ChunkDivisor& chunk) {
#pragma unroll
  for (int i = 0; i < kSRegisters; ++i) {
    const int row = row0 + accumulator_row(thread_in_warpgroup, i);
    const int col = n0 + accumulator_col(thread_in_warpgroup, i);
    const int diagonal = row + p.seqlen_k - p.seqlen_q;
    int key_end = p.seqlen_k;
    if (p.window_right >= 0) key_end = min(key_end, diagonal + p.window_right + 1);
    const int key_begin = p.window_left >= 0 ? diagonal - p.window_left : 0;
    if (col >= key_end || col < key_begin) s[i] = -INFINITY;
  }
  if (kChunks && p.attention_chunk > 0) {
    apply_chunk_mask(
        s, chunk, n0, [&](int i) { return row0 + accumulator_row(thread_in_warpgroup, i) + p.seqlen_k - p.seqlen_q; },
        [&](int i) { return accumulator_col(thread_in_warpgroup, i); });
  }
}

// The same where K's rows were loaded permuted: key_of(thread, index) is the key of the block that
// accumulator `index` of `thread` holds (the FP8 kernel's, fwd_fp8/fp8_layout.hpp). The loop body is
// apply_mask's, repeated rather than shared through a helper: sharing it changed ptxas's predicate
// code in the masked blocks of every kernel (2026-12-01), and the kernels stay as measured.
template <bool kChunks, int kSRegisters, class Bounds, class KeyOfAccumulator>
__device__ __forceinline__ void apply_mask_permuted(float (&s)[kSRegisters], int thread_in_warpgroup, int row0, int n0,
                                                    const Bounds& p, const ChunkDivisor& chunk,
                                                    KeyOfAccumulator key_of) {
#pragma unroll
  for (int i = 0; i < kSRegisters; ++i) {
    const int row = row0 + accumulator_row(thread_in_warpgroup, i);
    const int col = n0 + key_of(thread_in_warpgroup, i);
    const int diagonal = row + p.seqlen_k - p.seqlen_q;
    int key_end = p.seqlen_k;
    if (p.window_right >= 0) key_end = min(key_end, diagonal + p.window_right + 1);
    const int key_begin = p.window_left >= 0 ? diagonal - p.window_left : 0;
    if (col >= key_end || col < key_begin) s[i] = -INFINITY;
  }
  if (kChunks && p.attention_chunk > 0) {
    apply_chunk_mask(
        s, chunk, n0, [&](int i) { return row0 + accumulator_row(thread_in_warpgroup, i) + p.seqlen_k - p.seqlen_q; },
        [&](int i) { return key_of(thread_in_warpgroup, i); });
  }
}

}  // namespace hopattn::sm90
