// The merge of the 16-bit variable-length kernels' split pieces (plan_varlen_split) by the last piece
// of each tile, inside the forward kernel. Every piece stores its O normalized and its LSE for its
// live rows (store_combine_partial), then the CTA counts itself in its tile's counter; the CTA whose
// count completes the tile marks the counter as its own, and once it has no visit left it reads
// every piece's partial back (its own too, in block order: the same result whichever piece ends
// last), stores the tile with all of its consumer warps and zeroes the counter for the next launch.
// No CTA waits for another, so the hand-out order cannot deadlock.
// Why not the combine kernel (varlen_combine.cuh, which the FP8 kernels keep): it waits for the whole
// forward grid to complete and flush before it reads a partial, and that wait plus its own drain cost
// a batch-1 decoding step ~4 of 15.6 us (H100 ncu, perf-notes session 54). Why all the warps: v61's
// in-kernel merge ran in the few threads that hold a decoding tile's live rows (one warp), one L2
// round trip after another, ~1.4 us a piece (perf-notes v61); here each consumer warp takes its own
// O chunks of those rows and issues a batch of pieces' loads at once. Why after the last visit:
// inside the visit loop, beside the registers ptxas keeps live across visits, the merge's loads
// spilled 0.9-1.9 KB at d 128 (even one piece at a time spilled); after it, they fit.
#pragma once

#include "sm90/arch/global_semaphore.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/fwd/combine_rows.cuh"
#include "sm90/fwd/packed_gqa.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/sequence.cuh"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd/split_plan.hpp"

namespace hopattn::sm90 {

// A counter that holds this value was completed by CTA `block`, which merges the tile at its end.
__device__ __forceinline__ int completed_mark(int block) { return -1 - block; }

// After this CTA's consumers stored their piece's partials: counts the piece in its tile's counter,
// and where that completes the tile, marks the counter with completed_mark. barrier: a named barrier
// of the kConsumerThreads consumer threads alone. One thread releases and acquires for the CTA: the
// barrier orders the others' stores before its count, and merge_completed_tiles' barrier its count
// before their loads.
template <int kConsumerThreads, int kWarpgroups>
__device__ __forceinline__ void count_split_piece(const FwdParams& p, SplitPiece piece, int consumer_thread,
                                                  int barrier) {
  named_barrier_sync(barrier, kConsumerThreads);
  if (consumer_thread != 0) return;
  // Releases the CTA's partials with the count and, for the last piece, acquires the others'.
  int* counter = p.split_counters + piece.region_tile() * kWarpgroups;
  if (fetch_add_acq_rel_gpu(counter, 1) + 1 != TilePieces::of(p.split, piece.region_tile()).count(p.split)) return;
  atomicExch(counter, completed_mark(static_cast<int>(blockIdx.x)));
}

// How the consumer warps share a tile's merge: a task is kChunks O chunks (4 registers each) of one
// fragment warp's rows (16 rows of a consumer warpgroup's slot), over all of the tile's pieces. A
// decoding tile's live rows all lie in fragment warp 0, so its O chunks are spread over the
// kConsumerWarps warps: d 128, 16 chunks: 2 a warp. kBatch pieces' loads are issued together (about
// 24 float4 in flight a thread: O is dead here, the mainloop's registers are free).
template <class Traits>
struct LastPieceMergeShape {
  static constexpr int kORegisterChunks = Traits::kORegisters / 4;
  static constexpr int kChunks = kORegisterChunks / Traits::kConsumerWarps > 0 ? kORegisterChunks / Traits::kConsumerWarps : 1;
  static constexpr int kChunkGroups = kORegisterChunks / kChunks;
  static constexpr int kBatch = 24 / (kChunks + 1) < 8 ? 24 / (kChunks + 1) : 8;
  static_assert(kORegisterChunks % kChunks == 0, "whole chunk groups");
};

// combine_pieces (combine_rows.cuh) for the merge of a whole warp, whose lanes all run it (live:
// whether this lane's rows are): a piece's slot (TilePieces::slot: two unsigned divisions, ~60
// instructions) is computed once, by one lane for 32 pieces, and broadcast by shuffles. Computed in
// every lane for every piece, as the combine kernels do for their few, it made the merge of a 16-piece
// tile take 27 us under ncu where the forward kernel and the combine kernel took 11.5 and 6.0 (b 1 x
// 28/4 x 4k, H100): each warp walks all of the tile's pieces here.
template <class Partials, int kChunks, int kBatch>
__device__ __forceinline__ void merge_warp_pieces(const FwdParams& p, const TilePieces& pieces, int warpgroup,
                                                  int first_chunk, int thread, int lane, bool live,
                                                  RowMerge<kChunks>& rows) {
  for (int u0 = pieces.first_unit; u0 <= pieces.last_unit; u0 += 32) {
    const int lane_slot = u0 + lane <= pieces.last_unit ? pieces.slot(p.split, u0 + lane) : -1;
    const int units = min(32, pieces.last_unit - u0 + 1);
    for (int j0 = 0; j0 < units; j0 += kBatch) {
      PieceChunks<kChunks> batch[kBatch];
      bool present[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int slot = __shfl_sync(0xffffffffu, lane_slot, (j0 + j) % 32);
        present[j] = live && j0 + j < units && slot >= 0;
        if (!present[j]) continue;
        // L2 loads: L1 is not coherent with other CTAs' stores.
        const float4* mine = Partials::slot(p, slot, warpgroup) + thread;
        batch[j].state = __ldcg(mine + Partials::kStateChunk * Partials::kThreads);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) batch[j].chunks[c] = __ldcg(mine + (first_chunk + c) * Partials::kThreads);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (present[j]) rows.add(batch[j]);
      }
    }
  }
}

