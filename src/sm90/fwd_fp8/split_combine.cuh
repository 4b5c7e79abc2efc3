// The FP8 kernels' merge of split pieces (fwd/split_plan.hpp), as a kernel of its own that runs
// after the forward kernel: there the consumer only stores a piece's partial state
// (store_split_partial), because the 16-bit consumer's in-kernel merge cost the FP8 consumer's
// mainloop 6-7% of cycles (perf-notes, session 8). One CTA of 128 threads per (region tile, consumer
// warpgroup, kCombineChunks O chunks): thread t merges what thread t of each piece's warpgroup stored
// (same fragment layout), then stores its rows' columns as the FP8 epilogue's register path does.
//
// Launched with programmatic stream serialization: the forward kernel lets it launch at once
// (griddepcontrol.launch_dependents at its start), so its CTAs are dispatched as the forward CTAs
// exit instead of after a launch gap, and each waits (griddepcontrol.wait) until the forward grid
// has completed and its stores are visible.
#pragma once

#include "sm90/fwd/epilogue.cuh"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd_fp8/epilogue.cuh"
#include "sm90/fwd_fp8/params.hpp"

namespace hopattn::sm90 {

__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_primary_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// O chunks (4 registers each: split_merge.cuh) per combine CTA: the grid's z extent is kORegisters / 4
// / kCombineChunks, so more CTAs share a tile's loads (the merge waits on L2 and memory, not on math).
constexpr int kCombineChunks = 4;

template <class Traits>
__global__ void __launch_bounds__(128) attention_forward_fp8_split_combine_kernel(
    const __grid_constant__ Fp8FwdParams params) {
  wait_for_primary_grid();
  constexpr int kO = Traits::kORegisters, kWarpgroups = Traits::kConsumerWarpgroups;
  const FwdParams& p = params.base;
  const int region_tile = static_cast<int>(blockIdx.x);
  const int warpgroup = static_cast<int>(blockIdx.y);
  const int first_chunk = static_cast<int>(blockIdx.z) * kCombineChunks;
  const int thread = static_cast<int>(threadIdx.x);
  const TilePieces pieces = TilePieces::of(p.split, region_tile);
  if (pieces.first_unit == pieces.last_unit) return;  // one unit covers the tile: its consumer stored it

  constexpr float kMaxToLog2 = 1.0f;  // the FP8 softmax keeps its max in log2 units
  const SplitRowMerge merged = merge_split_rows<kO, kWarpgroups>(p, pieces, warpgroup, thread, kMaxToLog2);
  float o[4 * kCombineChunks];
  merge_split_chunks<kO, kWarpgroups, kCombineChunks>(p, pieces, warpgroup, thread, merged, kMaxToLog2, first_chunk,
                                                      o);
  const TileCoord c = decode_tile(p, p.split.first_tile + region_tile);
  const int row0 = c.m_block * Traits::kBlockM + warpgroup * Traits::kRowsPerWarpgroup;
  // Without block descales (Fp8FwdTraits::kTailSplit) O is in units of the per-head v descale alone.
  const float v_scale = params.v_descale.at(c.batch, c.head / p.head_ratio);
  struct {
    float row_max[2], row_sum[2];
  } rows{{merged.max[0], merged.max[1]}, {merged.sum[0], merged.sum[1]}};
  float out_scale[2];
  float lse[2];
  fp8_finish_rows(rows, v_scale, out_scale, lse);
  store_row_registers<true, __nv_bfloat16>(p, c, row0, thread, 4 * first_chunk, o, out_scale);
  if (blockIdx.z == 0) store_lse_rows(p, c, row0, thread, lse);
}

}  // namespace hopattn::sm90
