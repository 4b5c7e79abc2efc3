// The end of a split piece (split_plan.hpp) in the dense 16-bit kernels. (The FP8 kernels and the
// 16-bit variable-length kernels store a piece's normalized O and LSE in the same slot layout,
// store_combine_partial in combine_rows.cuh, and a second kernel merges: fwd_fp8/split_combine.cuh,
// fwd/varlen_combine.cuh.) The warpgroup stores its unnormalized O, row max and row sums into the piece's
// slot, then counts itself in the tile's counter; the warpgroup whose count completes the tile merges
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

// Writes a piece's slot (this thread's part): its O registers times a per-row-half scale, then the
// row state chunk.
template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ void store_partial_slot(const FwdParams& p, int slot, int warpgroup, int thread,
                                                   const float (&o)[kORegisters], float scale0, float scale1,
                                                   float4 state) {
  using Partials = SplitPartials<kORegisters, kWarpgroups>;
  float4* mine = Partials::slot(p, slot, warpgroup);
#pragma unroll
  for (int c = 0; c < kORegisters / 4; ++c) {
    // Registers 4c, 4c + 1 are row half 0, 4c + 2, 4c + 3 row half 1 (fragment_row_half).
    mine[c * Partials::kThreads + thread] = make_float4(o[4 * c] * scale0, o[4 * c + 1] * scale0,
                                                        o[4 * c + 2] * scale1, o[4 * c + 3] * scale1);
  }
  mine[Partials::kStateChunk * Partials::kThreads + thread] = state;
}

// A split piece's partial state into its slot: unnormalized O, and per row half this thread's row max
// and row sum.
template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ void store_split_partial(const FwdParams& p, int slot, int warpgroup, int thread,
                                                    const float (&o)[kORegisters], const float (&row_max)[2],
                                                    const float (&row_sum)[2]) {
  store_partial_slot<kORegisters, kWarpgroups>(p, slot, warpgroup, thread, o, 1.0f, 1.0f,
                                               make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]));
}

// Returns true when this warpgroup stores the tile; o, row_max and row_sum then hold the merged
// state. row_max times max_to_log2 is in log2 units (the 16-bit softmax keeps raw scores: scale_log2).
// barrier: a named barrier of this warpgroup's 128 threads alone.
template <int kORegisters, int kWarpgroups>
__device__ __forceinline__ bool finish_split_piece(const FwdParams& p, SplitPiece piece, int warpgroup, int thread,
                                                   int barrier, float (&o)[kORegisters], float (&row_max)[2],
                                                   float (&row_sum)[2], float max_to_log2) {
  using Partials = SplitPartials<kORegisters, kWarpgroups>;
  constexpr int kStateChunk = Partials::kStateChunk;
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

  // L2 loads (ld.global.cg): L1 is not coherent, and an earlier launch may have left these lines there.
  const auto state_of = [&](int slot) {
    return __ldcg(Partials::slot(p, slot, warpgroup) + kStateChunk * Partials::kThreads + thread);
  };
  float max[2] = {-INFINITY, -INFINITY};
  for (int u = pieces.first_unit; u <= pieces.last_unit; ++u) {
    if (const int slot = pieces.slot(p.split, u); slot >= 0) {
      const float4 state = state_of(slot);
      max[0] = fmaxf(max[0], state.x);
      max[1] = fmaxf(max[1], state.y);
    }
  }
  // A piece's weight per row half; a piece whose rows saw no key (max -inf) adds nothing (no -inf - -inf).
  const auto weights_of = [&](const float4& state, float (&w)[2]) {
    w[0] = state.x == -INFINITY ? 0.0f : exp2f((state.x - max[0]) * max_to_log2);
    w[1] = state.y == -INFINITY ? 0.0f : exp2f((state.y - max[1]) * max_to_log2);
  };
  row_sum[0] = row_sum[1] = 0.0f;
  for (int u = pieces.first_unit; u <= pieces.last_unit; ++u) {
    if (const int slot = pieces.slot(p.split, u); slot >= 0) {
      const float4 state = state_of(slot);
      float w[2];
      weights_of(state, w);
      row_sum[0] = fmaf(w[0], state.z, row_sum[0]);
      row_sum[1] = fmaf(w[1], state.w, row_sum[1]);
    }
  }
  // O a few chunks at a time, each over all pieces: loads of one group cannot be hoisted into
  // another's loop, so at most kGroup float4 are in flight beside O (at head dim 256 O alone holds
  // 128 of the 240 registers).
  constexpr int kGroup = 8;
#pragma unroll
  for (int g = 0; g < kORegisters / 4; g += kGroup) {
#pragma unroll
    for (int c = g; c < g + kGroup && c < kORegisters / 4; ++c) {
      o[4 * c] = o[4 * c + 1] = o[4 * c + 2] = o[4 * c + 3] = 0.0f;
    }
    for (int u = pieces.first_unit; u <= pieces.last_unit; ++u) {
      const int slot = pieces.slot(p.split, u);
      if (slot < 0) continue;
      float w[2];
      weights_of(state_of(slot), w);
      const float4* partial = Partials::slot(p, slot, warpgroup);
#pragma unroll
      for (int c = g; c < g + kGroup && c < kORegisters / 4; ++c) {
        const float4 x = __ldcg(partial + c * Partials::kThreads + thread);
        // Registers 4c, 4c + 1 are row half 0, 4c + 2, 4c + 3 row half 1 (fragment_row_half).
        o[4 * c] = fmaf(w[0], x.x, o[4 * c]);
        o[4 * c + 1] = fmaf(w[0], x.y, o[4 * c + 1]);
        o[4 * c + 2] = fmaf(w[1], x.z, o[4 * c + 2]);
        o[4 * c + 3] = fmaf(w[1], x.w, o[4 * c + 3]);
      }
    }
  }
  row_max[0] = max[0];
  row_max[1] = max[1];
  return true;
}

}  // namespace hopattn::sm90
