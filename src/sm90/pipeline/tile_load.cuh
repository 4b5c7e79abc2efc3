// TMA load of a whole swizzled tile, one box per 128-byte column block (a box is at most 128 bytes
// wide under the 128B swizzle). Shared by the forward and backward producers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "sm90/arch/tma.cuh"

namespace hopattn::sm90 {

// Loads the kColumnBlocks 64-column boxes of one tile (rows [row0, row0 + box rows)) into smem.
// kUnrolled false keeps the loop: a producer warp at 24 registers spilled the unrolled loads' addresses
// and coordinates of four-block tiles in the d 256 backward.
template <class Tile, int kColsPerBlock, bool kUnrolled = true>
__device__ __forceinline__ void load_tile(std::uint8_t* smem, const CUtensorMap* map, std::uint64_t* full,
                                          int row0, int head, int batch) {
  const auto load = [&](int cb) {
    tma_load_4d(smem + cb * Tile::kColumnBlockBytes, map, full, cb * kColsPerBlock, row0, head, batch);
  };
  if constexpr (kUnrolled) {
#pragma unroll
    for (int cb = 0; cb < Tile::kColumnBlocks; ++cb) load(cb);
  } else {
#pragma unroll 1
    for (int cb = 0; cb < Tile::kColumnBlocks; ++cb) load(cb);
  }
}

}  // namespace hopattn::sm90
