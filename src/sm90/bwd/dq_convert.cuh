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

// One CTA per (q block, q head) (head_block_of_cta) and batch entry or sequence (blockIdx.y), in passes
// of 64 columns (64 x 64 floats, contiguous in the workspace): the pass's floats read in order (each warp
// 512 contiguous bytes a load), put in place through shared memory, and written as whole 128-byte rows
// of dq. Straight from the accumulator order, a warp's 16-byte stores hit 32 rows and its loads half
// sectors: 41-46% of the DRAM rate (perf-notes v113). Writes exactly the sequence's stored rows; the
// blocks of a variable-length batch past them (the grid has the longest sequence's) leave at once. Rows
// past those it uses (seqused_q; Traits::kChunksAndSequsedQ) get 0 by a select: the workspace blocks
// wholly past them are not read (row_stats.cuh left them as they were, NaN maybe), and a product with 0
// would keep a NaN.
template <class Traits>
__global__ void __launch_bounds__(kDqConvertThreads) backward_dq_convert_kernel(const BwdParams p) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim, kBlockM = Traits::kBlockM;
  constexpr int kPieceCols = Traits::kDqPieceCols, kPieceQuads = kBlockM * kPieceCols / 4;
  constexpr int kPassCols = 64;
  static_assert(kHeadDim % kPassCols == 0 && kPassCols % kPieceCols == 0, "passes of whole pieces");
  constexpr int kPassQuads = kBlockM * kPassCols / 4;
  constexpr int kQuadsPerThread = kPassQuads / kDqConvertThreads;
  // Rows padded by 8 floats: the float2 stores of a half-warp (4 rows x 8 columns) then hit all 32 banks.
  constexpr int kPitch = kPassCols + 8;
  constexpr int kChunksPerRow = kPassCols / 8;  // 16 bytes of dq each
  constexpr int kChunksPerThread = kBlockM * kChunksPerRow / kDqConvertThreads;
  __shared__ __align__(16) float tile[kBlockM * kPitch];

  const HeadBlock cta = head_block_of_cta(p);
  const int head = cta.head, m0 = cta.m * kBlockM;
  const BwdSequence seq = backward_sequence<kBlockM, Traits::kChunksAndSequsedQ>(p, blockIdx.y);
  const int q_rows = seq.q_rows, seqlen_q = seq.bounds.seqlen_q;
  if (m0 >= q_rows) return;
  const bool accumulated = m0 < seqlen_q;  // row_stats.cuh zeroed the block and the main kernel added into it
  const float4* block =
      reinterpret_cast<const float4*>(p.dq_accum + workspace_row<kBlockM>(p, seq, head, m0) * kHeadDim);
  Element* dq = static_cast<Element*>(p.dq) + seq.rows.q_batch * p.dq_batch_stride +
                std::int64_t(seq.rows.q_row0 + m0) * p.dq_row_stride + head * p.dq_head_stride;
  const int thread = threadIdx.x;
#pragma unroll
  for (int pass = 0; pass < kHeadDim / kPassCols; ++pass) {
    if (pass > 0) __syncthreads();  // the previous pass's reads of the tile are done
    float4 quads[kQuadsPerThread];
#pragma unroll
    for (int k = 0; k < kQuadsPerThread; ++k) {
      const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      quads[k] = accumulated ? block[pass * kPassQuads + k * kDqConvertThreads + thread] : zero;
    }
#pragma unroll
    for (int k = 0; k < kQuadsPerThread; ++k) {
      // Quad i of the pass: piece i / kPieceQuads, 8-column block j, accumulator thread t (rows r and r + 8).
      const int i = k * kDqConvertThreads + thread;
      const int j = i % kPieceQuads / Traits::kWarpgroupThreads, t = i % Traits::kWarpgroupThreads;
      const int row = accumulator_row(t, 0), col = i / kPieceQuads * kPieceCols + accumulator_col(t, 4 * j);
      *reinterpret_cast<float2*>(&tile[row * kPitch + col]) = make_float2(quads[k].x, quads[k].y);
      *reinterpret_cast<float2*>(&tile[(row + 8) * kPitch + col]) = make_float2(quads[k].z, quads[k].w);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kChunksPerThread; ++k) {
      const int u = k * kDqConvertThreads + thread;
      const int row = u / kChunksPerRow, col = u % kChunksPerRow * 8;
      // Columns past head_dim: those the next wider kernel added (backward.cu).
      if (m0 + row >= q_rows || pass * kPassCols + col >= p.head_dim) continue;
      const float4 lo = *reinterpret_cast<const float4*>(&tile[row * kPitch + col]);
      const float4 hi = *reinterpret_cast<const float4*>(&tile[row * kPitch + col + 4]);
      const float scale = p.softmax_scale;
      const uint4 value = make_uint4(pack_pair<Traits::kIsBf16>(lo.x * scale, lo.y * scale),
                                     pack_pair<Traits::kIsBf16>(lo.z * scale, lo.w * scale),
                                     pack_pair<Traits::kIsBf16>(hi.x * scale, hi.y * scale),
                                     pack_pair<Traits::kIsBf16>(hi.z * scale, hi.w * scale));
      *reinterpret_cast<uint4*>(dq + row * p.dq_row_stride + pass * kPassCols + col) =
          m0 + row < seqlen_q ? value : make_uint4(0, 0, 0, 0);
    }
  }
}

}  // namespace hopattn::sm90
