// quantize_fp8 on host tensors: round-trip error within e4m3 rounding, scale = amax / 448 per group (v's
// block scales rounded up to a power of two), the Walsh-Hadamard transform against its matrix definition,
// orthogonality, seed determinism, strides.
#include <gtest/gtest.h>

#include <algorithm>
#include <bitset>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "api/quantize_plan.hpp"
#include "cpu/test_fp8_util.hpp"
#include "reference/fp8_quantize.hpp"
#include "reference/fp8_rounding.hpp"

namespace {

using fp8_test::QuantCase;
using fp8_test::QuantShape;
using hopattn::Dtype;
using hopattn::QuantGranularity;
using hopattn::reference::decode_e4m3_code;

std::mt19937_64& rng() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine;
}

// Entry (i, j) of M = H diag(s) / sqrt(b), from the definitions: H block-diagonal over blocks of b =
// the largest power of two dividing d, H_ij = (-1)^popcount(i & j) within a block and 0 across blocks.
double m_entry(int i, int j, int d, const hopattn::detail::HadamardSigns& signs) {
  const int b = d & -d;
  if (i / b != j / b) return 0.0;
  const double h = std::bitset<32>(static_cast<unsigned>(i % b & j % b)).count() % 2 ? -1.0 : 1.0;
  return h * (signs.negated(j) ? -1.0 : 1.0) / std::sqrt(static_cast<double>(b));
}

// Row (b, s, h) of tensor t as quantize_fp8 should see it: x, or x M, in float64.
std::vector<double> expected_row(const QuantCase& c, int t, int b, int s, int h) {
  const int d = c.dim(t);
  std::vector<double> x(d), y(d, 0.0);
  for (int j = 0; j < d; ++j) x[j] = c.input_value(t, c.offset(t, b, s, h, j));
  if (!c.args.hadamard || t == 2) return x;
  const auto signs = hopattn::detail::hadamard_signs(c.args.seed);
  for (int j = 0; j < d; ++j) {
    for (int i = 0; i < d; ++i) y[j] += x[i] * m_entry(i, j, d, signs);
  }
  return y;
}

// Checks every scale group of every tensor of a case that quantize_fp8 has filled.
void check_round_trip(const QuantCase& c) {
  const QuantGranularity g = c.args.granularity;
  for (int t = 0; t < 3; ++t) {
    SCOPED_TRACE("tensor " + std::to_string(t));
    const int blocks = static_cast<int>(hopattn::scale_blocks(g, c.seqlen(t), c.block_rows(t)));
    const int rows_per_group = g == QuantGranularity::kPerBlock ? c.block_rows(t) : c.seqlen(t);
    // Group (b, h, block) in the order the descale tensor stores them; kPerTensor is one group of all.
    const int group_batches = g == QuantGranularity::kPerTensor ? 1 : c.shape.batch;
    const int group_heads = g == QuantGranularity::kPerTensor ? 1 : c.heads(t);
    for (int gb = 0; gb < group_batches; ++gb) {
      for (int gh = 0; gh < group_heads; ++gh) {
        for (int block = 0; block < blocks; ++block) {
          const float scale = c.scales[t][(gb * group_heads + gh) * blocks + block];
          ASSERT_TRUE(std::isfinite(scale) && scale > 0.0f) << scale;
          double amax = 0.0, code_max = 0.0;
          for (int b = 0; b < c.shape.batch; ++b) {
            for (int h = 0; h < c.heads(t); ++h) {
              if (g != QuantGranularity::kPerTensor && (b != gb || h != gh)) continue;
              const int s_end = std::min(c.seqlen(t), (block + 1) * rows_per_group);
              for (int s = block * rows_per_group; s < s_end; ++s) {
                const std::vector<double> x = expected_row(c, t, b, s, h);
                double norm = 0.0;
                for (double e : x) norm += e * e;
                for (int j = 0; j < c.dim(t); ++j) {
                  const float code = decode_e4m3_code(c.codes[t][c.offset(t, b, s, h, j)]);
                  ASSERT_FALSE(std::isnan(code)) << "b " << b << " s " << s << " h " << h << " j " << j;
                  // Half an e4m3 step: 2^-4 relative for normals, 2^-10 * scale on the subnormal grid;
                  // plus the float32 transform's own rounding.
                  const double bound = std::fabs(x[j]) / 16.0 + scale / 1024.0 + 1e-6 * std::sqrt(norm);
                  ASSERT_LE(std::fabs(code * static_cast<double>(scale) - x[j]), bound)
                      << "b " << b << " s " << s << " h " << h << " j " << j;
                  amax = std::max(amax, std::fabs(x[j]));
                  code_max = std::max(code_max, std::fabs(static_cast<double>(code)));
                }
                for (int j = c.dim(t); j < c.dim(t) + c.pad; ++j) {
                  ASSERT_EQ(c.codes[t][c.offset(t, b, s, h, j)], fp8_test::kPoisonCode) << "wrote into row padding";
                }
              }
            }
          }
          if (t == 2 && g == QuantGranularity::kPerBlock) {
            // v's block scales: amax / 448 rounded up to a power of two, so the largest element codes in
            // [224, 448].
            int exponent = 0;
            EXPECT_EQ(std::frexp(scale, &exponent), 0.5f) << scale << " is not a power of two";
            EXPECT_GE(scale, amax / 448.0 * (1.0 - 1e-6));
            EXPECT_LT(scale, amax / 224.0 * (1.0 + 1e-6));
            EXPECT_GE(code_max, 224.0);
            EXPECT_LE(code_max, 448.0);
          } else {
            EXPECT_NEAR(scale, amax / 448.0, 1e-5 * amax / 448.0 + 1e-30);
            EXPECT_EQ(code_max, 448.0) << "the group's largest element must map to the e4m3 maximum";
          }
        }
      }
    }
  }
}

