// What the transposed decoding loops of the 16-bit and FP8 consumers share (fwd/transposed_decode.cuh,
// fwd_fp8/transposed_decode.cuh): a tile of at most kRows = 8 live query rows computed by warpgroup 0
// with the keys (S^T = K Q^T) and the head dim (O^T += V^T P^T) as the wgmma's M and the query rows as
// its N = 8. Thread t = 32 w + l holds, per m64n8 tile, rows 16 w + l / 4 (+ 8) for query columns
// 2 (l % 4) and 2 (l % 4) + 1, reduced over the warpgroup as transposed_columns.cuh says (one named
// barrier). At the end O^T goes through shared memory into the consumer's accumulator layout (o,
// row_max, row_sum of warp 0's first row half), so the tile leaves through the usual epilogues.
//
// Shared memory: the Q stage's rows past the first 8 (the tile's live rows) are loaded but never read
// in such a tile, and the stage stays this tile's until the consumers release it, so P^T (PTile, the
// derived loop's element type), the column exchanges and the O^T transpose live there (kScratch*);
// the release fences the generic proxy first.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/fwd/attention_chunk.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/softmax.cuh"
#include "sm90/fwd/transposed_columns.cuh"
#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <class Traits, class PTile_>
class TransposedTile {
 public:
  static constexpr int kRows = 8;  // query rows a tile may hold: the wgmma N
  static constexpr int kKeyTiles = Traits::kBlockN / 64;
  static constexpr int kDimTiles = Traits::kHeadDim / 64;
  static_assert(Traits::kBlockN % 64 == 0 && Traits::kHeadDim % 64 == 0, "m64 tiles of keys and of the head dim");

  // barrier: a named barrier of this warpgroup's 128 threads that the mainloop does not use otherwise.
  __device__ TransposedTile(std::uint32_t q_stage, int thread, int barrier)
      : q_stage_(q_stage), thread_(thread), barrier_(barrier) {
#pragma unroll
    for (int c = 0; c < 2; ++c) col_max_[c] = -INFINITY, col_sum_[c] = 0.0f;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int i = 0; i < 4; ++i) ot_[d][i] = 0.0f;
    }
  }

  // S^T = K Q^T for the K stage at k_stage, one commit group: per 64-key tile kQKSteps k-steps of 32
  // bytes along the rows of both (16 columns of 16 bits, 32 of e4m3). gemm(st, desc_k, desc_q,
  // accumulate) is the element type's m64n8 wgmma.
  template <class Gemm>
  __device__ void issue_scores_with(std::uint32_t k_stage, Gemm gemm) {
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int step = 0; step < Traits::kQKSteps; ++step) {
        const int block = step / 4;
        const std::uint32_t in_row = (step % 4) * 32;
        const std::uint64_t desc_k =
            kmajor_descriptor(k_stage + block * KTile::kColumnBlockBytes + j * 64 * kSwizzleBytes + in_row);
        const std::uint64_t desc_q = kmajor_descriptor(q_stage_ + block * QTile::kColumnBlockBytes + in_row);
        gemm(st_[j], desc_k, desc_q, step > 0);
      }
    }
    wgmma_commit();
  }

  __device__ void pin_scores() {
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) pin_registers(st_[j]);
  }
  __device__ void pin_output() {
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) pin_registers(ot_[d]);
  }

  __device__ void apply_softcap(float softcap, float input_scale) {
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) st_[j][i] = softcap * fast_tanh(st_[j][i] * input_scale);
    }
  }

  // apply_mask (mask.cuh) on the transposed scores: row0 is the tile's first row (a packed index when
  // packed), n0 the block's first key. The bounds are mask.cuh's, repeated as its own variants repeat
  // them: shared through a helper they moved ptxas's predicate code in every kernel's masked blocks.
  // kChunks: the kernel takes chunks (masked_blocks.hpp).
  template <bool kChunks, class Bounds>
  __device__ void apply_mask(const Bounds& seq, const FwdParams& p, bool packed, int row0, int n0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int column = row0 + query_column(i);
      const int row = packed ? int(p.head_ratio_divisor.divide(unsigned(column))) : column;
      const int diagonal = row + seq.seqlen_k - seq.seqlen_q;
      int key_end = seq.seqlen_k;
      if (seq.window_right >= 0) key_end = min(key_end, diagonal + seq.window_right + 1);
      int key_begin = seq.window_left >= 0 ? diagonal - seq.window_left : 0;
      if (kChunks && seq.attention_chunk > 0) {
        const int first = p.chunk_divisor.first_key(diagonal);
        key_begin = max(key_begin, first);
        key_end = min(key_end, first + p.chunk_divisor.size());
      }
#pragma unroll
      for (int j = 0; j < kKeyTiles; ++j) {
        const int key = n0 + 64 * j + row_in_tile(i);
        if (key >= key_end || key < key_begin) st_[j][i] = -INFINITY;
      }
    }
  }

  // The tile's end: O, row_max and row_sum in the consumer's accumulator layout. Warp 0's first row
  // half holds the kRows rows (row l / 4), with the whole row sum in the quad's first thread
  // (finish_rows adds the quad's four); every other entry is an empty row. The running max and sums
  // are moved as they are: in the units of the consumer's own softmax.
  template <int kORegisters>
  __device__ void finish(float (&o)[kORegisters], float (&row_max)[2], float (&row_sum)[2]) {
    float total[2] = {col_sum_[0], col_sum_[1]};
    reduce_columns(total, SumOp{});
    float* max_out = scratch(kScratchMax);
    float* sum_out = scratch(kScratchSum);
    float* o_t = scratch(kScratchO);
    const int lane = thread_ % 32, warp = thread_ / 32;
    if (warp == 0 && lane < 4) {
#pragma unroll
      for (int c = 0; c < 2; ++c) max_out[2 * lane + c] = col_max_[c], sum_out[2 * lane + c] = total[c];
    }
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o_t[query_column(i) * Traits::kHeadDim + 64 * d + row_in_tile(i)] = ot_[d][i];
    }
    named_barrier_sync(barrier_, Traits::kWarpgroupThreads);
    const int row = lane / 4;
