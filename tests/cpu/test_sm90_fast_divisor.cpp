// FastDivisor (the tile scheduler's multiply-shift division) against plain division.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "sm90/tile/fast_divisor.hpp"

namespace hopattn::sm90 {
namespace {

TEST(Sm90FastDivisor, MatchesDivisionOnSmallAndRandomOperands) {
  std::mt19937 gen(std::random_device{}());
  std::uniform_int_distribution<std::uint32_t> any(0, (1u << 31) - 1);
  std::uniform_int_distribution<std::uint32_t> small(1, 5000);
  for (std::uint32_t d = 1; d <= 300; ++d) {
    const FastDivisor fast(d);
    for (std::uint32_t n = 0; n < 5000; ++n) ASSERT_EQ(fast.divide(n), n / d) << n << " / " << d;
  }
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t d = i % 2 ? small(gen) : any(gen) + 1;
    const std::uint32_t n = any(gen);
    ASSERT_EQ(FastDivisor(d).divide(n), n / d) << n << " / " << d;
  }
  for (std::uint32_t d : {1u, 2u, 3u, 7u, 1u << 30, (1u << 31) - 1}) {
    const std::uint32_t n = (1u << 31) - 1;  // the largest dividend it promises
    EXPECT_EQ(FastDivisor(d).divide(n), n / d) << d;
  }
}

}  // namespace
}  // namespace hopattn::sm90