struct Config {
  QuantShape shape;
  QuantGranularity granularity;
  bool hadamard;
  int block_q, block_kv, pad;
};

TEST(Fp8Quantize, RoundTripWithinE4M3RoundingAndScalesFromAmax) {
  const Config configs[] = {
      {{1, 1, 1, 1, 1, 64}, QuantGranularity::kPerTensor, false, 128, 128, 0},
      {{2, 130, 67, 4, 2, 64}, QuantGranularity::kPerBlock, true, 64, 32, 0},
      {{1, 33, 200, 3, 1, 128}, QuantGranularity::kPerBlock, true, 128, 128, 3},
      {{2, 17, 9, 2, 2, 256}, QuantGranularity::kPerHead, true, 128, 128, 0},
      {{1, 50, 50, 2, 2, 128}, QuantGranularity::kPerTensor, true, 128, 128, 1},
      {{3, 7, 5, 5, 5, 40}, QuantGranularity::kPerBlock, false, 1, 2, 0},
      {{1, 9, 4, 1, 1, 1}, QuantGranularity::kPerHead, false, 128, 128, 2},
      {{2, 129, 31, 2, 1, 3}, QuantGranularity::kPerBlock, false, 128, 16, 0},
      // v of its own head dim (DeepSeek's q/k 192 with v 128; a transformed q/k 128 beside v 64)
      {{2, 70, 90, 4, 2, 192, 128}, QuantGranularity::kPerBlock, false, 64, 32, 0},
      {{1, 40, 33, 2, 1, 128, 64}, QuantGranularity::kPerHead, true, 128, 128, 2},
      // the block-diagonal transform: blocks of 32 at d 96, of 64 at d 192, of 16 at d 48
      {{2, 30, 41, 2, 2, 96}, QuantGranularity::kPerBlock, true, 16, 32, 0},
      {{1, 25, 30, 4, 2, 192, 128}, QuantGranularity::kPerTensor, true, 128, 128, 1},
      {{1, 9, 12, 1, 1, 48}, QuantGranularity::kPerHead, true, 128, 128, 0},
  };
  for (Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat16}) {
    for (const Config& cfg : configs) {
      SCOPED_TRACE(std::string(hopattn::dtype_name(dtype)) + " " + hopattn::granularity_name(cfg.granularity) +
                   (cfg.hadamard ? " hadamard" : "") + " d " + std::to_string(cfg.shape.d) + " dv " + std::to_string(cfg.shape.d_v) + " sq " +
                   std::to_string(cfg.shape.seqlen_q) + " sk " + std::to_string(cfg.shape.seqlen_k));
      QuantCase c = fp8_test::make_case(cfg.shape, dtype, cfg.granularity, cfg.hadamard, rng(), cfg.block_q,
                                        cfg.block_kv, cfg.pad);
      const hopattn::Status status = hopattn::quantize_fp8(c.args);
      ASSERT_TRUE(status.ok()) << status.message();
      check_round_trip(c);
    }
  }
}

