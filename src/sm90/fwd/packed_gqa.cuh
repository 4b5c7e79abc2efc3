// GQA packing (FwdParams::pack_gqa; variable-length kernels only): the head_ratio query heads that
// share a K/V head fill one tile's rows together. A decoding step has one (or a few) query rows per
// head: unpacked, each query head's tile holds that row and kBlockM - 1 idle ones, and streams the
// whole K/V of its K/V head; packed, one tile holds the rows of all its query heads and the K/V is
// streamed once for them (GQA 4: 4x fewer tiles and K/V bytes).
//
// Packed tile row r of tile m_block (packed index P = m_block * packed_rows + r) is query row
// P / head_ratio of head kv_head * head_ratio + P % head_ratio; rows from packed_rows on (kBlockM
// not a multiple of head_ratio) hold no (row, head) and are never stored. The K/V block range and the
// masked-block bounds take the tile's first query row with kBlockM rows (a superset of its
// tile_q_rows rows, scheduler.cuh), so the per-element mask here is what makes them exact.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/fwd/epilogue.cuh"
#include "sm90/fwd/mask.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/sequence.cuh"
#include "sm90/fwd/sink.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/tile/fragment.hpp"

namespace hopattn::sm90 {

// Where accumulator row half `half` of this thread lands: its query row within the sequence, its
// query head, and whether it is a row of the output at all. warpgroup_row: the warpgroup's first
// row in the tile. Packed or not (a variable-length tile's rows past its sequence are not live either).
struct TileRow {
  int q_row;
  int head;
  bool live;
};

__device__ __forceinline__ TileRow tile_row(const FwdParams& p, const TileCoord& c, int seqlen_q, int warpgroup_row,
                                            int thread, int half) {
  const int row = warpgroup_row + accumulator_row(thread, 2 * half);
  TileRow t;
  if (p.pack_gqa) {
    const int packed = c.m_block * p.packed_rows + row;
    t.q_row = int(p.head_ratio_divisor.divide(unsigned(packed)));
    t.head = c.head * p.head_ratio + packed - t.q_row * p.head_ratio;
    t.live = row < p.packed_rows && t.q_row < seqlen_q;
  } else {
    t.q_row = c.m_block * p.tile_q_rows + row;
    t.head = c.head;
    t.live = t.q_row < seqlen_q;
  }
  return t;
}

// join_head_sink (sink.cuh) per row half, each with its own q head (packed rows of one half may
// belong to another head than the other's).
__device__ __forceinline__ void join_tile_row_sinks(const FwdParams& p, const TileCoord& c, int seqlen_q,
                                                    int warpgroup_row, int thread, float (&out_scale)[2],
                                                    float (&lse)[2]) {
  if (p.sink == nullptr) return;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const TileRow t = tile_row(p, c, seqlen_q, warpgroup_row, thread, half);
    join_sink(p.sink[t.head], out_scale[half], lse[half]);
  }
}

// How many of the tile's rows are live; they come first (packed rows are ordered by query row).
__device__ __forceinline__ int tile_live_rows(const FwdParams& p, const TileCoord& c, int seqlen_q) {
  const int q_rows_left = seqlen_q - c.m_block * p.tile_q_rows;
  return p.pack_gqa ? min(p.packed_rows, q_rows_left * p.head_ratio) : q_rows_left;
}

// Does this thread hold a live row (either half)? That is whether its first row is below the tile's
// live rows. A split piece's partials of dead rows are neither stored nor combined
// (varlen_combine.cuh): in a decoding step that is most of the tile.
__device__ __forceinline__ bool thread_has_live_row(const FwdParams& p, const TileCoord& c, int seqlen_q,
                                                    int warpgroup_row, int thread) {
  return warpgroup_row + accumulator_row(thread, 0) < tile_live_rows(p, c, seqlen_q);
}

// Does the warpgroup whose first row is warpgroup_row hold any live row? In a decoding tile the
// second warpgroup usually does not (Consumer::mainloop_idle).
__device__ __forceinline__ bool warpgroup_has_live_row(const FwdParams& p, const TileCoord& c, int seqlen_q,
                                                       int warpgroup_row) {
  return warpgroup_row < tile_live_rows(p, c, seqlen_q);
}

