// The end of a split piece (split_plan.hpp) for one consumer warpgroup of the 16-bit kernel (the FP8
// kernels do not split: Fp8FwdTraits::kTailSplit says why). The warpgroup stores its unnormalized O, row max and row sums into the piece's slot, then
// counts itself in the tile's counter; the warpgroup whose count completes the tile merges
// every piece's slot into its registers and goes on to the epilogue, the others skip it. No one waits
// for another piece, so the hand-out order cannot deadlock. The merge reads the slots in block order,
// its own too, so the result is the same whichever piece finishes last.
//
// Slot layout: per slot and warpgroup, kChunks float4 per thread, thread-major (chunk c of thread t
// at c * 128 + t), so each warp's loads and stores are whole 512-byte lines and a thread reads back
// exactly what the same thread of another CTA wrote (the fragment layouts are equal).
#pragma once

#include <cmath>
#include <cstddef>

#include "sm90/arch/sync.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"

namespace hopattn::sm90 {

template <int kORegisters, int kWarpgroups>
struct SplitPartials {
  static constexpr int kThreads = 128;
  static constexpr int kChunks = kORegisters / 4 + 1;  // O, then {max[0], max[1], sum[0], sum[1]}
  static constexpr int kStateChunk = kChunks - 1;
  static constexpr std::size_t kBytesPerSlot = std::size_t(kWarpgroups) * kChunks * kThreads * sizeof(float4);

  __device__ static float4* slot(const FwdParams& p, int slot, int warpgroup) {
    return reinterpret_cast<float4*>(p.split_partials) +
           (std::size_t(slot) * kWarpgroups + warpgroup) * kChunks * kThreads;
  }
};

// A split piece's partial state into its slot: unnormalized O, and per row half this thread's row max
// and row sum.
template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ void store_split_partial(const FwdParams& p, int slot, int warpgroup, int thread,
                                                    const float (&o)[kORegisters], const float (&row_max)[2],
                                                    const float (&row_sum)[2]) {
  using Partials = SplitPartials<kORegisters, kWarpgroups>;
  float4* mine = Partials::slot(p, slot, warpgroup);
#pragma unroll
  for (int c = 0; c < kORegisters / 4; ++c) {
    mine[c * Partials::kThreads + thread] = make_float4(o[4 * c], o[4 * c + 1], o[4 * c + 2], o[4 * c + 3]);
  }
  mine[Partials::kStateChunk * Partials::kThreads + thread] =
      make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]);
}

// How the pieces of a split tile combine, per row half of this thread: the largest piece max, and the
// merged row sum (this thread's part of it, as store_split_partial took it).
struct SplitRowMerge {
  float max[2];
  float sum[2];
};

// L2 loads (ld.global.cg): L1 is not coherent, and an earlier launch may have left these lines there.
template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ float4 split_state(const FwdParams& p, int slot, int warpgroup, int thread) {
  using Partials = SplitPartials<kORegisters, kWarpgroups>;
  return __ldcg(Partials::slot(p, slot, warpgroup) + Partials::kStateChunk * Partials::kThreads + thread);
}

// A piece's weight per row half, against the merged max; a piece whose rows saw no key (max -inf)
// adds nothing (no -inf - -inf). max_to_log2: the factor from a row max to log2 units.
__device__ __forceinline__ void split_weights(const float4& state, const SplitRowMerge& merged, float max_to_log2,
                                              float (&w)[2]) {
  w[0] = state.x == -INFINITY ? 0.0f : exp2f((state.x - merged.max[0]) * max_to_log2);
  w[1] = state.y == -INFINITY ? 0.0f : exp2f((state.y - merged.max[1]) * max_to_log2);
}

