// The variable-length combine for plans whose tiles have more pieces than one batch of loads
// (kCombineBatch), the CTA's warps sharing a tile's pieces: warp w merges pieces w, w + kCombineWarps,
// ... of one fragment warp's rows (the 32 threads of a consumer warp, 16 rows) into a partial merge,
// and that fragment warp's own combine warp merges the partials through shared memory and stores.
// Why: a decoding tile's live rows (a packed GQA group: up to 16) all sit in fragment warp 0, so the
// one-warp merge (varlen_combine.cuh) walks all of a tile's up to 32 pieces, ~180 instructions each,
// one after the other: 11 of a 28 us step at b 1 x 28/4 x 16k (ncu: one SM active 22k of 25k cycles);
// shared, the combine took 6 us and the step 1.22x less time (H200, perf-notes v79, v79b).
#pragma once

#include "sm90/arch/sync.cuh"
#include "sm90/fwd/combine_rows.cuh"
#include "sm90/fwd/packed_gqa.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/sequence.cuh"
#include "sm90/fwd/split_merge.cuh"

namespace hopattn::sm90 {

constexpr int kCombineWarps = 4;

// A fragment thread's merged rows into out (and, from the CTAs of the first O chunks, the LSE).
template <class Traits>
__device__ __forceinline__ void store_merged_rows(const FwdParams& p, const VarlenSequence& seq, const TileCoord& c,
                                                  int warpgroup_row, int thread, int first_chunk,
                                                  const CombinedRows& rows) {
  float out_scale[2];
  float lse[2];
  rows.finish(out_scale, lse);
  join_tile_row_sinks(p, c, seq.bounds.seqlen_q, warpgroup_row, thread, out_scale, lse);
  store_tile_registers<Traits::kIsBf16, typename Traits::Element>(p, seq, c, warpgroup_row, thread, 4 * first_chunk,
                                                                  rows.o, out_scale, lse, blockIdx.z == 0);
}

template <class Traits>
__global__ void __launch_bounds__(32 * kCombineWarps) attention_forward_varlen_shared_combine_kernel(
    const __grid_constant__ FwdParams p) {
  using Partials = SplitPartials<Traits::kORegisters, Traits::kConsumerWarpgroups>;
  static_assert(Partials::kThreads == 32 * kCombineWarps, "a combine thread per fragment thread");
  allow_dependent_launch();  // the caller's next kernel may launch: it waits for this grid
  // Raw storage: CombinedRows' member initializers are not allowed on a __shared__ variable.
  __shared__ alignas(16) unsigned char partial_bytes[kCombineWarps * 32 * sizeof(CombinedRows)];
  CombinedRows* partials = reinterpret_cast<CombinedRows*>(partial_bytes);
  const int region_tile = static_cast<int>(blockIdx.x);
  const int warpgroup = static_cast<int>(blockIdx.y);
  const int first_chunk = static_cast<int>(blockIdx.z) * kCombineChunks;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  // Which rows are live needs only the arrays, which the forward kernel does not write: decided
  // before the wait.
  const TileCoord c = decode_tile(p, p.split.first_tile + region_tile);
  const VarlenSequence seq = varlen_sequence<Traits::kChunksAndSequsedQ>(p, c.batch);
  const int warpgroup_row = warpgroup * Traits::kRowsPerWarpgroup;
  if (!warpgroup_has_live_row(p, c, seq.bounds.seqlen_q, warpgroup_row)) return;
  wait_for_primary_grid();
  const TilePieces pieces = TilePieces::of(p.split, region_tile);

  for (int fragment_warp = 0; fragment_warp < kCombineWarps; ++fragment_warp) {
    const int thread = 32 * fragment_warp + lane;
    const bool live = thread_has_live_row(p, c, seq.bounds.seqlen_q, warpgroup_row, thread);
    // The same in every warp (it depends on the lane alone), so the barriers below are uniform.
    if (!__any_sync(0xffffffffu, live)) continue;
    CombinedRows share;
    if (live)
      combine_pieces<Partials>(p, pieces, warpgroup, first_chunk, thread, share, pieces.first_unit + warp,
                               kCombineWarps);
    partials[warp * 32 + lane] = share;
    __syncthreads();
    if (warp == fragment_warp && live) {
      CombinedRows rows = partials[lane];
#pragma unroll
      for (int w = 1; w < kCombineWarps; ++w) rows.merge(partials[w * 32 + lane]);
      store_merged_rows<Traits>(p, seq, c, warpgroup_row, thread, first_chunk, rows);
    }
    __syncthreads();
  }
}

}  // namespace hopattn::sm90
