// The backward's CTA dispatch map (src/sm90/bwd/cta_dispatch.hpp): every (key block, head) taken by
// exactly one CTA, and the CTA that reduces before another into the q blocks they share (the previous
// key block of the same head in the order's direction) dispatched before it, which the deterministic
// kernels' no-deadlock argument needs (dq_order.cuh).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "sm90/bwd/cta_dispatch.hpp"

namespace hopattn::sm90 {
namespace {

void check_map(int key_blocks, int heads, int interleave, bool descending) {
  SCOPED_TRACE(::testing::Message() << key_blocks << " key blocks, " << heads << " heads, interleave " << interleave
                                    << (descending ? ", descending" : ", ascending"));
  // dispatched_at[head][n]: the linear index of the CTA that took key block n of the head.
  std::vector<std::vector<long long>> dispatched_at(heads, std::vector<long long>(key_blocks, -1));
  for (long long linear = 0; linear < static_cast<long long>(key_blocks) * heads; ++linear) {
    const DispatchedKeyBlock d = dispatched_key_block(linear, key_blocks, heads, interleave, descending);
    ASSERT_GE(d.n_block, 0);
    ASSERT_LT(d.n_block, key_blocks);
    ASSERT_GE(d.head, 0);
    ASSERT_LT(d.head, heads);
    ASSERT_EQ(dispatched_at[d.head][d.n_block], -1) << "key block " << d.n_block << " of head " << d.head << " taken twice";
    dispatched_at[d.head][d.n_block] = linear;
  }
  for (int h = 0; h < heads; ++h) {
    for (int n = 0; n < key_blocks; ++n) {
      ASSERT_NE(dispatched_at[h][n], -1) << "key block " << n << " of head " << h << " never taken";
      const int before = descending ? n + 1 : n - 1;  // the order's previous key block
      if (before < 0 || before >= key_blocks) continue;
      EXPECT_LT(dispatched_at[h][before], dispatched_at[h][n]) << "key block " << n << " of head " << h;
    }
  }
}

TEST(BwdCtaDispatch, EveryKeyBlockOnceAndItsPredecessorDispatchedFirst) {
  std::mt19937 rng(0x5eed0d15);
  for (int trial = 0; trial < 300; ++trial) {
    const int key_blocks = 1 + static_cast<int>(rng() % 37);
    const int heads = 1 + static_cast<int>(rng() % 29);
    const int interleave = 1 + static_cast<int>(rng() % heads);
    check_map(key_blocks, heads, interleave, rng() % 2 == 0);
  }
  check_map(1, 1, 1, false);
  check_map(64, 7, 3, false);  // a last group of one head
}

TEST(BwdCtaDispatch, InterleaveOneKeepsHeadAfterHead) {
  // The map the kernels used before interleaving: blockIdx.x the key block (reversed when descending).
  const int key_blocks = 11, heads = 5;
  for (long long linear = 0; linear < key_blocks * heads; ++linear) {
    const DispatchedKeyBlock up = dispatched_key_block(linear, key_blocks, heads, 1, false);
    EXPECT_EQ(up.n_block, linear % key_blocks);
    EXPECT_EQ(up.head, linear / key_blocks);
    const DispatchedKeyBlock down = dispatched_key_block(linear, key_blocks, heads, 1, true);
    EXPECT_EQ(down.n_block, key_blocks - 1 - linear % key_blocks);
    EXPECT_EQ(down.head, linear / key_blocks);
  }
}

TEST(BwdCtaDispatch, InterleaveKeepsChainsFedAndStaysWithinTheHeads) {
  const int sms = 132;
  // Enough heads that the SMs' finishing CTAs ask each head's chain for at most one CTA per
  // kChainStepsPerLink steps.
  for (int steps : {1, 7, 8, 32, 128, 256, 1000}) {
    const int g = dq_head_interleave(steps, 1 << 20, sms);
    EXPECT_GE(static_cast<long long>(g) * steps, static_cast<long long>(kChainStepsPerLink) * sms) << steps;
    EXPECT_LT(static_cast<long long>(g - 1) * steps, static_cast<long long>(kChainStepsPerLink) * sms) << steps;
  }
  EXPECT_EQ(dq_head_interleave(8, 5, sms), 5);      // at most all heads
  EXPECT_EQ(dq_head_interleave(100000, 64, sms), 1);  // long walks: head after head
  EXPECT_EQ(dq_head_interleave(0, 64, sms), 64);    // no steps (empty sequences): still a valid count
}

}  // namespace
}  // namespace hopattn::sm90
