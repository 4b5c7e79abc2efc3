// The FP8 kernels' merge of split pieces (fwd/split_plan.hpp), as a kernel of its own that runs
// after the forward kernel. There a split piece's epilogue stores its O normalized as the output is,
// in float32, and its LSE (store_fp8_partial) instead of the tile: the 16-bit consumer's in-kernel
// merge cost the FP8 consumer's mainloop 6-7% of cycles (perf-notes, session 8), and storing the
// unnormalized state from the consumer (instead of from the epilogue) 1.5% (session 9). One CTA of
// 128 threads per (region tile, consumer warpgroup, kCombineChunks O chunks): thread t merges what
// thread t of each piece's warpgroup stored (same fragment layout) in one pass, weighting the
// pieces by their LSE, then stores its rows' columns as the FP8 epilogue's register path does.
//
// Launched with programmatic stream serialization: the forward kernel lets it launch at once
// (griddepcontrol.launch_dependents at its start), so its CTAs are dispatched as the forward CTAs
// exit instead of after a launch gap, and each waits (griddepcontrol.wait) until the forward grid
// has completed and its stores are visible.
#pragma once

#include "sm90/arch/sync.cuh"
#include "sm90/fwd/epilogue.cuh"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd_fp8/params.hpp"

namespace hopattn::sm90 {

// O chunks (4 registers each: split_merge.cuh) per combine CTA: the grid's z extent is kORegisters / 4
// / kCombineChunks, so more CTAs share a tile's loads (the merge waits on L2 and memory, not on math).
constexpr int kCombineChunks = 4;
// Pieces whose loads are issued together: one memory latency per kCombineBatch pieces.
constexpr int kCombineBatch = 4;

// What a combine thread reads of one piece: its LSE per row half ({lse[0], lse[1], -, -}: the state
// chunk of store_fp8_partial) and its kCombineChunks chunks of normalized O.
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

  // Adds a piece in one pass (online, like the softmax): what is merged so far and the piece are
  // weighted against the larger LSE; a side with LSE -inf (no key seen) weighs 0, and no -inf - -inf
  // is taken.
  __device__ __forceinline__ void add(const CombinePiece& x) {
    const float piece_lse[2] = {x.state.x, x.state.y};
    float old_weight[2], weight[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float merged = fmaxf(max_lse[r], piece_lse[r]);
      old_weight[r] = max_lse[r] == -INFINITY ? 0.0f : __expf(max_lse[r] - merged);
      weight[r] = piece_lse[r] == -INFINITY ? 0.0f : __expf(piece_lse[r] - merged);
      weight_sum[r] = fmaf(weight_sum[r], old_weight[r], weight[r]);
      max_lse[r] = merged;
    }
#pragma unroll
    for (int j = 0; j < kCombineChunks; ++j) {
      // Registers 4c, 4c + 1 are row half 0, 4c + 2, 4c + 3 row half 1 (fragment_row_half).
      o[4 * j] = fmaf(weight[0], x.chunks[j].x, o[4 * j] * old_weight[0]);
      o[4 * j + 1] = fmaf(weight[0], x.chunks[j].y, o[4 * j + 1] * old_weight[0]);
      o[4 * j + 2] = fmaf(weight[1], x.chunks[j].z, o[4 * j + 2] * old_weight[1]);
      o[4 * j + 3] = fmaf(weight[1], x.chunks[j].w, o[4 * j + 3] * old_weight[1]);
    }
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

template <class Traits>
__global__ void __launch_bounds__(128) attention_forward_fp8_split_combine_kernel(
    const __grid_constant__ Fp8FwdParams params) {
  using Partials = SplitPartials<Traits::kORegisters, Traits::kConsumerWarpgroups>;
  wait_for_primary_grid();
  const FwdParams& p = params.base;
  const int region_tile = static_cast<int>(blockIdx.x);
  const int warpgroup = static_cast<int>(blockIdx.y);
  const int first_chunk = static_cast<int>(blockIdx.z) * kCombineChunks;
  const int thread = static_cast<int>(threadIdx.x);
  const TilePieces pieces = TilePieces::of(p.split, region_tile);
  if (pieces.first_unit == pieces.last_unit) return;  // one unit covers the tile: its consumer stored it

  // The pieces in block order (deterministic), kCombineBatch at a time: all their loads first (L2
  // loads: L1 is not coherent with the forward kernel's stores), then the merge.
  CombinedRows rows;
  for (int u0 = pieces.first_unit; u0 <= pieces.last_unit; u0 += kCombineBatch) {
    CombinePiece batch[kCombineBatch];
    bool present[kCombineBatch];
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const int slot = u0 + j <= pieces.last_unit ? pieces.slot(p.split, u0 + j) : -1;
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

  const TileCoord c = decode_tile(p, p.split.first_tile + region_tile);
  const int row0 = c.m_block * Traits::kBlockM + warpgroup * Traits::kRowsPerWarpgroup;
  float out_scale[2];
  float lse[2];
  rows.finish(out_scale, lse);
  store_row_registers<true, __nv_bfloat16>(p, p, c, row0, thread, 4 * first_chunk, rows.o, out_scale);
  if (blockIdx.z == 0) store_lse_rows(p, p, c, row0, thread, lse);
}

}  // namespace hopattn::sm90
