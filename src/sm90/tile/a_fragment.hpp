// Where each lane's ldmatrix.x4 reads when it loads a warpgroup's rows of a K-major 128B-swizzled tile
// (the Q tile) as wgmma A fragments, so that S = Q K^T can take A from registers instead of re-reading
// Q from shared memory for every K block (shared-memory bandwidth, not the tensor cores, bounds the
// SS GEMMs at head dim <= 128: Q is 1/7 of the bytes a K block moves at d 128).
//
// One k-step of the A fragment covers 32 bytes of the reduction axis: k16 of 16-bit or k32 of 8-bit
// elements. Warp w of the warpgroup holds rows 16w..16w+15 as four 8x8 (16-bit) matrices: rows 0-7 and
// 8-15 of the step's first 16 bytes, then of its second 16 bytes. Lane t of ldmatrix matrix i gets
// row t/4, bytes 4(t%4)..4(t%4)+3: exactly a0..a3 of PTX's wgmma A register fragment for both
// element sizes (16-bit: row r and r+8, columns 2c, 2c+1 then +8; 8-bit: columns 4c..4c+3 then +16).
// The 8 rows of one matrix differ in row % 8, so under the swizzle they hit 8 distinct 16-byte bank
// groups: conflict free. tests/cpu/test_a_fragment.cpp checks both claims.
#pragma once

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// Row (within the warpgroup's 64) whose 16 bytes lane `thread % 32` of warp `thread / 32` addresses.
HOPATTN_HOST_DEVICE constexpr int a_fragment_load_row(int thread) {
  const int lane = thread % 32;
  return 16 * (thread / 32) + lane % 8 + 8 * ((lane / 8) % 2);
}

// Byte (within the row) where that lane's 16 bytes start, for k-step `step`.
HOPATTN_HOST_DEVICE constexpr int a_fragment_load_byte(int thread, int step) {
  return 32 * step + 16 * ((thread % 32) / 16);
}

}  // namespace hopattn::sm90
