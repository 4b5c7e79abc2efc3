// Epilogue of one consumer warpgroup: normalize O by the row sums and store it, either as 16-bit
// pairs straight from the accumulator registers or staged in shared memory for a TMA store, and store
// LSE (natural log). Rows at or past `rows.seqlen_q` are dropped: `rows` is FwdParams for a dense batch,
// or a variable-length tile's PackedRowEnd (sequence.cuh: its sequence's end in the packed out; the
// field name matches so that the dense kernels read FwdParams where they always did). A row that saw
// no key stores 0 and LSE -inf (its sink with a learnable sink: sink.cuh).
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/sink.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/tile/a_fragment.cuh"
#include "sm90/tile/fragment.hpp"

namespace hopattn::sm90 {

// LSE of the thread's two rows, from one thread per quad; rows at or past rows.seqlen_q are dropped.
template <class RowEnd>
__device__ __forceinline__ void store_lse_rows(const FwdParams& p, const RowEnd& rows, const TileCoord& c, int row0,
                                               int thread, const float (&lse)[2]) {
  if (p.lse != nullptr && thread % 4 == 0) {
    float* lse_base = p.lse + c.batch * p.lse_batch_stride + c.head * p.lse_head_stride;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + accumulator_row(thread, 2 * r);
      if (row < rows.seqlen_q) lse_base[row * p.lse_row_stride] = lse[r];
    }
  }
}

// Stores O registers [first, first + kRegisters) of a warpgroup's 64 rows (o[i] is register first + i;
// first a multiple of 4), scaled per row by out_scale, as 16-bit pairs straight from the accumulator
// registers; rows at or past rows.seqlen_q and columns past p.head_dim_v are dropped (a pair never
// straddles it: head_dim_v is even).
template <bool kBf16, typename Element, int kRegisters, class RowEnd>
__device__ __forceinline__ void store_row_registers(const FwdParams& p, const RowEnd& rows, const TileCoord& c,
                                                    int row0, int thread, int first, const float (&o)[kRegisters],
                                                    const float (&out_scale)[2]) {
  Element* out = static_cast<Element*>(p.out) + c.batch * p.out_batch_stride + c.head * p.out_head_stride;
#pragma unroll
  for (int i = 0; i < kRegisters; i += 2) {
    const int r = fragment_row_half(i);
    const int row = row0 + accumulator_row(thread, first + i);
    const int col = accumulator_col(thread, first + i);
    if (row < rows.seqlen_q && col < p.head_dim_v) {
      *reinterpret_cast<std::uint32_t*>(out + row * p.out_row_stride + col) =
          pack_pair<kBf16>(o[i] * out_scale[r], o[i + 1] * out_scale[r]);
    }
  }
}

// Stores a warpgroup's 64 rows (every O register) and LSE. Shared by the 16-bit and FP8 kernels.
template <bool kBf16, typename Element, int kORegisters, class RowEnd>
__device__ __forceinline__ void store_rows(const FwdParams& p, const RowEnd& rows, const TileCoord& c, int row0,
                                           int thread, const float (&o)[kORegisters], const float (&out_scale)[2],
                                           const float (&lse)[2]) {
  store_row_registers<kBf16, Element>(p, rows, c, row0, thread, 0, o, out_scale);
  store_lse_rows(p, rows, c, row0, thread, lse);
}

// 1 / row sum (0 for a row that saw no key) and LSE (natural log; -inf for such a row) per row half.
// A non-empty row's sum is at least 1 (its max term is exp2(0)), so the fast reciprocal and log
// (MUFU.RCP, MUFU.LG2: a few ulp) are exact enough for 16-bit outputs and an LSE checked to 1e-3; the
// IEEE division and logf were a call with a slow path on every tile's critical path.
template <int kSRegisters>
__device__ __forceinline__ void finish_rows(const FwdParams& p, const OnlineSoftmax<kSRegisters>& softmax,
                                            float (&inv_sum)[2], float (&lse)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(softmax.row_sum[r]);
    const bool empty = sum == 0.0f;
    inv_sum[r] = empty ? 0.0f : __fdividef(1.0f, sum);
    lse[r] = empty ? -INFINITY : softmax.row_max[r] * p.logit_scale + __logf(sum);
  }
}

template <class Traits, class RowEnd>
__device__ __forceinline__ void store_output(const FwdParams& p, const RowEnd& rows, const TileCoord& c, int row0,
                                             int thread, float (&o)[Traits::kORegisters],
                                             OnlineSoftmax<Traits::kSRegisters>& softmax) {
  float inv_sum[2];
  float lse[2];
  finish_rows(p, softmax, inv_sum, lse);
  join_head_sink(p, c.head, inv_sum, lse);
  store_rows<Traits::kIsBf16, typename Traits::Element>(p, rows, c, row0, thread, o, inv_sum, lse);
}