// v's block scales: the least power of two at or above amax / 448, computed on the float's bits (the GPU
// quantizer runs the same function).
TEST(Fp8Quantize, PowerOfTwoScalesAreTheLeastPowerOfTwoAtOrAbove) {
  using hopattn::detail::power_of_two_at_or_above;
  using hopattn::detail::scale_from_amax;
  for (int e : {-126, -20, -1, 0, 1, 7, 100, 127}) {
    const float p = std::ldexp(1.0f, e);
    EXPECT_EQ(power_of_two_at_or_above(p), p) << "2^" << e;
    EXPECT_EQ(power_of_two_at_or_above(std::nextafter(p, 0.0f)), p) << "just below 2^" << e;
    if (e < 127) EXPECT_EQ(power_of_two_at_or_above(std::nextafter(p, INFINITY)), 2.0f * p) << "just above 2^" << e;
  }
  EXPECT_EQ(power_of_two_at_or_above(1.5f), 2.0f);
  EXPECT_EQ(power_of_two_at_or_above(std::numeric_limits<float>::denorm_min()), std::ldexp(1.0f, -126));
  EXPECT_EQ(power_of_two_at_or_above(3e-39f), std::ldexp(1.0f, -126));  // subnormal
  EXPECT_EQ(scale_from_amax(0.0f, false), 1.0f);
  EXPECT_EQ(scale_from_amax(0.0f, true), std::ldexp(1.0f, -40));  // an all-zero v block
  EXPECT_EQ(scale_from_amax(448.0f * 3.0f, true), 4.0f);
  EXPECT_EQ(scale_from_amax(1e-37f, false), std::ldexp(1.0f, -126));  // amax / 448 would be subnormal
  EXPECT_EQ(scale_from_amax(1e-37f, true), std::ldexp(1.0f, -126));
  EXPECT_EQ(scale_from_amax(448.0f * 3.0f, false), 3.0f);
  std::uniform_real_distribution<float> log2_amax(-30.0f, 30.0f);
  for (int i = 0; i < 1000; ++i) {
    const float amax = std::exp2(log2_amax(rng()));
    const float plain = scale_from_amax(amax, false), scale = scale_from_amax(amax, true);
    int exponent = 0;
    ASSERT_EQ(std::frexp(scale, &exponent), 0.5f) << amax;
    ASSERT_GE(scale, plain) << amax;
    ASSERT_LT(scale, 2.0f * plain) << amax;
  }
}

TEST(Fp8Quantize, AllZeroGroupGetsScaleOneAndZeroCodes) {
  QuantCase c = fp8_test::make_case({2, 20, 20, 2, 2, 64}, Dtype::kBFloat16, QuantGranularity::kPerHead, true, rng());
  for (int t = 0; t < 3; ++t) {  // head 1 of batch 0 all zeros
    for (int s = 0; s < 20; ++s) {
      for (int j = 0; j < 64; ++j) c.in[t][c.offset(t, 0, s, 1, j)] = 0;
    }
  }
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(c.scales[t][1], 1.0f);
    for (int s = 0; s < 20; ++s) {
      for (int j = 0; j < 64; ++j) ASSERT_EQ(decode_e4m3_code(c.codes[t][c.offset(t, 0, s, 1, j)]), 0.0f);
    }
    EXPECT_NE(c.scales[t][0], 1.0f);  // the random heads keep their amax-derived scales
  }
}

// A bf16 head of subnormals (amax / 448 below float's least normal) gets scale 2^-126, whose inverse is
// finite: its codes follow the values instead of all saturating at +-448.
TEST(Fp8Quantize, TinyGroupsKeepAFiniteInverseScale) {
  QuantCase c = fp8_test::make_case({1, 9, 9, 2, 2, 64}, Dtype::kBFloat16, QuantGranularity::kPerHead, false, rng());
  std::uniform_int_distribution<int> mantissa(1, 127);
  for (int s = 0; s < 9; ++s) {  // head 1 of v: bf16 subnormals, 2^-133 to 127 * 2^-133, both signs
    for (int j = 0; j < 64; ++j) c.in[2][c.offset(2, 0, s, 1, j)] = static_cast<std::uint16_t>(mantissa(rng()) | (j % 2) << 15);
  }
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  const float scale = c.scales[2][1];
  EXPECT_EQ(scale, std::ldexp(1.0f, -126));
  for (int s = 0; s < 9; ++s) {
    for (int j = 0; j < 64; ++j) {
      const double x = c.input_value(2, c.offset(2, 0, s, 1, j));
      const double decoded = decode_e4m3_code(c.codes[2][c.offset(2, 0, s, 1, j)]) * static_cast<double>(scale);
      ASSERT_LE(std::fabs(decoded - x), std::fabs(x) / 16.0 + scale / 1024.0) << "s " << s << " j " << j;
    }
  }
}

