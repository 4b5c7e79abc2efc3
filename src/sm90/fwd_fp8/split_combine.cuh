// The FP8 kernels' merge of split pieces (fwd/split_plan.hpp), as a kernel of its own that runs
// after the forward kernel. There a split piece's epilogue stores its O normalized as the output is,
// in float32, and its LSE (store_combine_partial) instead of the tile: the 16-bit consumer's in-kernel
// merge cost the FP8 consumer's mainloop 6-7% of cycles (perf-notes, session 8), and storing the
// unnormalized state from the consumer (instead of from the epilogue) 1.5% (session 9). One CTA of
// 128 threads per (region tile, consumer warpgroup, kCombineChunks O chunks): thread t merges what
// thread t of each piece's warpgroup stored (same fragment layout) in one pass, weighting the
// pieces by their LSE, then stores its rows' columns as the FP8 epilogue's register path does.
//
// Launched with programmatic stream serialization: the forward kernel lets it launch early
// (griddepcontrol.launch_dependents right after its own wait for the kernel before it), so its CTAs
// are dispatched as the forward CTAs exit instead of after a launch gap, and each waits
// (griddepcontrol.wait) until the forward grid has completed and its stores are visible.
#pragma once

#include "sm90/arch/sync.cuh"
#include "sm90/fwd/combine_rows.cuh"
#include "sm90/fwd/epilogue.cuh"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd_fp8/params.hpp"

namespace hopattn::sm90 {

template <class Traits>
__global__ void __launch_bounds__(128) attention_forward_fp8_split_combine_kernel(
    const __grid_constant__ Fp8FwdParams params) {
  using Partials = SplitPartials<Traits::kORegisters, Traits::kConsumerWarpgroups>;
  allow_dependent_launch();  // the caller's next kernel may launch: it waits for this grid
  wait_for_primary_grid();
  const FwdParams& p = params.base;
  const int region_tile = static_cast<int>(blockIdx.x);
  const int warpgroup = static_cast<int>(blockIdx.y);
  const int first_chunk = static_cast<int>(blockIdx.z) * kCombineChunks;
  const int thread = static_cast<int>(threadIdx.x);
  const TilePieces pieces = TilePieces::of(p.split, region_tile);
  if (pieces.first_unit == pieces.last_unit) return;  // one unit covers the tile: its consumer stored it

  CombinedRows rows;
  combine_pieces<Partials>(p, pieces, warpgroup, first_chunk, thread, rows, pieces.first_unit, 1);

  const TileCoord c = decode_tile(p, p.split.first_tile + region_tile);
  const int row0 = c.m_block * Traits::kBlockM + warpgroup * Traits::kRowsPerWarpgroup;
  float out_scale[2];
  float lse[2];
  rows.finish(out_scale, lse);
  join_head_sink(p, c.head, out_scale, lse);
  store_row_registers<true, __nv_bfloat16>(p, p, c, row0, thread, 4 * first_chunk, rows.o, out_scale);
  if (blockIdx.z == 0) store_lse_rows(p, p, c, row0, thread, lse);
}

}  // namespace hopattn::sm90