#pragma unroll
    for (int i = 0; i < kORegisters; ++i) {
      const bool mine = warp == 0 && fragment_row_half(i) == 0;
      o[i] = mine ? o_t[row * Traits::kHeadDim + accumulator_col(thread_, i)] : 0.0f;
    }
    row_max[0] = warp == 0 ? max_out[row] : -INFINITY;
    row_sum[0] = warp == 0 && lane % 4 == 0 ? sum_out[row] : 0.0f;
    row_max[1] = -INFINITY;
    row_sum[1] = 0.0f;
  }

 protected:
  using QTile = typename Traits::QTile;
  using KTile = typename Traits::KTile;
  using PTile = PTile_;  // P^T as the second GEMM's B: query rows x keys
  using Columns = TransposedColumns<kRows>;
  // Byte offsets into the Q stage's first column block, past the live rows' swizzle atom.
  static constexpr std::uint32_t kScratchP = kSwizzleAtomBytes;
  static constexpr std::uint32_t kScratchExchange = kScratchP + PTile::kBytes;              // Columns::reduce's slots
  static constexpr std::uint32_t kScratchMax = kScratchExchange + Columns::kSlotFloats * 4;  // kRows floats
  static constexpr std::uint32_t kScratchSum = kScratchMax + kRows * 4;                      // kRows floats
  static constexpr std::uint32_t kScratchO = kScratchSum + kRows * 4;                        // kRows x kHeadDim floats
  static_assert(kScratchO + kRows * Traits::kHeadDim * 4 <= QTile::kColumnBlockBytes,
                "the scratch must fit in the Q stage's first column block");

  // Accumulator i of an m64n8 tile: its query column, and its row (key, or head-dim entry of O^T) in
  // the 64-row tile.
  __device__ int query_column(int i) const { return 2 * (thread_ % 4) + i % 2; }
  __device__ int row_in_tile(int i) const { return 16 * (thread_ / 32) + (thread_ % 32) / 4 + 8 * (i / 2); }

  __device__ std::uint32_t p_tile() const { return q_stage_ + kScratchP; }
  __device__ float* scratch(std::uint32_t offset) const {
    return static_cast<float*>(__cvta_shared_to_generic(q_stage_ + offset));
  }

  // Per query column, op over the block's scores of the warpgroup.
  template <typename Op>
  __device__ void reduce_scores(float (&out)[2], Op op) const {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      out[c] = op(st_[0][c], st_[0][c + 2]);
#pragma unroll
      for (int j = 1; j < kKeyTiles; ++j) out[c] = op(out[c], op(st_[j][c], st_[j][c + 2]));
    }
    reduce_columns(out, op);
  }

  // values[c] (one per thread and query column) reduced with op over the warpgroup, through the
  // exchange slots.
  template <typename Op>
  __device__ void reduce_columns(float (&values)[2], Op op) const {
    Columns::reduce(values, q_stage_ + kScratchExchange, thread_, barrier_, op);
  }

  // The block's scores -> probabilities 2^(s scale + bias[column]), added to the column sums, and O^T
  // rescaled by o_factor[column] before the block's P^T V^T is added.
  __device__ void exponentiate_and_rescale(float scale, const float (&bias)[2], const float (&o_factor)[2]) {
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        st_[j][i] = fast_exp2(fmaf(st_[j][i], scale, bias[i % 2]));
        col_sum_[i % 2] += st_[j][i];
      }
    }
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int i = 0; i < 4; ++i) ot_[d][i] *= o_factor[i % 2];
    }
  }

  // P^T stored (fenced for the async proxy, the warpgroup synchronized): what the second GEMM reads.
  __device__ void publish_probabilities() const {
    fence_proxy_async_shared();  // generic-proxy stores -> the wgmma's (async proxy) reads
    named_barrier_sync(barrier_, Traits::kWarpgroupThreads);
  }

  const std::uint32_t q_stage_;  // shared address of the Q stage
  const int thread_;
  const int barrier_;
  float st_[kKeyTiles][4];  // S^T, then P^T, of the current block
  float ot_[kDimTiles][4];  // O^T, unnormalized
  float col_max_[2];        // running max of the thread's two query columns (the derived loop's units)
  float col_sum_[2];        // this thread's partial sums of them
};

}  // namespace hopattn::sm90
