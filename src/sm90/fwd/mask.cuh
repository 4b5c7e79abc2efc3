// Masking of one S block: keys past seqlen_k (the zero-filled tail of the last K tile) and keys
// outside the bottom-right-aligned window (causal is the window (-1, 0)). Only blocks that straddle
// a boundary are masked (masked_blocks.hpp); the consumer skips this for interior blocks.
#pragma once

#include <cmath>

#include "sm90/fwd/masked_blocks.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/tile/fragment.hpp"

namespace hopattn::sm90 {

// row0: sequence row of this warpgroup's fragment row 0; n0: first key of the block. Bounds: FwdParams
// or a variable-length tile's SequenceBounds (masked_blocks.hpp).
template <int kSRegisters, class Bounds>
__device__ __forceinline__ void apply_mask(float (&s)[kSRegisters], int thread_in_warpgroup, int row0, int n0,
                                           const Bounds& p) {
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
}

// The same where K's rows were loaded permuted: key_of(thread, index) is the key of the block that
// accumulator `index` of `thread` holds (the FP8 kernel's, fwd_fp8/fp8_layout.hpp). The loop body is
// apply_mask's, repeated rather than shared through a helper: sharing it changed ptxas's predicate
// code in the masked blocks of every kernel (2026-12-01), and the kernels stay as measured.
template <int kSRegisters, class KeyOfAccumulator>
__device__ __forceinline__ void apply_mask_permuted(float (&s)[kSRegisters], int thread_in_warpgroup, int row0,
                                                    int n0, const FwdParams& p, KeyOfAccumulator key_of) {
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
}

}  // namespace hopattn::sm90
