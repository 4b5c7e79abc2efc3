// The ldmatrix.x4 address map that loads Q into wgmma A fragments (src/sm90/tile/a_fragment.hpp),
// checked against PTX's fragment layout and for bank conflicts, on the CPU.
#include <gtest/gtest.h>

#include <set>

#include "sm90/tile/a_fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {
namespace {

// ldmatrix.x4 semantics: lane t receives in register i row t/4 of matrix i, bytes 4(t%4)..4(t%4)+3,
// and row j of matrix i is the 16 bytes lane 8i + j addresses. The wgmma A fragment wants, for thread
// t = 32 w + l of the warpgroup, register i = row 16w + l/4 + 8(i%2), bytes 16(i/2) + 4(l%4).. of the
// k-step's 32 (PTX ISA wgmma register fragments: 16-bit a0..a3 and 8-bit a0..a3 alike in bytes).
TEST(AFragment, LdmatrixLanesDeliverTheWgmmaAFragment) {
  for (int step = 0; step < 8; ++step) {
    for (int thread = 0; thread < 128; ++thread) {
      const int warp = thread / 32, lane = thread % 32;
      for (int i = 0; i < 4; ++i) {
        const int source = 32 * warp + 8 * i + lane / 4;  // the lane that addressed matrix i's row lane/4
        const int row = a_fragment_load_row(source);
        const int byte = a_fragment_load_byte(source, step) + 4 * (lane % 4);
        EXPECT_EQ(row, 16 * warp + lane / 4 + 8 * (i % 2)) << "thread " << thread << " reg " << i;
        EXPECT_EQ(byte, 32 * step + 16 * (i / 2) + 4 * (lane % 4)) << "thread " << thread << " reg " << i;
      }
    }
  }
}

// Each matrix's 8 rows land in 8 distinct 16-byte bank groups of the swizzled tile, for every
// warpgroup offset (0, 64 or 128 rows into the Q tile) and k-step.
TEST(AFragment, EachMatrixIsBankConflictFree) {
  using Tile = SwizzledTile<192, 256, 2>;
  for (int first_row : {0, 64, 128}) {
    for (int step = 0; step < 16; ++step) {
      for (int warp = 0; warp < 4; ++warp) {
        for (int matrix = 0; matrix < 4; ++matrix) {
          std::set<unsigned> groups;
          for (int j = 0; j < 8; ++j) {
            const int thread = 32 * warp + 8 * matrix + j;
            const unsigned offset = Tile::offset(first_row + a_fragment_load_row(thread), a_fragment_load_byte(thread, step) / 2);
            EXPECT_EQ(offset % 16, 0u);
            groups.insert(offset / 16 % 8);
          }
          EXPECT_EQ(groups.size(), 8u) << "rows from " << first_row << " step " << step << " warp " << warp
                                      << " matrix " << matrix;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hopattn::sm90
