// The backward's first kernel: per q row, the two statistics the main kernel reads for each q block
// it visits, written to a float32 workspace in whole 64-row blocks (BwdParams::row_stats: each block's
// lse values, then its D values, so that the main kernel loads a step's with one TMA box and no bounds
// checks):
//   dout_dot_out = sum_c dout_c out_c (D_i: dS = P (dP - D), since sum_j P_ij dP_ij = dout_i . out_i);
//   lse_log2 = lse * log2(e), the exponent's reference for P = exp2(score * scale - lse_log2).
// Padding rows and rows that saw no key (lse -inf) get lse_log2 = +inf, so their P is exactly 0.
// One block of 8 rows per (rows, q head, batch entry or sequence); the blocks past their sequence's
// padded rows leave at once (the grid has the longest sequence's rows).
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/bwd/params.hpp"
#include "sm90/bwd/sequence.cuh"

namespace hopattn::sm90 {

constexpr int kRowStatsWarps = 8;  // one warp per row
constexpr int kRowStatsBlock = 64;  // rows per block: BwdTraits::kBlockM

template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kRowStatsWarps * 32) backward_row_stats_kernel(const BwdParams p) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowStatsWarps + threadIdx.x / 32;
  const int head = blockIdx.y;
  const BwdSequence seq = backward_sequence<kRowStatsBlock>(p, blockIdx.z);
  const int seqlen_q = seq.bounds.seqlen_q;
  const int padded_rows = (seqlen_q + kRowStatsBlock - 1) / kRowStatsBlock * kRowStatsBlock;
  if (row >= padded_rows) return;
  float dot = 0.0f;
  float lse_log2 = INFINITY;
  if (row < seqlen_q) {
    const int batch = seq.rows.q_batch;
    const std::int64_t q_row = seq.rows.q_row0 + row;
    const Element* out = static_cast<const Element*>(p.out) + batch * p.out_batch_stride + q_row * p.out_row_stride +
                         head * p.out_head_stride;
    const Element* dout = static_cast<const Element*>(p.dout) + batch * p.dout_batch_stride +
                          q_row * p.dout_row_stride + head * p.dout_head_stride;
#pragma unroll
    for (int c = 2 * lane; c < kHeadDim; c += 64) {
      if (c < p.head_dim) dot += float(out[c]) * float(dout[c]) + float(out[c + 1]) * float(dout[c + 1]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float lse = p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + q_row * p.lse_row_stride];
    if (lse != -INFINITY) lse_log2 = lse * 1.4426950408889634f;
  }
  if (lane == 0) {
    float* block = p.row_stats +
                   std::int64_t(workspace_block(p, seq, head, row / kRowStatsBlock)) * 2 * kRowStatsBlock;
    block[row % kRowStatsBlock] = lse_log2;
    block[kRowStatsBlock + row % kRowStatsBlock] = dot;
  }
}

}  // namespace hopattn::sm90
