// The backward's q-block range and mask test (src/sm90/bwd/block_range.hpp) against brute force over
// every (row, key) pair: the range must hold exactly the q blocks with a row that sees a key of the
// key block, and the mask test must be true whenever some pair of the block pair is not visible.
#include <gtest/gtest.h>

#include <random>
#include <utility>

#include "sm90/bwd/block_range.hpp"

namespace hopattn::sm90 {
namespace {

constexpr int kM = 64, kN = 128;

// The definition (chunk: fwd/attention_chunk.hpp's, written out with floor division here).
bool visible(int row, int key, int sq, int sk, int wl, int wr, int chunk) {
  const int diagonal = row + sk - sq;
  if (key < 0 || key >= sk) return false;
  if (wr >= 0 && key > diagonal + wr) return false;
  if (wl >= 0 && key < diagonal - wl) return false;
  if (chunk > 0) {
    const auto chunk_of = [chunk](int x) { return x >= 0 ? x / chunk : -((-x + chunk - 1) / chunk); };
    if (chunk_of(key) != chunk_of(diagonal)) return false;
  }
  return true;
}

void check(int sq, int sk, int wl, int wr, int chunk = 0) {
  SCOPED_TRACE(::testing::Message() << "sq " << sq << " sk " << sk << " window (" << wl << ", " << wr << ") chunk "
                                    << chunk);
  const int m_blocks = (sq + kM - 1) / kM;
  for (int n0 = 0; n0 < sk; n0 += kN) {
    int want_begin = -1, want_end = -1;
    for (int m = 0; m < m_blocks; ++m) {
      bool any = false;
      for (int row = m * kM; row < std::min(sq, (m + 1) * kM) && !any; ++row)
        for (int key = n0; key < n0 + kN && !any; ++key) any = visible(row, key, sq, sk, wl, wr, chunk);
      if (any) {
        if (want_begin < 0) want_begin = m;
        ASSERT_EQ(want_end < 0 || want_end == m, true) << "visible q blocks of key block " << n0 << " not contiguous";
        want_end = m + 1;
      }
    }
    const QBlockRange got = q_blocks_seeing<kM, kN>(n0, sq, sk, wl, wr, chunk);
    if (want_begin < 0) {
      EXPECT_EQ(got.begin, got.end) << "key block " << n0 << ": no row sees it";
    } else {
      EXPECT_EQ(got.begin, want_begin) << "key block " << n0;
      EXPECT_EQ(got.end, want_end) << "key block " << n0;
    }
    for (int m = got.begin; m < got.end; ++m) {
      bool any_hidden = false;
      for (int row = m * kM; row < (m + 1) * kM && !any_hidden; ++row)
        for (int key = n0; key < n0 + kN && !any_hidden; ++key) any_hidden = !visible(row, key, sq, sk, wl, wr, chunk);
      if (any_hidden) {
        EXPECT_TRUE((block_pair_needs_mask<kM, kN>(m * kM, n0, sq, sk, wl, wr, chunk)))
            << "q block " << m << ", key block " << n0 << " has hidden pairs but is not masked";
      }
    }
  }
}

// key_blocks_before_seeing and key_blocks_after_seeing against counting q_blocks_seeing over the key
// blocks before and after n: the deterministic backward orders each q block's dQ reductions by them.
void check_inverse(int sq, int sk, int wl, int wr, int chunk = 0) {
  SCOPED_TRACE(::testing::Message() << "sq " << sq << " sk " << sk << " window (" << wl << ", " << wr << ") chunk "
                                    << chunk);
  const int m_blocks = (sq + kM - 1) / kM, n_blocks = (sk + kN - 1) / kN;
  const auto sees = [&](int n, int m) {
    const QBlockRange r = q_blocks_seeing<kM, kN>(n * kN, sq, sk, wl, wr, chunk);
    return r.begin <= m && m < r.end;
  };
  for (int m = 0; m < m_blocks; ++m) {
    int seeing = 0;
    for (int n = 0; n < n_blocks; ++n) seeing += sees(n, m);
    int seen_before = 0;
    for (int n = 0; n <= n_blocks; ++n) {
      ASSERT_EQ((key_blocks_before_seeing<kM, kN>(n, m, sq, sk, wl, wr, chunk)), seen_before)
          << "q block " << m << ", key block " << n;
      if (n == n_blocks) break;
      const bool n_sees = sees(n, m);
      ASSERT_EQ((key_blocks_after_seeing<kM, kN>(n, m, sq, sk, wl, wr, chunk)), seeing - seen_before - n_sees)
          << "q block " << m << ", key block " << n;
      const KeyBlockRange inverse = key_blocks_seeing<kM, kN>(m, sq, sk, wl, wr, chunk);
      ASSERT_EQ(inverse.begin <= n && n < inverse.end, n_sees) << "q block " << m << ", key block " << n;
      seen_before += n_sees;
    }
  }
}

TEST(BwdBlockRange, CausalAndDense) {
  for (int sq : {1, 63, 64, 65, 200, 511})
    for (int sk : {1, 100, 128, 129, 400}) {
      check(sq, sk, -1, -1);
      check(sq, sk, -1, 0);
    }
}

TEST(BwdBlockRange, KeyBlocksBeforeAndAfterSeeingCountBruteForce) {
  for (int sq : {1, 63, 64, 65, 200, 511, 1100})
    for (int sk : {1, 100, 128, 129, 400, 1000, 1201})
      for (const auto [wl, wr] : {std::pair{-1, -1}, std::pair{-1, 0}, std::pair{0, 0}, std::pair{130, -1}, std::pair{-1, 200}})
        check_inverse(sq, sk, wl, wr);
  std::mt19937 rng(20260301);
  for (int trial = 0; trial < 2000; ++trial) {
    const int sq = 1 + int(rng() % 1500), sk = 1 + int(rng() % 1500);
    const int wl = int(rng() % 5) == 0 ? -1 : int(rng() % 700);
    const int wr = int(rng() % 5) == 0 ? -1 : int(rng() % 700);
    check_inverse(sq, sk, wl, wr);
  }
}

TEST(BwdBlockRange, RandomWindows) {
  std::mt19937 rng(20261202);
  for (int trial = 0; trial < 300; ++trial) {
    const int sq = 1 + int(rng() % 600), sk = 1 + int(rng() % 600);
    const int wl = int(rng() % 5) == 0 ? -1 : int(rng() % 300);
    const int wr = int(rng() % 5) == 0 ? -1 : int(rng() % 300);
    check(sq, sk, wl, wr);
  }
}

TEST(BwdBlockRange, InteriorBlocksAreNotMasked) {
  // Dense 1024 x 1024: every key block is whole, and no window: nothing to mask.
  for (int n0 = 0; n0 < 1024; n0 += kN)
    for (int m0 = 0; m0 < 1024; m0 += kM) EXPECT_FALSE((block_pair_needs_mask<kM, kN>(m0, n0, 1024, 1024, -1, -1, 0)));
  // Causal: the block pair above the diagonal band is whole too.
  EXPECT_FALSE((block_pair_needs_mask<kM, kN>(512, 0, 1024, 1024, -1, 0, 0)));
  EXPECT_TRUE((block_pair_needs_mask<kM, kN>(0, 0, 1024, 1024, -1, 0, 0)));
}

TEST(BwdBlockRange, AttentionChunks) {
  // Chunks smaller than, equal to and larger than a block, alone and with causal or a window, on
  // lengths where diagonals fall before key 0 (sq > sk) and where they do not.
  for (int sq : {1, 65, 200, 511})
    for (int sk : {1, 129, 400})
      for (int chunk : {1, 7, 64, 128, 300})
        for (const auto [wl, wr] : {std::pair{-1, -1}, std::pair{-1, 0}, std::pair{50, -1}, std::pair{90, 30}}) {
          check(sq, sk, wl, wr, chunk);
          check_inverse(sq, sk, wl, wr, chunk);
        }
  std::mt19937 rng(20261205);
  for (int trial = 0; trial < 400; ++trial) {
    const int sq = 1 + int(rng() % 900), sk = 1 + int(rng() % 900);
    const int wl = int(rng() % 3) == 0 ? int(rng() % 300) : -1;
    const int wr = int(rng() % 3) == 0 ? -1 : int(rng() % 2) * int(rng() % 300);
    const int chunk = 1 + int(rng() % 400);
    check(sq, sk, wl, wr, chunk);
    check_inverse(sq, sk, wl, wr, chunk);
  }
}

}  // namespace
}  // namespace hopattn::sm90
