// The merge of the 16-bit variable-length kernels' split pieces (plan_varlen_split), as a kernel of
// its own after the forward kernel, as the FP8 kernels merge theirs (fwd_fp8/split_combine.cuh).
// Why not the dense kernels' in-kernel merge (split_merge.cuh): a decoding tile is split in up to 32
// pieces, and there the last piece's warpgroup read every other piece's partial one L2 round trip
// after another, with only the threads of the few live rows working: ~1.4 us a piece (H200,
// 2026-12-02, perf-notes v61). Here one 128-thread CTA per (tile, consumer warpgroup, kCombineChunks
// O chunks) merges in one pass, kCombineBatch pieces' loads at a time, and CTAs, warpgroups and
// threads without a live row (past a sequence, a packed tile's idle rows) return at once. Where tiles
// have more pieces than one batch of loads, the CTA's warps share them instead
// (varlen_combine_shared.cuh).
//
// A split piece's consumer stores its O normalized and its LSE (store_combine_partial) for its live
// rows, and stores no tile. The forward kernel lets this one launch right after its own wait for the
// kernel before it (programmatic stream serialization), so its CTAs are dispatched as forward CTAs
// exit, and each waits (griddepcontrol.wait) until the forward grid has completed and its stores are
// visible.
#pragma once

#include <cuda_runtime_api.h>

#include "sm90/arch/sync.cuh"
#include "sm90/fwd/combine_rows.cuh"
#include "sm90/fwd/packed_gqa.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/sequence.cuh"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd/varlen_combine_shared.cuh"
#include "sm90/host/launch_support.hpp"

namespace hopattn::sm90 {

template <class Traits>
__global__ void __launch_bounds__(128) attention_forward_varlen_combine_kernel(const __grid_constant__ FwdParams p) {
  using Partials = SplitPartials<Traits::kORegisters, Traits::kConsumerWarpgroups>;
  allow_dependent_launch();  // the caller's next kernel may launch: it waits for this grid
  const int region_tile = static_cast<int>(blockIdx.x);
  const int warpgroup = static_cast<int>(blockIdx.y);
  const int first_chunk = static_cast<int>(blockIdx.z) * kCombineChunks;
  const int thread = static_cast<int>(threadIdx.x);
  // Which rows are live needs only the arrays, which the forward kernel does not write: decided
  // before the wait.
  const TileCoord c = decode_tile(p, p.split.first_tile + region_tile);
  const VarlenSequence seq = varlen_sequence<Traits::kChunksAndSequsedQ>(p, c.batch);
  const int warpgroup_row = warpgroup * Traits::kRowsPerWarpgroup;
  const bool live = thread_has_live_row(p, c, seq.bounds.seqlen_q, warpgroup_row, thread);
  wait_for_primary_grid();
  if (!live) return;

  const TilePieces pieces = TilePieces::of(p.split, region_tile);
  CombinedRows rows;
  combine_pieces<Partials>(p, pieces, warpgroup, first_chunk, thread, rows, pieces.first_unit, 1);
  store_merged_rows<Traits>(p, seq, c, warpgroup_row, thread, first_chunk, rows);
}

// Queues the combine after the forward kernel (p.split.units > 0): one CTA per tile, consumer
// warpgroup and group of O chunks, allowed to launch while the forward kernel runs. A variable-length
// plan cuts every tile into tile_blocks pieces (plan_varlen_split). Up to one batch of loads a tile,
// the one-warp merge: the share kernel's shared memory and barriers cost those plans 3-7.5% of the
// whole step, even with its share switched off at 4 pieces (b 1 x 32/32 x 4k, b 8 x 28/4 x 4k; H200,
// perf-notes v79b/v79c); above it, the share: b 1 x 28/4 x 16k (32 pieces a tile) 1.22x faster.
template <class Traits>
Status launch_varlen_combine(const FwdParams& p, cudaStream_t stream) {
  if (p.split.tile_blocks > kCombineBatch)
    return launch_dependent_kernel(attention_forward_varlen_shared_combine_kernel<Traits>, combine_grid<Traits>(p),
                                   stream, p, "launching the variable-length split combine kernel (shared pieces)");
  return launch_dependent_kernel(attention_forward_varlen_combine_kernel<Traits>, combine_grid<Traits>(p), stream, p,
                                 "launching the variable-length split combine kernel");
}

}  // namespace hopattn::sm90
