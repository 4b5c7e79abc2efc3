// The FP8 producer warpgroup. Warp 0: one elected thread hands out the tiles and issues every TMA
// load (Q per tile, K and V per key block through the stage ring). Warps 1..3: transpose each landed
// V stage into the V^T stage the P V GEMM reads (8-bit B must be K-major), permuting keys as
// fp8_layout.hpp explains, so the transpose overlaps the consumers' GEMMs instead of sitting on their
// path.
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd_fp8/fp8_layout.hpp"
#include "sm90/fwd_fp8/params.hpp"
#include "sm90/fwd/producer.cuh"
#include "sm90/pipeline/stage_ring.cuh"

namespace hopattn::sm90 {

// Where V^T comes from global memory (Traits::kVtFromGlobal) K's rows are loaded permuted within each
// 16-key group (fp8_layout.hpp, key_of_s_column), except in the block that reaches the end of the keys
// (fp8::k_block_in_key_order): one box per column block where K's heads and batches fold into the
// map (k_groups_per_batch > 0, host/tensor_map.hpp), else two 8-row boxes per group and column
// block (24 TMA instructions at 192 keys, 3-6% more cycles than one box on the H200).
template <class Traits>
__device__ __forceinline__ void load_permuted_k(std::uint8_t* stage, const CUtensorMap* tm_k_permuted,
                                                std::uint64_t* full, int n0, int kv_head, int batch,
                                                int k_groups_per_batch) {
  using KTile = typename Traits::KTile;
  if (k_groups_per_batch > 0) {
    const int group = batch * k_groups_per_batch + n0 / 16;
#pragma unroll
    for (int cb = 0; cb < KTile::kColumnBlocks; ++cb) {
      tma_load_5d(stage + cb * KTile::kColumnBlockBytes, tm_k_permuted, full,
                  kv_head * Traits::kHeadDim + cb * Traits::kColsPerBlock, 0, 0, 0, group);
    }
    return;
  }
  // A loop, not unrolled: the producer warpgroup has 24 registers (traits.cuh).
#pragma unroll 1
  for (int group = 0; group < Traits::kBlockN / 16; ++group) {
    std::uint8_t* rows = stage + 16 * group * kSwizzleBytes;
    const int first_quad = (n0 + 16 * group) / 4;
#pragma unroll
    for (int cb = 0; cb < KTile::kColumnBlocks; ++cb) {
      tma_load_5d(rows + cb * KTile::kColumnBlockBytes, tm_k_permuted, full, cb * Traits::kColsPerBlock, 0,
                  first_quad, kv_head, batch);
      tma_load_5d(rows + cb * KTile::kColumnBlockBytes + 8 * kSwizzleBytes, tm_k_permuted, full,
                  cb * Traits::kColsPerBlock, 2, first_quad, kv_head, batch);
    }
  }
}

// A paged cache's rows of K/V block n (FwdParams::page_table; v: a tile with keys) into `smem`, a box a
// chunk as the 16-bit producer's load_paged_chunks (fwd/producer.cuh), but with the table entries read
// kPagesInFlight at a time, each group before its boxes are issued: read, then box, chunk after chunk,
// cost ~300 cycles a chunk (pages of 16 keys: ~5000 cycles a 128-key block of K and V, twice the block's
// own time in FP8 decoding). As many as the producer's 24 registers hold. (The 16-bit producer's reads a
// block ahead, PagedChunkIds, spilled 4 bytes of the V transposers here: they share those 24 registers.)
// The caller has armed `full` for the whole tile.
template <class Tile, int kColsPerBlock, int kBlockN>
__device__ __forceinline__ void load_fp8_paged_chunks(const FwdParams& p, const VarlenVisit& v, std::uint8_t* smem,
                                                      const CUtensorMap* map, std::uint64_t* full, int kv_head,
                                                      int n) {
  constexpr int kPagesInFlight = 4;
  const int chunk_rows = paged_chunk_rows(p.page_size, kBlockN);
  const int page_shift = __ffs(p.page_size) - 1;  // a power of two
  const int* table = p.page_table + v.coord.batch * p.page_table_batch_stride;
  const int last_key = v.seq.bounds.seqlen_k - 1;
  for (int first = 0; first < kBlockN; first += kPagesInFlight * chunk_rows) {
    int page[kPagesInFlight];
#pragma unroll
    for (int i = 0; i < kPagesInFlight; ++i) {
      const int key = min(n * kBlockN + first + i * chunk_rows, last_key);
      if (first + i * chunk_rows < kBlockN) page[i] = __ldg(table + (key >> page_shift) * p.page_table_page_stride);
    }
#pragma unroll
    for (int i = 0; i < kPagesInFlight; ++i) {
      const int row = first + i * chunk_rows;
      if (row < kBlockN) {
        const int key = min(n * kBlockN + row, last_key);
        load_tile<Tile, kColsPerBlock>(smem + row * kSwizzleBytes, map, full, key & (p.page_size - 1), kv_head,
                                       page[i]);
      }
    }
  }
}

// The hand-out of scheduler.cuh: the first item is blockIdx.x, the next ones are claimed; each visit
// of an item (a whole tile, or a split unit's pieces) is published to the consumers (s.visit, then
// q_full) once they are done with the previous Q tile, and kNoVisitLeft tells them to stop. Then the
// transposers, where there are any, are told to stop (finish_v). A variable-length launch
// (Traits::kVarlen) skips the tiles past their sequence's last row, loads from each tile's sequence
// rows (fwd/sequence.cuh), or page by page from a paged cache (load_fp8_paged_chunks), and tells the
// transposers how many rows of each V stage hold its keys; a packed GQA tile (FwdParams::pack_gqa)
// loads its tile_q_rows rows of every query head of its K/V head through the 5D map of
// make_packed_q_map, as the 16-bit producer's publish_varlen_visit does.
template <class Traits>
__device__ void run_fp8_loads(typename Traits::SharedStorage& s, const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                              const CUtensorMap* tm_k_permuted, const CUtensorMap* tm_v, const Fp8FwdParams& fp) {
  const FwdParams& p = fp.base;
  constexpr int kCols = Traits::kColsPerBlock;
  StageRing<Traits::kStages> ring;
  std::uint32_t q_phase = 0;
  VisitSequence visits(p);
  while (true) {
    const int id = visits.next();
    [[maybe_unused]] VarlenVisit varlen;
    if constexpr (Traits::kVarlen) {
      if (id != kNoVisitLeft) {
        varlen =
            decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit, Traits::kChunksAndSequsedQ>(p,
                                                                                                                    id);
        if (varlen_tile_is_empty(p, varlen)) continue;
      }
    }
    mbarrier_wait(&s.q_empty, q_phase ^ 1);  // consumers done with the previous Q tile and visit
    q_phase ^= 1;
    publish_visit(&s.visit, id);
    if (id == kNoVisitLeft) {
      mbarrier_arrive(&s.q_full);
      break;
    }
    // The tile's rows of q, and of k and v (from k_row0, in TMA batch entry k_batch).
    TileVisit v;
    TileCoord c;
    int q_row, q_batch, k_row0, k_batch, kv_head;
    if constexpr (Traits::kVarlen) {
      v = varlen.visit, c = varlen.coord;
      q_row = varlen.seq.rows.q_row0 + c.m_block * p.tile_q_rows, q_batch = varlen.seq.rows.q_batch;
      k_row0 = varlen.seq.rows.k_row0, k_batch = varlen.seq.rows.k_batch;
      kv_head = varlen_kv_head<Traits>(p, c);
    } else {
      v = decode_visit<Traits::kBlockM, Traits::kBlockN, Traits::kChunksAndSequsedQ>(p, id);
      c = decode_tile(p, v.tile);
      q_row = c.m_block * Traits::kBlockM, q_batch = c.batch, k_row0 = 0, k_batch = c.batch;
      kv_head = c.head / p.head_ratio;
    }
    if (Traits::kPacksGqa && p.pack_gqa) {
      using QTile = typename Traits::QTile;
      mbarrier_arrive_expect_tx(&s.q_full, p.packed_rows * (QTile::kBytes / Traits::kBlockM));
#pragma unroll
      for (int cb = 0; cb < QTile::kColumnBlocks; ++cb) {
        tma_load_5d(s.q + cb * QTile::kColumnBlockBytes, tm_q, &s.q_full, cb * kCols, 0, c.head, q_row, q_batch);
      }
    } else {
      mbarrier_arrive_expect_tx(&s.q_full, Traits::QTile::kBytes);
      load_tile<typename Traits::QTile, kCols>(s.q, tm_q, &s.q_full, q_row, c.head, q_batch);
    }
    for (int n = v.n_end - 1; n >= v.n_begin; --n) {  // the consumers' order
      const int stage = ring.index();
      mbarrier_wait(&s.k_empty[stage], ring.phase() ^ 1);
      mbarrier_arrive_expect_tx(&s.k_full[stage], Traits::KTile::kBytes);
      if (Traits::kVtFromGlobal && !fp8::k_block_in_key_order(n, Traits::kBlockN, p.seqlen_k)) {
        load_permuted_k<Traits>(s.k[stage], tm_k_permuted, &s.k_full[stage], n * Traits::kBlockN, kv_head, c.batch,
                                fp.k_groups_per_batch);
      } else if (Traits::kPagedKv && p.page_table != nullptr) {
        load_fp8_paged_chunks<typename Traits::KTile, kCols, Traits::kBlockN>(p, varlen, s.k[stage], tm_k,
                                                                             &s.k_full[stage], kv_head, n);
      } else {
        load_tile<typename Traits::KTile, kCols>(s.k[stage], tm_k, &s.k_full[stage], k_row0 + n * Traits::kBlockN,
                                                 kv_head, k_batch);
      }
      if constexpr (Traits::kVtFromGlobal) {
        // V^T (head-dim rows x keys), in column blocks of 128 keys (64 at 192 keys, traits.cuh).
        using VtTile = typename Traits::VtTile;
        mbarrier_wait(&s.vt_empty[stage], ring.phase() ^ 1);  // consumers done with this V^T stage
        mbarrier_arrive_expect_tx(&s.vt_full[stage], VtTile::kBytes);
#pragma unroll
        for (int cb = 0; cb < VtTile::kColumnBlocks; ++cb) {
          tma_load_4d(s.vt[stage] + cb * VtTile::kColumnBlockBytes, tm_v, &s.vt_full[stage],
                      n * Traits::kBlockN + cb * VtTile::kColsPerBlock, 0, kv_head, c.batch);
        }
      } else {
        mbarrier_wait(&s.v_empty[stage], ring.phase() ^ 1);  // transposers done reading this V stage
        if constexpr (Traits::kVarlen) {
          // Ordered before the transposers' read by v_full's arrive and wait; atomic for racecheck.
          atomicExch(&s.v_rows[stage], min(varlen.seq.bounds.seqlen_k - n * Traits::kBlockN, Traits::kBlockN));
        }
        mbarrier_arrive_expect_tx(&s.v_full[stage], Traits::VTile::kBytes);
        if (Traits::kPagedKv && p.page_table != nullptr) {
          load_fp8_paged_chunks<typename Traits::VTile, kCols, Traits::kBlockN>(p, varlen, s.v[stage], tm_v,
                                                                               &s.v_full[stage], kv_head, n);
        } else {
          load_tile<typename Traits::VTile, kCols>(s.v[stage], tm_v, &s.v_full[stage], k_row0 + n * Traits::kBlockN,
                                                   kv_head, k_batch);
        }
      }
      ring.advance();
    }
  }
  finish_schedule(p);
  if constexpr (!Traits::kVtFromGlobal) {
    // finish_v: the next V stage completes without data, with its v_end set (released by the
    // arrive), once the transposers are done with what it held. Per stage: the transposers may still
    // be on earlier stages, whose flags must stay 0.
    const int stage = ring.index();
    mbarrier_wait(&s.v_empty[stage], ring.phase() ^ 1);
    atomicExch(&s.v_end[stage], 1);  // ordered by the v_empty wait; atomic for racecheck, as s.visit
    mbarrier_arrive(&s.v_full[stage]);
  }
}

// Variable-length kernels: zeroes rows [first_row, kBlockN) of a landed V stage, the rows past the
// sequence's keys, which hold whatever the caller's memory holds there (the rows between seqused_k
// and the next sequence, padding after the last one; fwd/v_tail.cuh says why: P is 0 there, but 0 x
// NaN is NaN, and any byte 0x7f or 0xff is an e4m3 NaN). Whole 128-byte rows of each column block, so
// the swizzle (a permutation within a row) does not matter; each 16-byte chunk has one owner among
// the transposer threads. Then every transposer warp waits for the others before it reads the stage.
template <class Traits>
__device__ __forceinline__ void clear_fp8_v_tail(std::uint32_t v_stage, int first_row) {
  using VTile = typename Traits::VTile;
  constexpr int kChunksPerRow = kSwizzleBytes / 16;
  const int thread = static_cast<int>(threadIdx.x) - 32;  // warps 1..3 of the producer warpgroup
#pragma unroll
  for (int block = 0; block < VTile::kColumnBlocks; ++block) {
    for (int chunk = first_row * kChunksPerRow + thread; chunk < Traits::kBlockN * kChunksPerRow;
         chunk += Traits::kTransposerThreads) {
      store_zero_16b(v_stage + block * VTile::kColumnBlockBytes + chunk * 16);
    }
  }
  named_barrier_sync(Traits::kTransposerBarrier, Traits::kTransposerThreads);
}

// V (keys x dims, TMA layout) -> V^T (dims x reduction columns), V^T[d][a] = V[key_of_column(a)][d],
// by kWarps warps on the same stage. A task is one LDSM.T, four PRMT and one STSM (fp8_layout.hpp
// derives the maps); each lane derives its two row addresses of task 0 and reaches every other task by
// XOR with compile-time constants, one LOP3 per address at most, the rest folded into the immediate.
template <class VTile, class VtTile, int kHeadDim, int kKeys, int kWarps>
class VTransposer {
 public:
  // Warp `warp` (0..kWarps-1) takes a contiguous run of the key-group-major task order
  // (fp8::transpose_first_position); one code path per warp keeps the tasks, and so the XOR
  // constants, known at compile time. v and vt: 1024-byte aligned stages.
  // The lane id is read per stage (a volatile read the compiler cannot hoist), so the lane's task-0
  // offsets and selectors are not held across the stage loop: the producer warpgroup has 24 registers.
  __device__ static void transpose(std::uint32_t v, std::uint32_t vt, unsigned warp) {
    std::uint32_t lane_id;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane_id));
    const int lane = static_cast<int>(lane_id & 31u);  // known non-negative: shifts, not signed divisions
    const std::uint32_t select[2] = {fp8::transpose_selector(lane, 0), fp8::transpose_selector(lane, 1)};
    transpose_as<0>(v + fp8::transpose_load_offset<VTile>(0, kKeys, lane),
                    vt + fp8::transpose_store_offset<VtTile>(0, kKeys, lane), select, warp);
  }

 private:
  template <unsigned kWarp>
  __device__ __forceinline__ static void transpose_as(std::uint32_t load, std::uint32_t store,
                                                      const std::uint32_t (&select)[2], unsigned warp) {
    if constexpr (kWarp + 1 < kWarps) {
      if (warp != kWarp) return transpose_as<kWarp + 1>(load, store, select, warp);
    }
    constexpr int kFirst = fp8::transpose_first_position(kWarp, kWarps, kHeadDim, kKeys);
    constexpr int kEnd = fp8::transpose_first_position(kWarp + 1, kWarps, kHeadDim, kKeys);
#pragma unroll
    for (int position = kFirst; position < kEnd; ++position) {
      const int task = fp8::transpose_task_at(position, kHeadDim, kKeys);
      std::uint32_t in[4];
      ldmatrix_x4_trans(fp8::transpose_task_address(load, fp8::transpose_load_xor<VTile>(task, kKeys)), in);
      const std::uint32_t out[4] = {__byte_perm(in[0], in[1], select[0]), __byte_perm(in[0], in[1], select[1]),
                                    __byte_perm(in[2], in[3], select[0]), __byte_perm(in[2], in[3], select[1])};
      stmatrix_x4(fp8::transpose_task_address(store, fp8::transpose_store_xor<VtTile>(task, kKeys)), out);
    }
  }
};

