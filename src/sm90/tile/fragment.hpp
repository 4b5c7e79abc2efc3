// Where the wgmma m64nN f32 accumulator and the 16-bit A-operand fragments live in a warpgroup's
// registers (PTX ISA "Register Fragments" for wgmma). Thread t = 32 w + l of the warpgroup holds, for
// each 8-column block j, four accumulators:
//   d[4j+0], d[4j+1] at row 16w + l/4,     columns 8j + 2(l%4) + {0, 1}
//   d[4j+2], d[4j+3] at row 16w + l/4 + 8, columns 8j + 2(l%4) + {0, 1}
// The A fragment of a m64k16 step k is the same pattern over 16 columns, packed two per register,
// so the accumulators of S columns [16k, 16k+16) become P's A fragment for step k in order.
#pragma once

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

HOPATTN_HOST_DEVICE constexpr int accumulator_row(int thread, int index) {
  return 16 * (thread / 32) + (thread % 32) / 4 + 8 * ((index / 2) % 2);
}

HOPATTN_HOST_DEVICE constexpr int accumulator_col(int thread, int index) {
  return 8 * (index / 4) + 2 * (thread % 4) + (index % 2);
}

}  // namespace hopattn::sm90
