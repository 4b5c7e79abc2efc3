// Layout math of the sm_90a kernels, checked on the CPU: the 128B swizzle, the tile offsets, the wgmma
// descriptor fields and the accumulator / A-fragment register maps.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {
namespace {

TEST(Sm90Layout, SwizzleIsAPermutationOfEachAtomThatKeeps16ByteChunks) {
  std::set<std::uint32_t> seen;
  for (std::uint32_t row = 0; row < 8; ++row) {
    for (std::uint32_t byte = 0; byte < 128; ++byte) {
      const std::uint32_t o = swizzle_128b(row, byte);
      EXPECT_LT(o, 1024u);
      EXPECT_EQ(o / 128, row) << "swizzle stays within the row";
      EXPECT_EQ(o % 16, byte % 16) << "16-byte chunks move whole";
      EXPECT_EQ((o % 128) / 16, ((byte / 16) ^ row)) << "chunk index is XORed with row % 8";
      seen.insert(o);
    }
  }
  EXPECT_EQ(seen.size(), 1024u);
}

TEST(Sm90Layout, SwizzledColumnIsBankConflictFree) {
  // The 8 rows of one logical 16-byte column (what a TMA row or an ldmatrix phase touches) must land
  // in 8 distinct groups of 4 banks.
  for (std::uint32_t chunk = 0; chunk < 8; ++chunk) {
    std::set<std::uint32_t> bank_groups;
    for (std::uint32_t row = 0; row < 8; ++row) bank_groups.insert((swizzle_128b(row, chunk * 16) / 16) % 8);
    EXPECT_EQ(bank_groups.size(), 8u) << "chunk " << chunk;
  }
}

TEST(Sm90Layout, TileOffsetsCoverTheTileOnce) {
  using Tile = SwizzledTile<24, 192, 2>;  // odd multiples: 3 swizzle atoms tall, 3 column blocks wide
  static_assert(Tile::kColumnBlocks == 3 && Tile::kColumnBlockBytes == 24 * 128);
  std::set<std::uint32_t> seen;
  for (int r = 0; r < 24; ++r) {
    for (int c = 0; c < 192; ++c) {
      const std::uint32_t o = Tile::offset(r, c);
      EXPECT_EQ(o % 2, 0u);
      EXPECT_EQ(o / Tile::kColumnBlockBytes, static_cast<std::uint32_t>(c / 64));
      seen.insert(o);
    }
  }
  EXPECT_EQ(seen.size(), 24u * 192u);
  EXPECT_EQ(*seen.rbegin(), static_cast<std::uint32_t>(Tile::kBytes - 2));
}

TEST(Sm90Layout, DescriptorFields) {
  const std::uint32_t address = 0x1A400;  // a 1024-aligned shared-memory address
  const std::uint64_t k = kmajor_descriptor(address + 32);
  EXPECT_EQ(k & 0x3FFF, (address + 32) >> 4);
  EXPECT_EQ((k >> 16) & 0x3FFF, 1u);
  EXPECT_EQ((k >> 32) & 0x3FFF, 1024u >> 4);
  EXPECT_EQ((k >> 49) & 0x7, 0u) << "base offset 0: tiles are 1024-byte aligned";
  EXPECT_EQ(k >> 62, 1u) << "swizzle mode 1 = 128B";
  const std::uint64_t mn = mnmajor_descriptor(address, 128 * 128);
  EXPECT_EQ((mn >> 16) & 0x3FFF, (128u * 128u) >> 4);
  EXPECT_EQ((mn >> 32) & 0x3FFF, 1024u >> 4);
}

TEST(Sm90Layout, AccumulatorFragmentCoversTheTileOnce) {
  constexpr int kN = 80;
  std::set<std::pair<int, int>> seen;
  for (int t = 0; t < 128; ++t) {
    for (int i = 0; i < kN / 2; ++i) {
      const int row = accumulator_row(t, i);
      const int col = accumulator_col(t, i);
      ASSERT_GE(row, 0);
      ASSERT_LT(row, 64);
      ASSERT_GE(col, 0);
      ASSERT_LT(col, kN);
      seen.insert({row, col});
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(64 * kN));
}

TEST(Sm90Layout, AccumulatorsOfSixteenColumnsAreTheAFragmentInOrder) {
  // PTX ISA, wgmma A fragment of a 64x16 16-bit tile: register j (0..3), half h (0..1) of thread
  // 32w + l holds row 16w + l/4 + 8 (j % 2), column 2 (l % 4) + 8 (j / 2) + h.
  for (int t = 0; t < 128; ++t) {
    for (int step = 0; step < 4; ++step) {
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h) {
          const int w = t / 32, l = t % 32;
          const int a_row = 16 * w + l / 4 + 8 * (j % 2);
          const int a_col = 16 * step + 2 * (l % 4) + 8 * (j / 2) + h;
          const int index = 8 * step + 2 * j + h;
          EXPECT_EQ(accumulator_row(t, index), a_row);
          EXPECT_EQ(accumulator_col(t, index), a_col);
        }
      }
    }
  }
}

}  // namespace
}  // namespace hopattn::sm90