// The merge and the tile's store by the piece that completed it: consumer warp `consumer_warp` (0 to
// kConsumerWarps - 1) takes tasks consumer_warp, + kConsumerWarps, ... of the fragment warps that hold
// a live row (the live rows come first: packed_gqa.cuh).
template <class Traits>
__device__ __forceinline__ void merge_split_tile(const FwdParams& p, int region_tile, int consumer_warp, int lane) {
  using Shape = LastPieceMergeShape<Traits>;
  using Partials = SplitPartials<Traits::kORegisters, Traits::kConsumerWarpgroups>;
  const TileCoord c = decode_tile(p, p.split.first_tile + region_tile);
  const VarlenSequence seq = varlen_sequence<Traits::kChunksAndSequsedQ>(p, c.batch);
  const int live_rows = tile_live_rows(p, c, seq.bounds.seqlen_q);
  const int fragment_warps = min((live_rows + 15) / 16, Traits::kConsumerWarps);
  const TilePieces pieces = TilePieces::of(p.split, region_tile);
  for (int task = consumer_warp; task < fragment_warps * Shape::kChunkGroups; task += Traits::kConsumerWarps) {
    const int fragment_warp = task / Shape::kChunkGroups, group = task % Shape::kChunkGroups;
    const int warpgroup = fragment_warp / 4;
    const int thread = 32 * (fragment_warp % 4) + lane;
    const int warpgroup_row = warpgroup * Traits::kRowsPerWarpgroup;
    const bool live = thread_has_live_row(p, c, seq.bounds.seqlen_q, warpgroup_row, thread);
    RowMerge<Shape::kChunks> rows;
    merge_warp_pieces<Partials, Shape::kChunks, Shape::kBatch>(p, pieces, warpgroup, group * Shape::kChunks, thread,
                                                               lane, live, rows);
    if (live) store_merged_rows<Traits>(p, seq, c, warpgroup_row, thread, group * Shape::kChunks, rows, group == 0);
  }
}

// At the end of the CTA's visits: finds the tiles it completed by their counters' marks (32 tiles a
// round, every warp reading the same counters), zeroes those counters for the next launch, and
// merges and stores the tiles. The CTA keeps no record of its own: a register kept across the visit
// loop, or a shared-memory one, made ptxas spill in one kernel or another (d 64 and d 128 with paged
// K/V copies). barrier: as count_split_piece's.
template <class Traits>
__device__ __forceinline__ void merge_completed_tiles(const FwdParams& p, int consumer_thread, int barrier) {
  constexpr int kWarpgroups = Traits::kConsumerWarpgroups;
  constexpr int kConsumerThreads = kWarpgroups * Traits::kWarpgroupThreads;
  const int warp = consumer_thread / 32, lane = consumer_thread % 32;
  const int mark = completed_mark(static_cast<int>(blockIdx.x));
  const int region_tiles = p.num_tiles - p.split.first_tile;
  named_barrier_sync(barrier, kConsumerThreads);  // consumer thread 0's marks and fences, before the reads
  for (int base = 0; base < region_tiles; base += 32) {
    int* counter = p.split_counters + (base + lane) * kWarpgroups;
    // A mark stays until this CTA zeroes it, so every warp sees the same tiles.
    unsigned mine = __ballot_sync(0xffffffffu, base + lane < region_tiles && __ldcg(counter) == mark);
    if (mine == 0) continue;
    named_barrier_sync(barrier, kConsumerThreads);  // every warp has read this round's marks
    if (warp == 0 && (mine >> lane & 1)) *counter = 0;
    for (; mine != 0; mine &= mine - 1) merge_split_tile<Traits>(p, base + __ffs(mine) - 1, warp, lane);
  }
}

}  // namespace hopattn::sm90
