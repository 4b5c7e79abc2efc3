// Loads a warpgroup's 64 rows of a K-major swizzled tile into wgmma A fragments (map and why:
// a_fragment.hpp). One ldmatrix.x4 per k-step of 32 bytes.
#pragma once

#include <cstdint>

#include "sm90/arch/shared_access.cuh"
#include "sm90/tile/a_fragment.hpp"

namespace hopattn::sm90 {

// tile: shared-window address of the tile; first_row: the warpgroup's first row in it.
template <class Tile, int kSteps>
__device__ __forceinline__ void load_a_fragments(std::uint32_t tile, int first_row, int thread,
                                                 std::uint32_t (&a)[kSteps][4]) {
  constexpr int kElementBytes = Tile::kColsPerBlock == 64 ? 2 : 1;
  const int row = first_row + a_fragment_load_row(thread);
#pragma unroll
  for (int step = 0; step < kSteps; ++step) {
    ldmatrix_x4(tile + Tile::offset(row, a_fragment_load_byte(thread, step) / kElementBytes), a[step]);
  }
}

}  // namespace hopattn::sm90