// Transposer warp `warp` (0..kTransposeWarps-1): one V^T stage per landed V stage, in the loads' order,
// until the TMA thread marks a stage as the end (v_end). It needs no tile index: the stages arrive in
// the order the consumers read them.
template <class Traits>
__device__ void run_v_transposer(typename Traits::SharedStorage& s, unsigned warp) {
  const int lane = threadIdx.x % 32;
  using Transposer = VTransposer<typename Traits::VTile, typename Traits::VtTile, Traits::kHeadDimV, Traits::kBlockN,
                                 Traits::kTransposeWarps>;
  // The ring position as one count of stages seen, not StageRing's index and phase: with 24 registers
  // the transposers have none to spare.
  for (std::uint32_t position = 0;; ++position) {
    const int stage = static_cast<int>(position % Traits::kStages);
    const std::uint32_t phase = (position / Traits::kStages) & 1;
    mbarrier_wait(&s.v_full[stage], phase);  // TMA -> us: V landed, or no V block follows
    // Atomic read: every lane reads the flag but only lane 0 arrives on v_empty after the __syncwarp,
    // an order compute-sanitizer racecheck does not model (it flags the TMA thread's next write).
    if (atomicOr(&s.v_end[stage], 0)) return;
    mbarrier_wait(&s.vt_empty[stage], phase ^ 1);  // consumers done with this V^T stage
    if constexpr (Traits::kVarlen) {
      const int rows = atomicOr(&s.v_rows[stage], 0);  // the same value in every transposer thread
      if (rows < Traits::kBlockN) clear_fp8_v_tail<Traits>(smem_address(s.v[stage]), rows);
    }
    Transposer::transpose(smem_address(s.v[stage]), smem_address(s.vt[stage]), warp);
    fence_proxy_async_shared();  // our generic stores -> the consumers' wgmma (async proxy) reads
    __syncwarp();
    if (lane == 0) {
      mbarrier_arrive(&s.vt_full[stage]);
      mbarrier_arrive(&s.v_empty[stage]);
    }
  }
}

}  // namespace hopattn::sm90
