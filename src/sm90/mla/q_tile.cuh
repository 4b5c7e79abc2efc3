// The MLA forward's [Q QV] tile: the tile's query rows, q's 64 columns then qv's 512, into shared
// memory by every thread of the CTA (16-byte cp.async copies, all in flight at once, swizzled as TMA
// would). A packed tile's rows come from as many query heads as the ratio gives, which one TMA box cannot
// name at every ratio; rows past the packed ones are zeros. (Copied through registers, one load waiting
// for the last, it took a tenth of a 32-block CTA's time: perf-notes v139.)
#pragma once

#include <cstdint>

#include "sm90/arch/cp_async.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/mla/params.hpp"
#include "sm90/mla/tile.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <class Traits>
__device__ void load_mla_q_tile(std::uint8_t* q_tile, const MlaParams& p, const MlaTile& t, int thread) {
  using Element = typename Traits::Element;
  constexpr int kChunksPerRow = (Traits::kHeadDim + Traits::kHeadDimV) / 8;
  constexpr int kQChunks = Traits::kHeadDim / 8;
  const std::uint32_t tile = smem_address(q_tile);
  for (int idx = thread; idx < Traits::kBlockM * kChunksPerRow; idx += Traits::kThreads) {
    const int r = idx / kChunksPerRow, c = idx % kChunksPerRow;
    const MlaRow row = mla_row(p, t, r, Traits::kBlockM);
    const MlaRows& src = c < kQChunks ? p.q : p.qv;
    const int col = (c < kQChunks ? c : c - kQChunks) * 8;
    const Element* base = static_cast<const Element*>(src.data) + t.batch * src.batch_stride +
                          std::int64_t(row.q_row) * src.row_stride + std::int64_t(row.head) * src.head_stride;
    cp_async_16_or_zero(tile + (c / 8) * Traits::QTile::kColumnBlockBytes + swizzle_128b(r, (c % 8) * 16), base + col,
                        row.live);
  }
  cp_async_wait_all();
  fence_proxy_async_shared();  // the copies wrote through the generic proxy; wgmma reads them
  named_barrier_sync(Traits::kQReadyBarrier, Traits::kThreads);
}

}  // namespace hopattn::sm90
