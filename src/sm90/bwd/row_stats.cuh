// The backward's first kernel: per q row, the two statistics the main kernel reads for each q block
// it visits, written to a float32 workspace in whole 64-row blocks (BwdParams::row_stats: each block's
// lse values, then its D values, so that the main kernel loads a step's with one TMA box and no bounds
// checks):
//   dout_dot_out = sum_c dout_c out_c (D_i: dS = P (dP - D), since sum_j P_ij dP_ij = dout_i . out_i);
//   lse_log2 = lse * log2(e), the exponent's reference for P = exp2(score * scale - lse_log2).
// Padding rows (past the rows the sequence uses, whose out, dout and lse are not read: past seqused_q
// they may hold anything) get D = 0, and they and rows that saw no key (lse -inf) lse_log2 = +inf, so
// their P is exactly 0.
// The same block zeroes the block's dQ workspace (64 x kHeadDim floats) and, in the deterministic
// kernels, its dq_order counters: the main kernel adds into them next. That replaced a memset of the
// whole workspace, a pass of its own over as many bytes as out and dout.
//
// One CTA per (64-row block, q head) (head_block_of_cta) and batch entry or sequence (blockIdx.y); the
// blocks past the rows their sequence uses leave at once (the grid has the longest sequence's), their
// dQ workspace as it was: no step adds into it, and dq_convert.cuh does not read it. Rows are read
// in 16-byte chunks, a group of lanes per row: one warp per row with 4-byte reads ran at 28% of the
// H200's DRAM rate at d 64 (perf-notes v113).
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/sequence.cuh"

namespace hopattn::sm90 {

constexpr int kRowStatsBlock = 64;  // rows per block: BwdTraits::kBlockM
constexpr int kRowStatsThreads = 256;
// At least 3 CTAs an SM (85 registers a thread), so that enough rows' loads are in flight: at d 256 a
// CTA holding all its loads took 151 registers, one CTA an SM; at 4 (64 registers) d 256 spilled.
constexpr int kRowStatsCtasPerSm = 3;

// The dot product of 8 elements of out and dout held as two 16-byte chunks.
template <typename Element>
__device__ __forceinline__ float chunk_dot(const uint4& a, const uint4& b) {
  const std::uint32_t x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 u = unpack_pair<Element>(x[i]), v = unpack_pair<Element>(y[i]);
    dot = fmaf(u.x, v.x, fmaf(u.y, v.y, dot));
  }
  return dot;
}

// kSequsedQ: the call may give seqused_q (BwdTraits::kChunksAndSequsedQ).
template <typename Element, int kHeadDim, int kConsumerWarpgroups, bool kSequsedQ>
__global__ void __launch_bounds__(kRowStatsThreads, kRowStatsCtasPerSm) backward_row_stats_kernel(const BwdParams p) {
  // A row's 16-byte chunks, read by a group of 8 consecutive lanes (one 128-byte segment of the row per
  // load), kChunksPerLane each; a pass covers 32 rows.
  constexpr int kLanes = 8;
  constexpr int kChunksPerLane = kHeadDim / 8 / kLanes;
  static_assert(kHeadDim % (8 * kLanes) == 0, "whole 128-byte segments per row");
  constexpr int kRowsPerPass = kRowStatsThreads / kLanes;
  constexpr int kPasses = kRowStatsBlock / kRowsPerPass;
  const HeadBlock cta = head_block_of_cta(p);
  const int head = cta.head, m0 = cta.m * kRowStatsBlock;
  const BwdSequence seq = backward_sequence<kRowStatsBlock, kSequsedQ>(p, blockIdx.y);
  const int seqlen_q = seq.bounds.seqlen_q;
  if (m0 >= seqlen_q) return;
  const int thread = threadIdx.x, lane_in_row = thread % kLanes;
  const int batch = seq.rows.q_batch;
  const std::int64_t row0 = seq.rows.q_row0 + m0;
  const Element* out = static_cast<const Element*>(p.out) + batch * p.out_batch_stride + row0 * p.out_row_stride +
                       head * p.out_head_stride;
  const Element* dout = static_cast<const Element*>(p.dout) + batch * p.dout_batch_stride +
                        row0 * p.dout_row_stride + head * p.dout_head_stride;
  const std::int64_t block = workspace_block(p, seq, head, cta.m);
  float* stats = p.row_stats + block * 2 * kRowStatsBlock;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int row = pass * kRowsPerPass + thread / kLanes;
    uint4 a[kChunksPerLane], b[kChunksPerLane];
#pragma unroll
    for (int c = 0; c < kChunksPerLane; ++c) {
      // Columns past v's head dim (one the next wider kernel runs) are not in memory; it is a multiple
      // of 8, so a chunk is wholly in or out.
      const int col = (c * kLanes + lane_in_row) * 8;
      a[c] = b[c] = make_uint4(0, 0, 0, 0);
      if (col < p.head_dim_v && m0 + row < seqlen_q) {
        a[c] = __ldg(reinterpret_cast<const uint4*>(out + row * p.out_row_stride + col));
        b[c] = __ldg(reinterpret_cast<const uint4*>(dout + row * p.dout_row_stride + col));
      }
    }
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunksPerLane; ++c) dot += chunk_dot<Element>(a[c], b[c]);
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane_in_row == 0) stats[kRowStatsBlock + row] = dot;
  }
  if (thread < kRowStatsBlock) {
    float lse_log2 = INFINITY;
    if (m0 + thread < seqlen_q) {
      const float lse = p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + (row0 + thread) * p.lse_row_stride];
      if (lse != -INFINITY) lse_log2 = lse * 1.4426950408889634f;
    }
    stats[thread] = lse_log2;
  }

  float4* dq = reinterpret_cast<float4*>(p.dq_accum + block * kRowStatsBlock * kHeadDim);
#pragma unroll
  for (int i = thread; i < kRowStatsBlock * kHeadDim / 4; i += kRowStatsThreads) {
    dq[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (p.dq_order != nullptr && thread < kConsumerWarpgroups) p.dq_order[block * kConsumerWarpgroups + thread] = 0;
}

}  // namespace hopattn::sm90
