// The backward's producer: one elected thread of warpgroup 0 loads the CTA's K and V block once, then
// for every step the consumers will take, in their order, Q, dO and the block's two row statistics by
// TMA, through a ring of kStages stages.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/bwd/block_range.hpp"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/sequence.cuh"
#include "sm90/pipeline/stage_ring.cuh"
#include "sm90/pipeline/tile_load.cuh"

namespace hopattn::sm90 {

struct BwdTensorMaps {
  const CUtensorMap* q;
  const CUtensorMap* k;
  const CUtensorMap* v;
  const CUtensorMap* dout;
  const CUtensorMap* row_stats;
};

// The consumers' stores of dk and dv (consumer.cuh, store_gradient_tiles).
struct GradientMaps {
  const CUtensorMap* dk;
  const CUtensorMap* dv;
};

// The CTA's work: key block n_block of K/V head kv_head of batch entry or sequence `batch`.
struct KeyBlock {
  int n_block, kv_head, batch;
};

// The CTA's steps: every q block that sees one of its keys (block_range.hpp), for each q head that
// reads its K/V head, head by head. Producer and consumers walk the same list. b: the sequence's
// bounds; a key block past the keys its sequence uses (seqused_k) is seen by no row.
// The chunk (attention_chunk) a backward kernel masks with: none (a constant 0, so that every chunk
// test compiles away) but in the kernels for chunks (BwdTraits::kChunksAndSequsedQ).
template <class Traits>
__device__ __forceinline__ int kernel_chunk(const SequenceBounds& b) {
  return Traits::kChunksAndSequsedQ ? b.attention_chunk : 0;
}

template <class Traits>
struct StepList {
  int first_head, m_begin, m_blocks;

  __device__ StepList(const BwdParams& p, const KeyBlock& block, const SequenceBounds& b) {
    const int n0 = block.n_block * Traits::kBlockN;
    QBlockRange range = q_blocks_seeing<Traits::kBlockM, Traits::kBlockN>(
        n0, b.seqlen_q, b.seqlen_k, b.window_left, b.window_right, kernel_chunk<Traits>(b));
    if (n0 >= b.seqlen_k) range = QBlockRange{0, 0};
    first_head = block.kv_head * p.head_ratio;
    m_begin = range.begin;
    m_blocks = range.end - range.begin;
  }
};

// Tiles start at the sequence's first rows (rows.q_row0, rows.k_row0; 0 in a dense batch). A tile that
// runs past the rows its sequence uses loads whatever lies there (the next sequence's rows, TMA's zero
// fill past the tensor's end, or past seqused_k / seqused_q anything, NaN included): keys there are
// masked and q rows there have P = 0 (their row statistics say lse = +inf), and the consumers zero the
// rows past seqused_k / seqused_q before any GEMM reads them (key_tail.cuh, query_tail.cuh).
template <class Traits>
__device__ void run_backward_producer(typename Traits::SharedStorage& s, const BwdTensorMaps& maps,
                                      const BwdParams& p, const KeyBlock& block, const BwdSequence& seq) {
  using QTile = typename Traits::QTile;
  using DoTile = typename Traits::DoTile;
  using KTile = typename Traits::KTile;
  using VTile = typename Traits::VTile;
  constexpr int kCols = Traits::kColsPerBlock;
  constexpr bool kUnrolled = !Traits::kSplitsRoles;  // d 192/256's 3-4 column blocks: tile_load.cuh
  const int k_row = seq.rows.k_row0 + block.n_block * Traits::kBlockN;
  mbarrier_arrive_expect_tx(&s.kv_full, KTile::kBytes + VTile::kBytes);
  load_tile<KTile, kCols>(s.k, maps.k, &s.kv_full, k_row, block.kv_head, seq.rows.k_batch);
  load_tile<VTile, kCols>(s.v, maps.v, &s.kv_full, k_row, block.kv_head, seq.rows.k_batch);

  const StepList<Traits> steps(p, block, seq.bounds);
  StageRing<Traits::kStages> ring;
  for (int head = steps.first_head; head < steps.first_head + p.head_ratio; ++head) {
    // Not unrolled: ptxas's four-way unroll spilled the producer's 24 registers once the consumers
    // stored the gradients by TMA (v117).
#pragma unroll 1
    for (int m = steps.m_begin; m < steps.m_begin + steps.m_blocks; ++m) {
      const int stage = ring.index();
      mbarrier_wait(&s.q_empty[stage], ring.phase() ^ 1);  // the consumers are done with the stage
      mbarrier_arrive_expect_tx(&s.q_full[stage], QTile::kBytes + DoTile::kBytes + sizeof(s.row_stats[0]));
      const int q_row = seq.rows.q_row0 + m * Traits::kBlockM;
      load_tile<QTile, kCols, kUnrolled>(s.q[stage], maps.q, &s.q_full[stage], q_row, head, seq.rows.q_batch);
      load_tile<DoTile, kCols, kUnrolled>(s.dout[stage], maps.dout, &s.q_full[stage], q_row, head, seq.rows.q_batch);
      tma_load_4d(s.row_stats[stage], maps.row_stats, &s.q_full[stage], 0,
                  workspace_block(p, seq, head, m), 0, 0);
      ring.advance();
    }
  }
}

}  // namespace hopattn::sm90
