// The backward's per-row workspace blocks of variable-length batches (src/sm90/bwd/workspace_blocks.hpp):
// each sequence's ceil(len / 64) blocks, from first_q_block(first row, index) on, must lie inside one
// q head's range of packed_q_blocks(rows, batch) blocks and share no block with another sequence (a
// dQ reduction into a shared block would add into the other sequence's rows). Checked over random
// batches, empty sequences and lengths on either side of the block edges included, for packed q and
// for a dense q addressed as packed (row b * seqlen_q).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "sm90/bwd/workspace_blocks.hpp"

namespace hopattn::sm90 {
namespace {

constexpr int kBlockM = 64;

// What is wrong with the blocks of sequences of `lengths` laid out back to back from row 0.
std::string check_layout(const std::vector<int>& lengths) {
  const int batch = static_cast<int>(lengths.size());
  int rows = 0;
  for (int n : lengths) rows += n;
  const std::int64_t range = packed_q_blocks<kBlockM>(rows, batch);
  std::vector<int> owner(static_cast<std::size_t>(range), -1);
  int row0 = 0;
  for (int b = 0; b < batch; ++b) {
    const int first = first_q_block<kBlockM>(row0, b), count = (lengths[b] + kBlockM - 1) / kBlockM;
    for (int m = first; m < first + count; ++m) {
      if (m < 0 || m >= range)
        return "sequence " + std::to_string(b) + ": block " + std::to_string(m) + " outside [0, " +
               std::to_string(range) + ")";
      if (owner[m] >= 0)
        return "block " + std::to_string(m) + " of sequences " + std::to_string(owner[m]) + " and " + std::to_string(b);
      owner[m] = b;
    }
    row0 += lengths[b];
  }
  return "";
}

TEST(BwdWorkspaceBlocks, SequencesOwnDisjointBlocksInsideTheRange) {
  EXPECT_EQ(check_layout({1}), "");
  EXPECT_EQ(check_layout({0}), "");
  EXPECT_EQ(check_layout({64, 64, 64}), "");
  EXPECT_EQ(check_layout({63, 65, 1, 127, 128, 129, 0, 300}), "");
  EXPECT_EQ(check_layout({1, 1, 1, 1, 1, 1, 1, 1, 1}), "");  // one block each, all in the first 64 rows
  EXPECT_EQ(check_layout({0, 0, 0, 65}), "");
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  const int edges[] = {0, 1, 63, 64, 65, 127, 128, 129};
  for (int trial = 0; trial < 2000; ++trial) {
    const int batch = 1 + int(rng() % 12);
    std::vector<int> lengths;
    for (int b = 0; b < batch; ++b) lengths.push_back(rng() % 3 ? int(rng() % 400) : edges[rng() % 8]);
    ASSERT_EQ(check_layout(lengths), "") << "seed " << seed << " trial " << trial;
  }
}

// A dense q of seqlen_q rows per batch entry is laid out as packed with equal lengths.
TEST(BwdWorkspaceBlocks, DenseQAddressedAsPacked) {
  for (int seqlen_q : {1, 63, 64, 65, 200, 513})
    for (int batch : {1, 2, 7}) EXPECT_EQ(check_layout(std::vector<int>(batch, seqlen_q)), "") << seqlen_q;
}

// The formulas: a sequence's first block is its first row's block plus its index; a head's range holds
// rows / 64 blocks plus one per sequence.
TEST(BwdWorkspaceBlocks, KnownValues) {
  EXPECT_EQ((packed_q_blocks<kBlockM>(0, 3)), 3);
  EXPECT_EQ((packed_q_blocks<kBlockM>(640, 1)), 11);
  EXPECT_EQ((first_q_block<kBlockM>(130, 2)), 4);
}

}  // namespace
}  // namespace hopattn::sm90
