// The merge of split pieces that a combine kernel does after the forward kernel (the FP8 kernels'
// fwd_fp8/split_combine.cuh, the 16-bit variable-length kernels' fwd/varlen_combine.cuh): each piece
// stored its O normalized as the output is, in float32, and its LSE, in its slot (split_merge.cuh's
// layout, {lse[0], lse[1]} in the state chunk). Thread t of a combine CTA merges what thread t of
// each piece's warpgroup stored (the same fragment layout), kCombineChunks O chunks of it, in one
// pass, weighting the pieces by their LSE.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>

#include "sm90/fwd/params.hpp"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd/split_plan.hpp"

namespace hopattn::sm90 {

// O chunks (4 registers each: split_merge.cuh) per combine CTA: the grid's z extent is kORegisters / 4
// / kCombineChunks, so more CTAs share a tile's loads (the merge waits on L2 and memory, not on math).
constexpr int kCombineChunks = 4;
// Pieces whose loads are issued together: one memory latency per kCombineBatch pieces.
constexpr int kCombineBatch = 4;

// A combine kernel's grid: one 128-thread CTA per split region tile, consumer warpgroup and group of
// kCombineChunks O chunks.
template <class Traits>
inline dim3 combine_grid(const FwdParams& p) {
  static_assert(Traits::kORegisters % (4 * kCombineChunks) == 0, "the combine's z extent");
  return dim3(static_cast<unsigned>(p.num_tiles - p.split.first_tile), Traits::kConsumerWarpgroups,
              Traits::kORegisters / (4 * kCombineChunks));
}

// What a combine thread reads of one piece: its LSE per row half ({lse[0], lse[1], -, -}: the state
// chunk of store_combine_partial) and its kCombineChunks chunks of normalized O.
struct CombinePiece {
  float4 state;
  float4 chunks[kCombineChunks];
};

// The merge so far, per row half of this thread: the largest LSE, the sum of exp(lse - that), and O
// weighted alike.
struct CombinedRows {
  float max_lse[2] = {-INFINITY, -INFINITY};
  float weight_sum[2] = {0.0f, 0.0f};
  float o[4 * kCombineChunks] = {};

  // Adds a piece in one pass (online, like the softmax): the piece is a merge of its own, of weight 1
  // at its LSE.
  __device__ __forceinline__ void add(const CombinePiece& x) {
    CombinedRows piece;
    piece.max_lse[0] = x.state.x, piece.max_lse[1] = x.state.y;
    piece.weight_sum[0] = piece.weight_sum[1] = 1.0f;
#pragma unroll
    for (int j = 0; j < kCombineChunks; ++j) {
      piece.o[4 * j] = x.chunks[j].x, piece.o[4 * j + 1] = x.chunks[j].y;
      piece.o[4 * j + 2] = x.chunks[j].z, piece.o[4 * j + 3] = x.chunks[j].w;
    }
    merge(piece);
  }

  // Adds another merge of pieces of the same rows: both are weighted against the larger LSE; a side
  // with LSE -inf (no key seen) weighs 0, and no -inf - -inf is taken.
  __device__ __forceinline__ void merge(const CombinedRows& x) {
    float old_weight[2], weight[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float merged = fmaxf(max_lse[r], x.max_lse[r]);
      old_weight[r] = max_lse[r] == -INFINITY ? 0.0f : __expf(max_lse[r] - merged);
      weight[r] = x.max_lse[r] == -INFINITY ? 0.0f : __expf(x.max_lse[r] - merged);
      weight_sum[r] = fmaf(weight_sum[r], old_weight[r], x.weight_sum[r] * weight[r]);
      max_lse[r] = merged;
    }
    // Registers 4c, 4c + 1 are row half 0, 4c + 2, 4c + 3 row half 1 (fragment_row_half).
#pragma unroll
    for (int i = 0; i < 4 * kCombineChunks; ++i) o[i] = fmaf(weight[i % 4 / 2], x.o[i], o[i] * old_weight[i % 4 / 2]);
  }

  // The output's scale per row half (1 / weight sum; 0 for a row no piece saw a key of) and its LSE.
  __device__ __forceinline__ void finish(float (&out_scale)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool empty = weight_sum[r] == 0.0f;
      // The largest piece weighs 1, so the sum lies in [1, pieces]: the fast division and log suffice.
      out_scale[r] = empty ? 0.0f : __fdividef(1.0f, weight_sum[r]);
      lse[r] = empty ? -INFINITY : max_lse[r] + __logf(weight_sum[r]);
    }
  }
};

// A split piece's O, normalized like the output (out_scale) but in float32, and its LSE, into its
// slot, for a combine kernel to merge.
template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ void store_combine_partial(const FwdParams& p, int slot, int warpgroup, int thread,
                                                      const float (&o)[kORegisters], const float (&out_scale)[2],
                                                      const float (&lse)[2]) {
  store_partial_slot<kORegisters, kWarpgroups>(p, slot, warpgroup, thread, o, out_scale[0], out_scale[1],
                                               make_float4(lse[0], lse[1], 0.0f, 0.0f));
}

// Merges the pieces of a split tile (pieces, in block order: deterministic) from unit first_unit on,
// every unit_stride-th, into rows: chunks [first_chunk, + kCombineChunks) of thread `thread`'s part of
// warpgroup `warpgroup`'s slots, kCombineBatch pieces at a time: all their loads first (L2 loads: L1 is
// not coherent with the forward kernel's stores), then the merge.
template <class Partials>
__device__ __forceinline__ void combine_pieces(const FwdParams& p, const TilePieces& pieces, int warpgroup,
                                               int first_chunk, int thread, CombinedRows& rows, int first_unit,
                                               int unit_stride) {
  for (int u0 = first_unit; u0 <= pieces.last_unit; u0 += kCombineBatch * unit_stride) {
    CombinePiece batch[kCombineBatch];
    bool present[kCombineBatch];
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const int u = u0 + j * unit_stride;
      const int slot = u <= pieces.last_unit ? pieces.slot(p.split, u) : -1;
      present[j] = slot >= 0;
      if (!present[j]) continue;
      const float4* mine = Partials::slot(p, slot, warpgroup) + thread;
      batch[j].state = __ldcg(mine + Partials::kStateChunk * Partials::kThreads);
#pragma unroll
      for (int c = 0; c < kCombineChunks; ++c) {
        batch[j].chunks[c] = __ldcg(mine + (first_chunk + c) * Partials::kThreads);
      }
    }
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      if (present[j]) rows.add(batch[j]);
    }
  }
}

}  // namespace hopattn::sm90