// Per block, an all-zero block of q or k gets scale 1, of v 2^-40 (below its neighbours', so that the
// forward never scales their P down to it); every block's codes are zero there, and the blocks beside
// keep their amax-derived scales.
TEST(Fp8Quantize, AllZeroBlocksGetTheirScalesAndZeroCodes) {
  QuantCase c = fp8_test::make_case({1, 50, 70, 2, 2, 64}, Dtype::kFloat16, QuantGranularity::kPerBlock, false, rng(),
                                    16, 32);
  for (int t = 0; t < 3; ++t) {  // block 1 of head 0 all zeros
    for (int s = c.block_rows(t); s < 2 * c.block_rows(t); ++s) {
      for (int j = 0; j < 64; ++j) c.in[t][c.offset(t, 0, s, 0, j)] = 0;
    }
  }
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(c.scales[t][1], t == 2 ? std::ldexp(1.0f, -40) : 1.0f) << "tensor " << t;
    for (int s = c.block_rows(t); s < 2 * c.block_rows(t); ++s) {
      for (int j = 0; j < 64; ++j) ASSERT_EQ(decode_e4m3_code(c.codes[t][c.offset(t, 0, s, 0, j)]), 0.0f);
    }
    for (int block : {0, 2}) {
      EXPECT_GT(c.scales[t][block], 1e-3f) << "tensor " << t << " block " << block;
      EXPECT_LT(c.scales[t][block], 1.0f) << "tensor " << t << " block " << block;
    }
  }
}

TEST(Fp8Hadamard, TransformMatchesMatrixDefinition) {
  for (int d : {16, 32, 48, 64, 96, 128, 192, 240, 256}) {
    const auto signs = hopattn::detail::hadamard_signs(rng()());
    const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hopattn::detail::hadamard_block(d))));
    std::vector<float> e(d);
    for (int i = 0; i < d; ++i) {  // e_i M is row i of M
      std::fill(e.begin(), e.end(), 0.0f);
      e[i] = 1.0f;
      hopattn::reference::incoherent_transform(e.data(), d, signs, norm);
      for (int j = 0; j < d; ++j) ASSERT_NEAR(e[j], m_entry(i, j, d, signs), 1e-7) << "d " << d << " (" << i << ", " << j << ")";
    }
  }
}

TEST(Fp8Hadamard, OrthogonalSoDotProductsSurvive) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int d : {32, 64, 96, 128, 192, 256}) {
    const auto signs = hopattn::detail::hadamard_signs(rng()());
    const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hopattn::detail::hadamard_block(d))));
    // M M^T = I in float64 over the float32 rows of M.
    std::vector<std::vector<float>> m(d, std::vector<float>(d, 0.0f));
    for (int i = 0; i < d; ++i) {
      m[i][i] = 1.0f;
      hopattn::reference::incoherent_transform(m[i].data(), d, signs, norm);
    }
    for (int i = 0; i < d; ++i) {
      for (int k = 0; k < d; ++k) {
        double dot = 0.0;
        for (int j = 0; j < d; ++j) dot += static_cast<double>(m[i][j]) * m[k][j];
        ASSERT_NEAR(dot, i == k ? 1.0 : 0.0, 1e-6) << "d " << d << " (" << i << ", " << k << ")";
      }
    }
    // (qM)(kM)^T = q k^T, outliers included.
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> q(d), k(d);
      for (int j = 0; j < d; ++j) {
        q[j] = normal(rng()) + (j == trial ? 30.0f : 0.0f);
        k[j] = normal(rng());
      }
      double exact = 0.0, qn = 0.0, kn = 0.0;
      for (int j = 0; j < d; ++j) exact += static_cast<double>(q[j]) * k[j], qn += q[j] * q[j], kn += k[j] * k[j];
      hopattn::reference::incoherent_transform(q.data(), d, signs, norm);
      hopattn::reference::incoherent_transform(k.data(), d, signs, norm);
      double rotated = 0.0;
      for (int j = 0; j < d; ++j) rotated += static_cast<double>(q[j]) * k[j];
      EXPECT_NEAR(rotated, exact, 1e-6 * std::sqrt(qn * kn) * std::sqrt(static_cast<double>(d)));
    }
  }
}

