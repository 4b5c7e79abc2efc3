// Host dtype conversions: the explicit e4m3 rounding emulation against the format's 256 codes and
// against CUDA's conversion, 16-bit rounding, and the HostTensor test utility itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/host_tensor.hpp"
#include "reference/numeric.hpp"
#include "test_reference_support.hpp"

namespace hopattn::test {
namespace {

using reference::decode_e4m3;
using reference::round_to_dtype;
using reference::round_to_e4m3;

std::uint8_t cuda_e4m3_code(double x) {
  std::uint8_t code;
  reference::store_scalar(&code, Dtype::kFloat8E4M3, x);
  return code;
}

TEST(ReferenceNumeric, EveryE4m3CodeRoundTrips) {
  int nan_codes = 0;
  for (int code = 0; code < 256; ++code) {
    const double x = decode_e4m3(static_cast<std::uint8_t>(code));
    const std::uint8_t byte = static_cast<std::uint8_t>(code);
    const double cuda_value = reference::load_scalar(&byte, Dtype::kFloat8E4M3);
    if (std::isnan(x)) {
      ++nan_codes;
      EXPECT_TRUE(std::isnan(round_to_e4m3(x))) << "code " << code;
      EXPECT_TRUE(std::isnan(cuda_value)) << "code " << code;
      continue;
    }
    EXPECT_EQ(round_to_e4m3(x), x) << "code " << code;
    EXPECT_EQ(std::signbit(round_to_e4m3(x)), std::signbit(x)) << "code " << code;
    EXPECT_EQ(cuda_value, x) << "code " << code << ": CUDA decodes differently";
    EXPECT_EQ(cuda_e4m3_code(x), code) << "CUDA encodes " << x << " differently";
  }
  EXPECT_EQ(nan_codes, 2);  // 0x7F and 0xFF
  EXPECT_EQ(decode_e4m3(0x7E), 448.0);
  EXPECT_EQ(decode_e4m3(0x01), std::ldexp(1.0, -9));
}

TEST(ReferenceNumeric, E4m3MidpointsRoundToEven) {
  for (int code = 0; code < 0x7E; ++code) {  // consecutive positive finite codes
    const double low = decode_e4m3(static_cast<std::uint8_t>(code));
    const double high = decode_e4m3(static_cast<std::uint8_t>(code + 1));
    const double mid = 0.5 * (low + high);
    const double even = (code % 2 == 0) ? low : high;  // even code <=> mantissa lsb 0
    EXPECT_EQ(round_to_e4m3(mid), even) << "between codes " << code << " and " << code + 1;
    EXPECT_EQ(round_to_e4m3(-mid), -even) << "between codes " << code << " and " << code + 1;
    EXPECT_EQ(cuda_e4m3_code(mid), code % 2 == 0 ? code : code + 1) << "CUDA, between codes " << code;
    const double nudge = (high - low) * 1e-6;
    EXPECT_EQ(round_to_e4m3(mid - nudge), low);
    EXPECT_EQ(round_to_e4m3(mid + nudge), high);
  }
}

TEST(ReferenceNumeric, E4m3SaturatesAbove448) {
  for (const double x : {448.0, 448.5, 463.9, 464.0, 480.0, 1e6, HUGE_VAL}) {
    EXPECT_EQ(round_to_e4m3(x), 448.0) << x;
    EXPECT_EQ(round_to_e4m3(-x), -448.0) << -x;
    EXPECT_EQ(round_to_dtype(x, Dtype::kFloat8E4M3), 448.0) << "CUDA, " << x;
  }
  EXPECT_TRUE(std::isnan(round_to_e4m3(std::nan(""))));
}

TEST(ReferenceNumeric, E4m3EmulationMatchesCudaConversion) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log2_magnitude(-12.0, 10.0);
  for (int trial = 0; trial < 20000; ++trial) {
    const double x = ((rng() & 1) ? -1.0 : 1.0) * std::exp2(log2_magnitude(rng));
    ASSERT_EQ(round_to_e4m3(x), round_to_dtype(x, Dtype::kFloat8E4M3)) << "x=" << x;
  }
}

// Relative error of a correctly rounded 16-bit value is at most half its epsilon; below the normal
// range (float16 from 2^-14: a draw near 0 lands there now and then) its absolute error is at most half
// the subnormal spacing, 2^(min_exponent - mantissa_bits - 1).
TEST(ReferenceNumeric, SixteenBitRoundingIsNearest) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> value(-100.0, 100.0);
  struct Format {
    Dtype dtype;
    int mantissa_bits, min_exponent;
  };
  for (const Format& f : {Format{Dtype::kBFloat16, 7, -126}, Format{Dtype::kFloat16, 10, -14}}) {
    const Dtype dtype = f.dtype;
    const double subnormal_half_step = std::ldexp(1.0, f.min_exponent - f.mantissa_bits - 1);
    for (int trial = 0; trial < 5000; ++trial) {
      const double x = trial == 0 ? -2.8926119455263688e-06 : value(rng);  // a float16 subnormal
      const double r = round_to_dtype(x, dtype);
      ASSERT_LE(std::fabs(r - x), std::max(std::ldexp(std::fabs(x), -f.mantissa_bits - 1), subnormal_half_step))
          << dtype_name(dtype) << " x=" << x;
      ASSERT_EQ(round_to_dtype(r, dtype), r) << dtype_name(dtype) << " x=" << x;
    }
  }
}

TEST(ReferenceNumeric, HostTensorFillsPoisonsAndViews) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (const Dtype dtype : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16, Dtype::kFloat8E4M3}) {
    HostTensor t(dtype, {3, 5, 7});
    t.fill_random(seed, -2.0, 2.0);
    const std::vector<double> values = t.to_double();
    double spread = 0;
    for (double x : values) {
      ASSERT_TRUE(x >= -2.0 && x <= 2.0) << dtype_name(dtype) << " " << x;
      ASSERT_EQ(round_to_dtype(x, dtype), x) << dtype_name(dtype);
      spread = std::max(spread, std::fabs(x));
    }
    EXPECT_GT(spread, 1.0) << dtype_name(dtype);
    t.poison();
    for (double x : t.to_double()) ASSERT_TRUE(std::isnan(x)) << dtype_name(dtype);
  }
  HostTensor t(Dtype::kFloat32, {2, 3, 4});
  t.fill_random(seed);
  const Tensor middle = select(t.tensor(), 1, 1);  // (2, 4) with row stride 12
  const std::vector<double> picked = read_tensor(middle);
  ASSERT_EQ(picked.size(), 8u);
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(picked[a * 4 + c], t.get(a * 12 + 4 + c));
}

}  // namespace
}  // namespace hopattn::test
