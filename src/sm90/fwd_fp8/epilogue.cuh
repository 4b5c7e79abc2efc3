// Epilogue of an FP8 consumer warpgroup: O / l times the v scale, stored as bf16, through the shared
// O stage and a TMA store where the traits have a stage and out is TMA-addressable (the 16-bit
// kernel's store_rows_through_smem), else as bf16 pairs from the accumulator registers; LSE (natural
// log) from the log2-unit running max and the 2^8-offset row sum. Rows past seqlen_q are dropped; a
// row that saw no key stores 0 and LSE -inf. A variable-length tile stores into its sequence's rows
// (store_fp8_varlen_output).
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/fwd/combine_rows.cuh"
#include "sm90/fwd/epilogue.cuh"
#include "sm90/fwd/packed_gqa.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/sequence.cuh"
#include "sm90/fwd/sink.cuh"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd_fp8/softmax.cuh"
#include "sm90/tile/fragment.hpp"

namespace hopattn::sm90 {

// Per row half: the factor O is stored times (v scale / row sum; 0 for a row that saw no key) and LSE.
template <class Softmax>
__device__ __forceinline__ void fp8_finish_rows(const Softmax& softmax, float v_scale, float (&out_scale)[2],
                                                float (&lse)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(softmax.row_sum[r]);
    const bool empty = sum == 0.0f;
    // A non-empty row's sum is at least 2^8 (its max term), so the fast division and log2 (MUFU, a
    // few ulp) suffice, as in finish_rows (fwd/epilogue.cuh).
    out_scale[r] = empty ? 0.0f : __fdividef(v_scale, sum);
    // P = 2^(t - max + 8): log2 of the true sum is max - 8 + log2(sum).
    lse[r] = empty ? -INFINITY : (softmax.row_max[r] - kFp8POffsetLog2 + __log2f(sum)) * static_cast<float>(M_LN2);
  }
}

template <class Traits, class Softmax>
__device__ __forceinline__ void store_fp8_output(const FwdParams& p, typename Traits::SharedStorage& s,
                                                 const CUtensorMap* tm_o, const TileCoord& c, int warpgroup, int row0,
                                                 int thread, const float (&o)[Traits::kORegisters],
                                                 const Softmax& softmax, float v_scale, int split_slot) {
  float out_scale[2];
  float lse[2];
  fp8_finish_rows(softmax, v_scale, out_scale, lse);
  if constexpr (Traits::kTailSplit) {
    if (__builtin_expect(split_slot >= 0, 0)) {  // a split piece: the combine kernel stores the tile
      store_combine_partial<Traits::kORegisters, Traits::kConsumerWarpgroups>(p, split_slot, warpgroup, thread, o,
                                                                              out_scale, lse);
      return;
    }
  }
  join_head_sink(p, c.head, out_scale, lse);
  if constexpr (Traits::kOThroughSmem) {
    // The API makes every CUDA out TMA-addressable, so the register path below only serves launches
    // that bypass its validation. Deleting it here cost the 192-key kernel 0.5% of cycles at 16k and
    // the 128-key one 2.3% at 2k: ptxas schedules the mainloop differently (H200, 2026-12-01).
    if (p.store_o_by_tma) {
      store_rows_through_smem<Traits, true>(p, p, s, tm_o, c, warpgroup, row0, thread, o, out_scale, lse);
      return;
    }
  }
  store_rows<true, __nv_bfloat16>(p, p, c, row0, thread, o, out_scale, lse);
}

// The same for a tile of a variable-length batch (Traits::kVarlen): its rows in out's coordinates
// start at its sequence's first row in the packed out, whose tensor map ends only at the last
// sequence's end. So a warpgroup whose rows run past its own sequence stores through registers, as
// the 16-bit kernel's store_varlen_tile does: by TMA it would overwrite the next sequence's rows. A
// split piece (split_slot >= 0, Traits::kVarlenSplit) stores its live rows' O and LSE for the combine
// kernel instead (the 16-bit kernel's store_varlen_piece).
template <class Traits, class Softmax>
__device__ __forceinline__ void store_fp8_varlen_output(const FwdParams& p, typename Traits::SharedStorage& s,
                                                        const CUtensorMap* tm_o, const TileCoord& c, int warpgroup,
                                                        int row0, int thread, const float (&o)[Traits::kORegisters],
                                                        const Softmax& softmax, float v_scale, int split_slot) {
  float out_scale[2];
  float lse[2];
  fp8_finish_rows(softmax, v_scale, out_scale, lse);
  const VarlenSequence sequence = varlen_sequence<Traits::kChunksAndSequsedQ>(p, c.batch);
  if constexpr (Traits::kVarlenSplit) {
    if (split_slot >= 0) {
      if (thread_has_live_row(p, c, sequence.bounds.seqlen_q, warpgroup * Traits::kRowsPerWarpgroup, thread)) {
        store_combine_partial<Traits::kORegisters, Traits::kConsumerWarpgroups>(p, split_slot, warpgroup, thread, o,
                                                                                out_scale, lse);
      }
      return;
    }
  }
  // Packed or not, tile_row names each row half's head.
  join_tile_row_sinks(p, c, sequence.bounds.seqlen_q, warpgroup * Traits::kRowsPerWarpgroup, thread, out_scale, lse);
  if (Traits::kPacksGqa && p.pack_gqa) {  // each live row to its own (row, head) of out
    store_tile_registers<true, __nv_bfloat16>(p, sequence, c, warpgroup * Traits::kRowsPerWarpgroup, thread, 0, o,
                                              out_scale, lse, true);
    return;
  }
  const TileCoord out_c{c.m_block, c.head, sequence.rows.q_batch};
  const PackedRowEnd rows{sequence.rows.q_row0 + sequence.bounds.seqlen_q};
  const int out_row0 = sequence.rows.q_row0 + row0;
  if constexpr (Traits::kOThroughSmem) {
    if (p.store_o_by_tma && row0 + Traits::kRowsPerWarpgroup <= sequence.bounds.seqlen_q) {
      store_rows_through_smem<Traits, true>(p, rows, s, tm_o, out_c, warpgroup, out_row0, thread, o, out_scale, lse);
      return;
    }
  }
  store_rows<true, __nv_bfloat16>(p, rows, out_c, out_row0, thread, o, out_scale, lse);
}

}  // namespace hopattn::sm90
