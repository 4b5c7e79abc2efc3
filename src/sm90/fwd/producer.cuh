// The producer: one elected thread of the producer warpgroup issues every TMA load. It loads a Q
// tile once per CTA tile and streams K and V blocks through the ring of kStages shared-memory stages.
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/pipeline/stage_ring.cuh"

namespace hopattn::sm90 {

// Loads the kColumnBlocks 64-column boxes of one tile (rows [row0, row0 + box rows)) into smem.
template <class Tile, int kColsPerBlock>
__device__ __forceinline__ void load_tile(std::uint8_t* smem, const CUtensorMap* map, std::uint64_t* full,
                                          int row0, int head, int batch) {
#pragma unroll
  for (int cb = 0; cb < Tile::kColumnBlocks; ++cb) {
    tma_load_4d(smem + cb * Tile::kColumnBlockBytes, map, full, cb * kColsPerBlock, row0, head, batch);
  }
}

template <class Traits>
__device__ void run_producer(typename Traits::SharedStorage& s, const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                             const CUtensorMap* tm_v, const FwdParams& p) {
  using QTile = typename Traits::QTile;
  using KTile = typename Traits::KTile;
  using VTile = typename Traits::VTile;
  constexpr int kCols = Traits::kColsPerBlock;
  StageRing<Traits::kStages> ring;
  std::uint32_t q_phase = 0;
  for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
    TileCoord c = decode_tile(p, tile);
    int kv_head = c.head / p.head_ratio;
    int n_begin, n_end;
    kv_block_range<Traits::kBlockM, Traits::kBlockN>(p, c.m_block, &n_begin, &n_end);

    // Q: the previous tile's consumers must be done with their last S GEMM (q_empty) before we
    // overwrite it. The first wait passes at once (parity of the phase before the first).
    mbarrier_wait(&s.q_empty, q_phase ^ 1);
    mbarrier_arrive_expect_tx(&s.q_full, QTile::kBytes);
    load_tile<QTile, kCols>(s.q, tm_q, &s.q_full, c.m_block * Traits::kBlockM, c.head, c.batch);
    q_phase ^= 1;

    // K/V blocks from the last to the first, the order the consumers use (masked blocks first).
    for (int n = n_end - 1; n >= n_begin; --n) {
      const int stage = ring.index();
      mbarrier_wait(&s.k_empty[stage], ring.phase() ^ 1);
      mbarrier_arrive_expect_tx(&s.k_full[stage], KTile::kBytes);
      load_tile<KTile, kCols>(s.k[stage], tm_k, &s.k_full[stage], n * Traits::kBlockN, kv_head, c.batch);
      mbarrier_wait(&s.v_empty[stage], ring.phase() ^ 1);
      mbarrier_arrive_expect_tx(&s.v_full[stage], VTile::kBytes);
      load_tile<VTile, kCols>(s.v[stage], tm_v, &s.v_full[stage], n * Traits::kBlockN, kv_head, c.batch);
      ring.advance();
    }
  }
}

}  // namespace hopattn::sm90