TEST(Fp8Hadamard, SignsAreDeterministicInTheSeedAndBalanced) {
  const std::uint64_t seed = rng()();
  const auto a = hopattn::detail::hadamard_signs(seed), b = hopattn::detail::hadamard_signs(seed);
  const auto other = hopattn::detail::hadamard_signs(seed + 1);
  int negated = 0, differ = 0;
  for (int j = 0; j < hopattn::detail::kMaxHadamardDim; ++j) {
    ASSERT_EQ(a.negated(j), b.negated(j));
    negated += a.negated(j);
    differ += a.negated(j) != other.negated(j);
  }
  EXPECT_GT(negated, 80);  // 256 fair coins: 128 +- 8 per standard deviation
  EXPECT_LT(negated, 176);
  EXPECT_GT(differ, 80);
  // splitmix64 is fixed: seed 0 gives these words on every platform and every run.
  EXPECT_EQ(hopattn::detail::hadamard_signs(0).bits[0], 0xE220A8397B1DCDAFull);
}

TEST(Fp8Hadamard, SameSeedSameCodesOtherSeedOtherCodes) {
  QuantCase c = fp8_test::make_case({1, 40, 40, 2, 2, 128}, Dtype::kFloat16, QuantGranularity::kPerBlock, true, rng());
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  const std::vector<std::uint8_t> first_codes[3] = {c.codes[0], c.codes[1], c.codes[2]};
  const std::vector<float> first_scales[3] = {c.scales[0], c.scales[1], c.scales[2]};
  for (auto& v : c.codes) std::fill(v.begin(), v.end(), fp8_test::kPoisonCode);
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(c.codes[t], first_codes[t]);
    EXPECT_EQ(c.scales[t], first_scales[t]);
  }
  c.args.seed ^= 0x9E3779B97F4A7C15ull;
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  EXPECT_NE(c.codes[0], first_codes[0]);
  EXPECT_NE(c.codes[1], first_codes[1]);
  EXPECT_EQ(c.codes[2], first_codes[2]) << "v is never transformed, so the seed must not touch it";
}

TEST(Fp8Quantize, StridedTensorsGiveTheCodesOfContiguousOnes) {
  for (QuantGranularity g : {QuantGranularity::kPerTensor, QuantGranularity::kPerHead, QuantGranularity::kPerBlock}) {
    QuantCase dense = fp8_test::make_case({2, 37, 70, 2, 1, 64}, Dtype::kBFloat16, g, true, rng(), 16, 32);
    QuantCase padded = fp8_test::make_case({2, 37, 70, 2, 1, 64}, Dtype::kBFloat16, g, true, rng(), 16, 32, 7);
    padded.args.seed = dense.args.seed;
    for (int t = 0; t < 3; ++t) {
      for (int b = 0; b < 2; ++b) {
        for (int s = 0; s < dense.seqlen(t); ++s) {
          for (int h = 0; h < dense.heads(t); ++h) {
            for (int j = 0; j < 64; ++j) padded.in[t][padded.offset(t, b, s, h, j)] = dense.in[t][dense.offset(t, b, s, h, j)];
          }
        }
      }
    }
    ASSERT_TRUE(hopattn::quantize_fp8(dense.args).ok());
    ASSERT_TRUE(hopattn::quantize_fp8(padded.args).ok());
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(dense.scales[t], padded.scales[t]);
      for (int b = 0; b < 2; ++b) {
        for (int s = 0; s < dense.seqlen(t); ++s) {
          for (int h = 0; h < dense.heads(t); ++h) {
            for (int j = 0; j < 64; ++j) {
              ASSERT_EQ(dense.codes[t][dense.offset(t, b, s, h, j)], padded.codes[t][padded.offset(t, b, s, h, j)]);
            }
          }
        }
      }
    }
  }
}

}  // namespace
