// The per-tile mask bounds (src/sm90/fwd/masked_blocks.hpp) against the per-block definition, and the
// descriptor shortcut of smem_layout.hpp (advance_descriptor) against rebuilding the descriptor.
#include <gtest/gtest.h>

#include <random>

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
    const int n_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
    for (int m0 = 0; m0 < p.seqlen_q; m0 += kBlockM) {
      const MaskedBlocks masked = masked_blocks<kBlockM, kBlockN>(p, m0);
      for (int n = 0; n < n_blocks; ++n) {
        ASSERT_EQ(masked.needs(n), (block_needs_mask<kBlockM, kBlockN>(p, m0, n * kBlockN)))
            << "sq " << p.seqlen_q << " sk " << p.seqlen_k << " window (" << p.window_left << ", "
            << p.window_right << ") m0 " << m0 << " block " << n;
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
