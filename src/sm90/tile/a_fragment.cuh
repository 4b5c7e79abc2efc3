// Loads a warpgroup's 64 rows of a K-major swizzled tile into wgmma A fragments (map and why:
// a_fragment.hpp), one ldmatrix.x4 per k-step of 32 bytes; and stores 16-bit accumulators back into
// such a tile through the same lane addresses.
#pragma once

#include <cstdint>

#include "sm90/arch/convert.cuh"
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

// A warpgroup's m64 x N float accumulators (kRegisters = N / 2 a thread), scaled per row half
// (row_scale[0] for a thread's rows r, [1] for r + 8) and packed in 16-bit pairs, into its 64 rows of a
// 16-bit swizzled tile: packed so, the accumulators of columns [16k, 16k + 16) are the A-fragment layout,
// so one stmatrix.x4 per 16 columns at load_a_fragments' lane addresses stores them (conflict free).
// The forward's O before its TMA store, the backward's dK and dV.
template <class Tile, bool kBf16, int kRegisters>
__device__ __forceinline__ void store_accumulator_rows(std::uint32_t tile, int first_row, int thread,
                                                       const float (&acc)[kRegisters], const float (&row_scale)[2]) {
  const int row = first_row + a_fragment_load_row(thread);
#pragma unroll
  for (int k = 0; k < kRegisters / 8; ++k) {
    std::uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = 8 * k + 2 * j;  // row half j % 2
      packed[j] = pack_pair<kBf16>(acc[i] * row_scale[j % 2], acc[i + 1] * row_scale[j % 2]);
    }
    stmatrix_x4(tile + Tile::offset(row, a_fragment_load_byte(thread, k) / 2), packed);
  }
}

}  // namespace hopattn::sm90
