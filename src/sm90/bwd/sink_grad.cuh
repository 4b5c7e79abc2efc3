// The gradient of the learnable sinks (BwdArgs::dsink), after the row statistics: a sink is a key
// with score sink_h and value 0, so dsink_h = sum_i P_i,sink (0 - D_i) = -sum_i exp(sink_h - lse_i) D_i
// over every row of q head h. It reads the row_stats workspace (row_stats.cuh: lse * log2(e), +inf for
// padding rows, and D), two floats a row.
//
// Two kernels, so that every SM shares a head's rows (one CTA walking a head's 16k rows alone took
// ~40 us, H200): kSinkGradParts CTAs per head each sum a fixed share of its row blocks into a partial,
// then one warp per head adds the partials. Every sum runs in a fixed order, so dsink is reproducible.
#pragma once

#include <cstdint>

#include "sm90/bwd/params.hpp"
#include "sm90/bwd/sequence.cuh"

namespace hopattn::sm90 {

constexpr int kSinkGradParts = 64;  // partial sums per q head

// CTA (part, head), one thread per row of a block: the row blocks numbered g = 0, 1, ... over the
// sequences in order with g % kSinkGradParts == part. kBlockRows: the row statistics' block
// (kRowStatsBlock); the kernels are templates so that each translation unit that launches them may
// define them. kSequsedQ: the call may give seqused_q (BwdTraits::kChunksAndSequsedQ).
template <int kBlockRows, bool kSequsedQ>
__global__ void __launch_bounds__(kBlockRows) backward_sink_grad_partial_kernel(const BwdParams p) {
  __shared__ float partial[kBlockRows];
  const int part = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y);
  const int thread = static_cast<int>(threadIdx.x);
  const float sink_log2 = p.sink[head] * 1.4426950408889634f;
  float sum = 0.0f;
  int first_block = 0;  // g of the sequence's first block
  for (int batch = 0; batch < p.batch; ++batch) {
    const BwdSequence seq = backward_sequence<kBlockRows, kSequsedQ>(p, batch);
    const int blocks = (seq.bounds.seqlen_q + kBlockRows - 1) / kBlockRows;
    for (int m = ((part - first_block) % kSinkGradParts + kSinkGradParts) % kSinkGradParts; m < blocks;
         m += kSinkGradParts) {
      const float* block = p.row_stats + std::int64_t(workspace_block(p, seq, head, m)) * 2 * kBlockRows;
      // exp2(-inf) = 0 for padding rows (lse_log2 +inf) and for a -inf sink: no NaN either way.
      sum += exp2f(sink_log2 - block[thread]) * block[kBlockRows + thread];
    }
    first_block += blocks;
  }
  partial[thread] = sum;
  __syncthreads();
#pragma unroll
  for (int width = kBlockRows / 2; width > 0; width /= 2) {
    if (thread < width) partial[thread] += partial[thread + width];
    __syncthreads();
  }
  if (thread == 0) p.sink_partials[head * kSinkGradParts + part] = partial[0];
}

// One warp per q head: dsink = -(the sum of its partials).
template <int kBlockRows>
__global__ void __launch_bounds__(32) backward_sink_grad_kernel(const BwdParams p) {
  const int head = static_cast<int>(blockIdx.x), lane = static_cast<int>(threadIdx.x);
  float sum = 0.0f;
  for (int part = lane; part < kSinkGradParts; part += 32) sum += p.sink_partials[head * kSinkGradParts + part];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) p.dsink[head] = -sum;
}

}  // namespace hopattn::sm90