template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ SplitRowMerge merge_split_rows(const FwdParams& p, const TilePieces& pieces, int warpgroup,
                                                          int thread, float max_to_log2) {
  SplitRowMerge merged{{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
  for (int u = pieces.first_unit; u <= pieces.last_unit; ++u) {
    if (const int slot = pieces.slot(p.split, u); slot >= 0) {
      const float4 state = split_state<kORegisters, kWarpgroups>(p, slot, warpgroup, thread);
      merged.max[0] = fmaxf(merged.max[0], state.x);
      merged.max[1] = fmaxf(merged.max[1], state.y);
    }
  }
  for (int u = pieces.first_unit; u <= pieces.last_unit; ++u) {
    if (const int slot = pieces.slot(p.split, u); slot >= 0) {
      const float4 state = split_state<kORegisters, kWarpgroups>(p, slot, warpgroup, thread);
      float w[2];
      split_weights(state, merged, max_to_log2, w);
      merged.sum[0] = fmaf(w[0], state.z, merged.sum[0]);
      merged.sum[1] = fmaf(w[1], state.w, merged.sum[1]);
    }
  }
  return merged;
}

// O chunks [first_chunk, first_chunk + kChunks) (chunk c: registers 4c .. 4c + 3) merged over every
// piece, in block order, into o (its register 4j + r is O register 4 (first_chunk + j) + r).
template <int kORegisters, int kWarpgroups, int kChunks>
__device__ __forceinline__ void merge_split_chunks(const FwdParams& p, const TilePieces& pieces, int warpgroup,
                                                   int thread, const SplitRowMerge& merged, float max_to_log2,
                                                   int first_chunk, float (&o)[4 * kChunks]) {
  using Partials = SplitPartials<kORegisters, kWarpgroups>;
#pragma unroll
  for (int i = 0; i < 4 * kChunks; ++i) o[i] = 0.0f;
  for (int u = pieces.first_unit; u <= pieces.last_unit; ++u) {
    const int slot = pieces.slot(p.split, u);
    if (slot < 0) continue;
    float w[2];
    split_weights(split_state<kORegisters, kWarpgroups>(p, slot, warpgroup, thread), merged, max_to_log2, w);
    const float4* partial = Partials::slot(p, slot, warpgroup) + first_chunk * Partials::kThreads + thread;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const float4 x = __ldcg(partial + j * Partials::kThreads);
      // Registers 4c, 4c + 1 are row half 0, 4c + 2, 4c + 3 row half 1 (fragment_row_half).
      o[4 * j] = fmaf(w[0], x.x, o[4 * j]);
      o[4 * j + 1] = fmaf(w[0], x.y, o[4 * j + 1]);
      o[4 * j + 2] = fmaf(w[1], x.z, o[4 * j + 2]);
      o[4 * j + 3] = fmaf(w[1], x.w, o[4 * j + 3]);
    }
  }
}

// Merges the slots of every piece of a split tile into o, row_max and row_sum (this thread's part of
// them, as store_split_partial took it). row_max times max_to_log2 is in log2 units.
template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ void merge_split_pieces(const FwdParams& p, const TilePieces& pieces, int warpgroup,
                                                   int thread, float (&o)[kORegisters], float (&row_max)[2],
                                                   float (&row_sum)[2], float max_to_log2) {
  const SplitRowMerge merged = merge_split_rows<kORegisters, kWarpgroups>(p, pieces, warpgroup, thread, max_to_log2);
  // O a few chunks at a time, each over all pieces: loads of one group cannot be hoisted into
  // another's loop, so at most kGroup float4 are in flight beside O (at head dim 256 O alone holds
  // 128 of the 240 registers).
  constexpr int kGroup = 8;
  static_assert(kORegisters % (4 * kGroup) == 0, "O registers come in whole groups of chunks");
#pragma unroll
  for (int g = 0; g < kORegisters / 4; g += kGroup) {
    float group[4 * kGroup];
    merge_split_chunks<kORegisters, kWarpgroups, kGroup>(p, pieces, warpgroup, thread, merged, max_to_log2, g, group);
#pragma unroll
    for (int i = 0; i < 4 * kGroup; ++i) o[4 * g + i] = group[i];
  }
  row_max[0] = merged.max[0];
  row_max[1] = merged.max[1];
  row_sum[0] = merged.sum[0];
  row_sum[1] = merged.sum[1];
}

// The in-kernel end of a split piece (the 16-bit kernel). Returns true when this warpgroup stores
// the tile; o, row_max and row_sum then hold the merged state. barrier: a named barrier of this
// warpgroup's 128 threads alone.
template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ bool finish_split_piece(const FwdParams& p, SplitPiece piece, int warpgroup, int thread,
                                                   int barrier, float (&o)[kORegisters], float (&row_max)[2],
                                                   float (&row_sum)[2], float max_to_log2) {
  using Partials = SplitPartials<kORegisters, kWarpgroups>;
  store_split_partial<kORegisters, kWarpgroups>(p, piece.slot(), warpgroup, thread, o, row_max, row_sum);
  __threadfence();  // our slot, before the counter says it is there
  named_barrier_sync(barrier, Partials::kThreads);
  bool last = false;
  const TilePieces pieces = TilePieces::of(p.split, piece.region_tile());
  if (thread == 0) {
    int* counter = p.split_counters + piece.region_tile() * kWarpgroups + warpgroup;
    last = atomicAdd(counter, 1) + 1 == pieces.count(p.split);
    if (last) atomicExch(counter, 0);  // every piece has counted: zero for the next launch
  }
  if (!named_barrier_or(barrier, Partials::kThreads, last)) return false;
  __threadfence();  // the other pieces' slots, after their counts
  merge_split_pieces<kORegisters, kWarpgroups>(p, pieces, warpgroup, thread, o, row_max, row_sum, max_to_log2);
  return true;
}

}  // namespace hopattn::sm90