// apply_mask (mask.cuh) for a packed tile: row0 is the packed index of the warpgroup's row 0, and each
// row is masked as the query row it holds. The loop body is apply_mask's, repeated for mask.cuh's
// reason: sharing it through a helper changed ptxas's predicate code in every kernel's masked blocks.
template <bool kChunks, int kSRegisters, class Bounds>
__device__ __forceinline__ void apply_mask_packed(float (&s)[kSRegisters], int thread_in_warpgroup, int row0, int n0,
                                                  const Bounds& seq, const FwdParams& p) {
#pragma unroll
  for (int i = 0; i < kSRegisters; ++i) {
    const int row = int(p.head_ratio_divisor.divide(unsigned(row0 + accumulator_row(thread_in_warpgroup, i))));
    const int col = n0 + accumulator_col(thread_in_warpgroup, i);
    const int diagonal = row + seq.seqlen_k - seq.seqlen_q;
    int key_end = seq.seqlen_k;
    if (seq.window_right >= 0) key_end = min(key_end, diagonal + seq.window_right + 1);
    const int key_begin = seq.window_left >= 0 ? diagonal - seq.window_left : 0;
    if (col >= key_end || col < key_begin) s[i] = -INFINITY;
  }
  if (kChunks && seq.attention_chunk > 0) {
    apply_chunk_mask(
        s, p.chunk_divisor, n0,
        [&](int i) {
          const int row = int(p.head_ratio_divisor.divide(unsigned(row0 + accumulator_row(thread_in_warpgroup, i))));
          return row + seq.seqlen_k - seq.seqlen_q;
        },
        [&](int i) { return accumulator_col(thread_in_warpgroup, i); });
  }
}

// Stores O registers [first, first + kRegisters) of `thread` (o[i] is register first + i, first a
// multiple of 4) to the rows tile_row maps them to, scaled per row half by out_scale, and with_lse
// its rows' LSE from one thread per quad; dead rows store nothing. seq: the tile's sequence (rows from
// q_row0 of q_batch in a packed out). Through registers: a packed tile's rows are not one box of out.
// kBf16 / Element: the output's 16-bit type (the FP8 kernels store bf16).
template <bool kBf16, typename Element, int kRegisters>
__device__ __forceinline__ void store_tile_registers(const FwdParams& p, const VarlenSequence& seq,
                                                     const TileCoord& c, int warpgroup_row, int thread, int first,
                                                     const float (&o)[kRegisters], const float (&out_scale)[2],
                                                     const float (&lse)[2], bool with_lse) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const TileRow t = tile_row(p, c, seq.bounds.seqlen_q, warpgroup_row, thread, half);
    if (!t.live) continue;
    const std::int64_t row = seq.rows.q_row0 + t.q_row;
    Element* out = static_cast<Element*>(p.out) + seq.rows.q_batch * p.out_batch_stride + row * p.out_row_stride +
                   t.head * p.out_head_stride;
#pragma unroll
    for (int i = 0; i < kRegisters; i += 2) {
      const int col = accumulator_col(thread, first + i);
      if (fragment_row_half(i) != half || col >= p.head_dim_v) continue;  // past it: see store_row_registers
      *reinterpret_cast<std::uint32_t*>(out + col) =
          pack_pair<kBf16>(o[i] * out_scale[half], o[i + 1] * out_scale[half]);
    }
    if (with_lse && p.lse != nullptr && thread % 4 == 0) {
      p.lse[seq.rows.q_batch * p.lse_batch_stride + t.head * p.lse_head_stride + row * p.lse_row_stride] = lse[half];
    }
  }
}

// The epilogue of a packed tile: O normalized and LSE, each live row to its own (row, head) of out.
template <class Traits>
__device__ __forceinline__ void store_packed_output(const FwdParams& p, const VarlenSequence& seq, const TileCoord& c,
                                                    int warpgroup_row, int thread,
                                                    const float (&o)[Traits::kORegisters],
                                                    const OnlineSoftmax<Traits::kSRegisters>& softmax) {
  float inv_sum[2];
  float lse[2];
  finish_rows(p, softmax, inv_sum, lse);
  join_tile_row_sinks(p, c, seq.bounds.seqlen_q, warpgroup_row, thread, inv_sum, lse);
  store_tile_registers<Traits::kIsBf16, typename Traits::Element>(p, seq, c, warpgroup_row, thread, 0, o, inv_sum, lse,
                                                                  true);
}

}  // namespace hopattn::sm90