// Shared O stage (Traits::kOStageShared): the consumer warpgroups take it in turns, 0, 1, ..., in the
// order they finish a tile (every warpgroup runs the same tiles). The last warpgroup grants warpgroup
// 0 its first turn; warp 0 of the owner hands it on once its TMA stores have read the stage; at exit
// warpgroup 0 consumes the last hand-over (or the first grant, if the CTA had no tile), so no
// barrier is left half-arrived.
template <class Traits>
__device__ __forceinline__ int o_turn_barrier(int warpgroup) {
  return Traits::kOTurnBarrierBase + warpgroup;
}
template <class Traits>
__device__ __forceinline__ void grant_first_o_turn(int warpgroup, int thread) {
  if (warpgroup == Traits::kConsumerWarpgroups - 1 && thread < 32) {
    named_barrier_arrive(o_turn_barrier<Traits>(0), Traits::kOTurnBarrierThreads);
  }
}
template <class Traits>
__device__ __forceinline__ void take_o_turn(int warpgroup) {
  named_barrier_sync(o_turn_barrier<Traits>(warpgroup), Traits::kOTurnBarrierThreads);
}
template <class Traits>
__device__ __forceinline__ void pass_o_turn(int warpgroup, int thread) {
  if (thread >= 32) return;
  if (thread == 0) tma_store_wait_read();  // our rows have left the stage
  __syncwarp();
  named_barrier_arrive(o_turn_barrier<Traits>((warpgroup + 1) % Traits::kConsumerWarpgroups),
                       Traits::kOTurnBarrierThreads);
}
// A warpgroup that stores nothing for this visit (a split piece another one merges) still takes and
// passes its turn, so the round-robin order holds.
template <class Traits>
__device__ __forceinline__ void skip_o_turn(int warpgroup, int thread) {
  take_o_turn<Traits>(warpgroup);
  pass_o_turn<Traits>(warpgroup, thread);
}
template <class Traits>
__device__ __forceinline__ void retire_o_turns(int warpgroup) {
  if (warpgroup == 0) take_o_turn<Traits>(0);
}

// The same through shared memory: the warpgroup writes its 64 normalized rows into its rows of the
// O stage (swizzled like Q) by stmatrix (store_accumulator_rows, a_fragment.cuh). One thread
// TMA-stores the rows, 64 columns per box; rows and columns past the tensor map's end are not written
// (a dense map ends at seqlen_q; a packed one at the last sequence's end, so callers store a
// variable-length warpgroup whose rows run past its sequence through registers instead). Its own rows
// (kOStagePerWarpgroup) are rewritten only once the previous tile's stores have read them
// (tma_store_wait_read), so the stores overlap the next tile's mainloop; a shared stage is taken and
// handed on as above. O is scaled per row by out_scale; kBf16 picks the 16-bit output type.
// Shared by the 16-bit and FP8 kernels; call tma_store_wait_all from the issuing thread (thread 0)
// before the CTA exits.
template <class Traits, bool kBf16, class RowEnd>
__device__ __forceinline__ void store_rows_through_smem(const FwdParams& p, const RowEnd& rows,
                                                        typename Traits::SharedStorage& s, const CUtensorMap* tm_o,
                                                        const TileCoord& c, int warpgroup, int row0, int thread,
                                                        const float (&o)[Traits::kORegisters],
                                                        const float (&out_scale)[2], const float (&lse)[2]) {
  using Tile = typename Traits::OTile;
  constexpr int kRows = Traits::kRowsPerWarpgroup;
  const int barrier = Traits::kEpilogueBarrierBase + warpgroup;
  const int stage_row0 = Traits::kOStageShared ? 0 : warpgroup * kRows;
  if constexpr (Traits::kOStageShared) {
    take_o_turn<Traits>(warpgroup);
  } else {
    if (thread == 0) tma_store_wait_read();  // the previous tile's O has left our rows
    named_barrier_sync(barrier, Traits::kEpilogueBarrierThreads);
  }
  std::uint8_t* stage = s.o.bytes;
  store_accumulator_rows<Tile, kBf16>(smem_address(stage), stage_row0, thread, o, out_scale);
  fence_proxy_async_shared();  // our generic stores -> the TMA unit's (async proxy) reads
  named_barrier_sync(barrier, Traits::kEpilogueBarrierThreads);
  if (thread == 0 && row0 < rows.seqlen_q) {
#pragma unroll
    for (int cb = 0; cb < Tile::kColumnBlocks; ++cb) {
      tma_store_4d(tm_o, stage + cb * Tile::kColumnBlockBytes + stage_row0 * kSwizzleBytes,
                   cb * Tile::kColsPerBlock, row0, c.head, c.batch);
    }
    tma_store_commit();
  }
  if constexpr (Traits::kOStageShared) pass_o_turn<Traits>(warpgroup, thread);
  store_lse_rows(p, rows, c, row0, thread, lse);
}

template <class Traits, class RowEnd>
__device__ __forceinline__ void store_output_through_smem(const FwdParams& p, const RowEnd& rows,
                                                          typename Traits::SharedStorage& s, const CUtensorMap* tm_o,
                                                          const TileCoord& c, int warpgroup, int row0, int thread,
                                                          const float (&o)[Traits::kORegisters],
                                                          const OnlineSoftmax<Traits::kSRegisters>& softmax) {
  float inv_sum[2];
  float lse[2];
  finish_rows(p, softmax, inv_sum, lse);
  join_head_sink(p, c.head, inv_sum, lse);
  store_rows_through_smem<Traits, Traits::kIsBf16>(p, rows, s, tm_o, c, warpgroup, row0, thread, o, inv_sum, lse);
}

}  // namespace hopattn::sm90
