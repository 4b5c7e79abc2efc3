// The per-tile mask bounds (src/sm90/fwd/masked_blocks.hpp) against the per-block definition, and the
// descriptor shortcut of smem_layout.hpp (advance_descriptor) against rebuilding the descriptor.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "sm90/fwd/masked_blocks.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {
namespace {

template <int kBlockM, int kBlockN>
void check_random_problems(std::mt19937& rng) {
  std::uniform_int_distribution<int> len(1, 700), window(-1, 300), coin(0, 3);
  for (int trial = 0; trial < 3000; ++trial) {
    FwdParams p{};
    p.seqlen_q = len(rng);
    p.seqlen_k = len(rng);
    const int kind = coin(rng);  // full, causal, sliding window, one-sided window
    p.window_left = kind >= 2 ? window(rng) : -1;
    p.window_right = kind == 1 ? 0 : (kind == 2 ? window(rng) : -1);
    p.attention_chunk = coin(rng) == 0 ? 1 + int(rng() % 400) : 0;
    const ChunkDivisor chunk(p.attention_chunk, p.seqlen_q);
    const int n_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
    for (int m0 = 0; m0 < p.seqlen_q; m0 += kBlockM) {
      const MaskedBlocks masked = masked_blocks<kBlockM, kBlockN, true>(p, chunk, m0);
      for (int n = 0; n < n_blocks; ++n) {
        ASSERT_EQ(masked.needs(n), (block_needs_mask<kBlockM, kBlockN>(p, chunk, m0, n * kBlockN)))
            << "sq " << p.seqlen_q << " sk " << p.seqlen_k << " window (" << p.window_left << ", "
            << p.window_right << ") chunk " << p.attention_chunk << " m0 " << m0 << " block " << n;
      }
    }
  }
}

TEST(MaskedBlocks, BoundsAgreeWithThePerBlockDefinition) {
  std::mt19937 rng(std::random_device{}());
  check_random_problems<128, 128>(rng);
  check_random_problems<128, 64>(rng);
  check_random_problems<128, 192>(rng);
  check_random_problems<192, 96>(rng);
}

// The per-block definition against every (row, key) pair of the block: a block holding a key that some
// row of the tile must not see is masked. Chunks on top of the window, with diagonals before key 0.
TEST(MaskedBlocks, ChunkedBlocksWithHiddenPairsAreMasked) {
  constexpr int kBlockM = 128, kBlockN = 64;
  std::mt19937 rng(20261205);
  for (int trial = 0; trial < 300; ++trial) {
    FwdParams p{};
    p.seqlen_q = 1 + int(rng() % 500);
    p.seqlen_k = 1 + int(rng() % 500);
    p.window_left = rng() % 3 == 0 ? int(rng() % 200) : -1;
    p.window_right = rng() % 2 == 0 ? 0 : -1;
    p.attention_chunk = 1 + int(rng() % 300);
    const int chunk = p.attention_chunk;
    const ChunkDivisor divisor(chunk, p.seqlen_q);
    const auto chunk_of = [chunk](int x) { return x >= 0 ? x / chunk : -((-x + chunk - 1) / chunk); };
    for (int m0 = 0; m0 < p.seqlen_q; m0 += kBlockM)
      for (int n0 = 0; n0 < p.seqlen_k; n0 += kBlockN) {
        bool hidden = false;
        for (int row = m0; row < m0 + kBlockM && !hidden; ++row)
          for (int key = n0; key < n0 + kBlockN && !hidden; ++key) {
            const int diagonal = row + p.seqlen_k - p.seqlen_q;
            const bool seen = key < p.seqlen_k && (p.window_right < 0 || key <= diagonal + p.window_right) &&
                              (p.window_left < 0 || key >= diagonal - p.window_left) &&
                              chunk_of(key) == chunk_of(diagonal);
            hidden = !seen;
          }
        if (hidden)
          ASSERT_TRUE((block_needs_mask<kBlockM, kBlockN>(p, divisor, m0, n0)))
              << "sq " << p.seqlen_q << " sk " << p.seqlen_k << " chunk " << chunk << " m0 " << m0 << " n0 " << n0;
      }
  }
}

// The K/V blocks a tile visits against its rows' visible keys (the window's, the chunk's and
// seqlen_k's), rows past seqlen_q included as the kernels count them: from the block of the first key
// some row sees to the block of the last, nothing when no row sees a key.
TEST(KvBlockRange, CoversExactlyTheBlocksTheTileRowsSee) {
  constexpr int kBlockM = 128, kBlockN = 176;
  std::mt19937 rng(20261207);
  for (int trial = 0; trial < 3000; ++trial) {
    FwdParams p{};
    p.seqlen_q = 1 + int(rng() % 700);
    p.seqlen_k = 1 + int(rng() % 700);
    p.window_left = rng() % 3 == 0 ? int(rng() % 300) : -1;
    p.window_right = rng() % 3 == 0 ? -1 : (rng() % 2 ? 0 : int(rng() % 100));
    p.attention_chunk = rng() % 4 == 0 ? 0 : 1 + int(rng() % 400);
    const int chunk = p.attention_chunk;
    const ChunkDivisor divisor(chunk, p.seqlen_q);
    const auto floor_div = [](int x, int y) { return x >= 0 ? x / y : -((-x + y - 1) / y); };
    for (int m0 = 0; m0 < p.seqlen_q; m0 += kBlockM) {
      int first_key = -1, last_key = -1;  // over the rows of the tile that see a key
      for (int row = m0; row < m0 + kBlockM; ++row) {
        const int diagonal = row + p.seqlen_k - p.seqlen_q;
        int begin = p.window_left >= 0 ? std::max(0, diagonal - p.window_left) : 0;
        int end = p.window_right >= 0 ? std::min(p.seqlen_k, diagonal + p.window_right + 1) : p.seqlen_k;
        if (chunk > 0) {
          begin = std::max(begin, floor_div(diagonal, chunk) * chunk);
          end = std::min(end, floor_div(diagonal, chunk) * chunk + chunk);
        }
        if (begin >= end) continue;
        if (first_key < 0 || begin < first_key) first_key = begin;
        last_key = std::max(last_key, end - 1);
      }
      int got_begin = 0, got_end = 0;
      kv_block_range_from_row<kBlockM, kBlockN, true>(p, divisor, m0, &got_begin, &got_end);
      const std::string where = "sq " + std::to_string(p.seqlen_q) + " sk " + std::to_string(p.seqlen_k) +
                                " window (" + std::to_string(p.window_left) + ", " + std::to_string(p.window_right) +
                                ") chunk " + std::to_string(chunk) + " m0 " + std::to_string(m0);
      if (first_key < 0) {
        ASSERT_EQ(got_begin, got_end) << where << ": no row sees a key";
      } else {
        ASSERT_EQ(got_begin, first_key / kBlockN) << where;
        ASSERT_EQ(got_end, last_key / kBlockN + 1) << where;
      }
    }
  }
}

// The masks' multiply-high chunk division against chunk_first_key, diagonals from -seqlen_q on.
TEST(ChunkDivisor, FirstKeyAgreesWithFloorDivision) {
  std::mt19937 rng(20261206);
  for (int trial = 0; trial < 2000; ++trial) {
    const int seqlen_q = 1 + int(rng() % 200000), chunk = 1 + int(rng() % 20000);
    const ChunkDivisor divisor(chunk, seqlen_q);
    for (int k = 0; k < 50; ++k) {
      const int diagonal = -seqlen_q + 1 + int(rng() % 400000);
      ASSERT_EQ(divisor.first_key(diagonal), chunk_first_key(diagonal, chunk))
          << "diagonal " << diagonal << " chunk " << chunk << " seqlen_q " << seqlen_q;
    }
  }
}

TEST(SmemDescriptor, AdvanceEqualsRebuildingForEveryStepOfTheSharedWindow) {
  for (std::uint32_t address = 0; address < (1u << 18) - 4096; address += 1024) {
    for (std::uint32_t bytes : {0u, 32u, 96u, 2048u, 3072u, 4064u}) {
      EXPECT_EQ(advance_descriptor(kmajor_descriptor(address), bytes), kmajor_descriptor(address + bytes));
      EXPECT_EQ(advance_descriptor(mnmajor_descriptor(address, 16384), bytes),
                mnmajor_descriptor(address + bytes, 16384));
    }
  }
}

}  // namespace
}  // namespace hopattn::sm90
