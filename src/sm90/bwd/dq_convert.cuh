// The backward's last kernel: dq = softmax_scale * dq_accum, from the float32 workspace the main
// kernel's dQ writers added their blocks into, to q's dtype in dq's layout. The workspace holds each
// (batch, head, 64-row q block) as one block of kBlockM x kHeadDim floats in the main kernel's
// accumulator order (BwdTraits::kDqTileFloats): per piece p of BwdTraits::kDqPieceCols columns, 8-column
// block j and thread t, the four floats of rows r, r + 8 (r = 16 (t / 32) + (t % 32) / 4) at columns
// c, c + 1 (c = p * kDqPieceCols + 8 j + 2 (t % 4)), as the m64 accumulator fragment lays them out.
#pragma once

#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/sequence.cuh"
#include "sm90/bwd/traits.cuh"
#include "sm90/tile/fragment.hpp"

namespace hopattn::sm90 {

constexpr int kDqConvertThreads = 256;

// One thread per 4 floats of a block (two column pairs, rows r and r + 8); blockIdx.x: q block,
// blockIdx.y: head, blockIdx.z: batch entry or sequence. Writes exactly the sequence's rows; the blocks
// of a variable-length batch past its rows (the grid has the longest sequence's) leave at once.
template <class Traits>
__global__ void __launch_bounds__(kDqConvertThreads) backward_dq_convert_kernel(const BwdParams p) {
  constexpr int kHeadDim = Traits::kHeadDim, kBlockM = Traits::kBlockM;
  constexpr int kWarpgroupThreads = Traits::kWarpgroupThreads;
  constexpr int kPieceFloats = kBlockM * Traits::kDqPieceCols;
  constexpr int kQuads = Traits::kDqTileFloats / 4;
  const int head = blockIdx.y, m0 = blockIdx.x * kBlockM;
  const BwdSequence seq = backward_sequence<kBlockM>(p, blockIdx.z);
  const int seqlen_q = seq.bounds.seqlen_q;
  if (m0 >= seqlen_q) return;
  const float* block = p.dq_accum + workspace_row<kBlockM>(p, seq, head, m0) * kHeadDim;
  for (int quad = threadIdx.x; quad < kQuads; quad += kDqConvertThreads) {
    const int offset = 4 * quad;
    const int piece = offset / kPieceFloats;
    const int j = offset % kPieceFloats / (4 * kWarpgroupThreads);
    const int t = quad % kWarpgroupThreads;
    const int row = m0 + accumulator_row(t, 0);
    const int col = piece * Traits::kDqPieceCols + accumulator_col(t, 4 * j);
    const float4 sum = *reinterpret_cast<const float4*>(block + offset);
    std::uint16_t* dq = static_cast<std::uint16_t*>(p.dq) + seq.rows.q_batch * p.dq_batch_stride +
                        std::int64_t(seq.rows.q_row0) * p.dq_row_stride + head * p.dq_head_stride + col;
    if (col >= p.head_dim) continue;  // a column the next wider kernel added (backward.cu)
    if (row < seqlen_q) {
      *reinterpret_cast<std::uint32_t*>(dq + row * p.dq_row_stride) =
          pack_pair<Traits::kIsBf16>(sum.x * p.softmax_scale, sum.y * p.softmax_scale);
    }
    if (row + 8 < seqlen_q) {
      *reinterpret_cast<std::uint32_t*>(dq + (row + 8) * p.dq_row_stride) =
          pack_pair<Traits::kIsBf16>(sum.z * p.softmax_scale, sum.w * p.softmax_scale);
    }
  }
}

}  // namespace hopattn::sm90
