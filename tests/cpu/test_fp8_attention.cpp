// The CPU emulations behind the accuracy study: FP8 attention against float64 attention of the same
// dequantized operands (only P's e4m3 rounding may differ), and the 16-bit baselines within their
// rounding bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/test_fp8_util.hpp"
#include "reference/fp8_attention.hpp"
#include "reference/fp8_baselines.hpp"
#include "reference/fp8_rounding.hpp"

namespace {

using fp8_test::QuantCase;
using hopattn::Dtype;
using hopattn::QuantGranularity;
using hopattn::reference::decode_e4m3_code;

std::mt19937_64& rng() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine;
}

// code * scale of every element of tensor t, contiguous (b, s, h, d).
std::vector<float> dequantized(const QuantCase& c, int t) {
  const auto& sh = c.shape;
  const QuantGranularity g = c.args.granularity;
  const int blocks = static_cast<int>(hopattn::scale_blocks(g, c.seqlen(t), c.block_rows(t)));
  std::vector<float> x;
  for (int b = 0; b < sh.batch; ++b) {
    for (int s = 0; s < c.seqlen(t); ++s) {
      for (int h = 0; h < c.heads(t); ++h) {
        const int group = g == QuantGranularity::kPerTensor ? 0
                          : g == QuantGranularity::kPerHead ? b * c.heads(t) + h
                                                            : (b * c.heads(t) + h) * blocks + s / c.block_rows(t);
        for (int j = 0; j < sh.d; ++j) {
          x.push_back(decode_e4m3_code(c.codes[t][c.offset(t, b, s, h, j)]) * c.scales[t][group]);
        }
      }
    }
  }
  return x;
}

// The emulation's arguments for c's quantized tensors: its codes, descales, granularity and block rows
// (key tiles and p_carries_v_ratio left at their defaults).
hopattn::reference::Fp8AttentionArgs attention_args(const QuantCase& c) {
  hopattn::reference::Fp8AttentionArgs fa;
  fa.q8 = c.args.q8, fa.k8 = c.args.k8, fa.v8 = c.args.v8;
  fa.q_descale = c.args.q_descale, fa.k_descale = c.args.k_descale, fa.v_descale = c.args.v_descale;
  fa.granularity = c.args.granularity;
  fa.block_rows_q = c.args.block_rows_q, fa.block_rows_kv = c.args.block_rows_kv;
  return fa;
}

hopattn::reference::DenseInputs dense(const fp8_test::QuantShape& sh, std::vector<float> q, std::vector<float> k,
                                      std::vector<float> v) {
  hopattn::reference::DenseInputs in;
  in.batch = sh.batch, in.seqlen_q = sh.seqlen_q, in.seqlen_k = sh.seqlen_k;
  in.heads_q = sh.heads_q, in.heads_kv = sh.heads_kv, in.head_dim = sh.d;
  in.q = std::move(q), in.k = std::move(k), in.v = std::move(v);
  return in;
}

// sum_j p_ij |v_jc| and sum_j |v_jc| per output element, in float64: the scales of the error bounds.
void magnitudes(const hopattn::reference::DenseInputs& in, std::vector<double>* weighted, std::vector<double>* plain) {
  hopattn::reference::DenseInputs abs_v = in;
  for (float& x : abs_v.v) x = std::fabs(x);
  *weighted = hopattn::reference::attention_f64(abs_v);
  for (float& x : abs_v.q) x = 0.0f;  // uniform attention: the mean of |v|
  *plain = hopattn::reference::attention_f64(abs_v);
  for (double& x : *plain) x *= in.seqlen_k;
}

// The largest ratio of v scales within one key tile of c (per-block scales), 1 otherwise: how far
// p_carries_v_ratio may shrink a P before its rounding.
double largest_tile_v_ratio(const QuantCase& c, int tile_k) {
  if (c.args.granularity != QuantGranularity::kPerBlock) return 1.0;
  const int rows = c.block_rows(2), seqlen = c.seqlen(2), heads = c.heads(2);
  const int blocks = (seqlen + rows - 1) / rows;
  double ratio = 1.0;
  for (int bh = 0; bh < c.shape.batch * heads; ++bh) {
    for (int t0 = 0; t0 < seqlen; t0 += tile_k) {
      const int last = std::min(seqlen, t0 + tile_k) - 1;
      float lo = INFINITY, hi = 0.0f;
      for (int e = t0 / rows; e <= last / rows; ++e) {
        lo = std::min(lo, c.scales[2][bh * blocks + e]);
        hi = std::max(hi, c.scales[2][bh * blocks + e]);
      }
      ratio = std::max(ratio, double(hi) / lo);
    }
  }
  return ratio;
}

TEST(Fp8Attention, OnlyTheRoundingOfPSeparatesItFromExactAttention) {
  struct Config {
    fp8_test::QuantShape shape;
    QuantGranularity granularity;
    bool hadamard;
    int block_q, block_kv, tile_k;
    bool p_carries_v_ratio;  // the grouped kernels' arithmetic: key tiles over several v scales
  };
  const Config configs[] = {
      {{2, 37, 150, 4, 2, 64}, QuantGranularity::kPerBlock, true, 16, 32, 64, false},
      {{1, 1, 1, 1, 1, 128}, QuantGranularity::kPerTensor, false, 128, 128, 128, false},
      {{1, 20, 300, 3, 3, 128}, QuantGranularity::kPerHead, true, 128, 128, 128, false},
      {{2, 9, 77, 2, 1, 40}, QuantGranularity::kPerBlock, false, 4, 5, 16, false},
      {{2, 37, 150, 4, 2, 64}, QuantGranularity::kPerBlock, true, 16, 32, 96, true},
      {{1, 9, 301, 2, 1, 128}, QuantGranularity::kPerBlock, false, 64, 128, 192, true},
  };
  for (const Config& cfg : configs) {
    SCOPED_TRACE(std::string(hopattn::granularity_name(cfg.granularity)) + " sk " + std::to_string(cfg.shape.seqlen_k));
    QuantCase c = fp8_test::make_case(cfg.shape, Dtype::kBFloat16, cfg.granularity, cfg.hadamard, rng(), cfg.block_q,
                                      cfg.block_kv);
    ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
    hopattn::reference::Fp8AttentionArgs fa = attention_args(c);
    fa.tile_k = cfg.tile_k;
    fa.p_carries_v_ratio = cfg.p_carries_v_ratio;
    const std::vector<float> out = hopattn::reference::fp8_attention(fa);
    // A P shrunk by a v ratio r before its rounding meets the subnormal grid r times sooner.
    const double shrink = cfg.p_carries_v_ratio ? largest_tile_v_ratio(c, cfg.tile_k) : 1.0;

    const auto in = dense(cfg.shape, dequantized(c, 0), dequantized(c, 1), dequantized(c, 2));
    const std::vector<double> exact = hopattn::reference::attention_f64(in);
    std::vector<double> weighted, plain;
    magnitudes(in, &weighted, &plain);
    ASSERT_EQ(out.size(), exact.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      ASSERT_FALSE(std::isnan(out[i])) << i;
      // e4m3 rounds P (scaled into [0, 256]) by at most 2^-4 relative, or 2^-10 absolute on the subnormal
      // grid, i.e. 2^-18 of a probability; float32 sums add a little.
      const double bound = (1.0 / 16 + 1e-4) * weighted[i] + std::ldexp(1.0, -18) * shrink * plain[i] + 1e-6;
      ASSERT_LE(std::fabs(out[i] - exact[i]), bound) << "element " << i;
      worst = std::max(worst, std::fabs(out[i] - exact[i]) / bound);
    }
    if (cfg.shape.seqlen_k > 1) {  // one key: P = 256 exactly, nothing to round
      EXPECT_GT(worst, 0.0) << "P rounding must show: an exact emulation would not be emulating FP8";
    }
  }
}

// Where every key tile has one v scale (block_rows_kv a multiple of tile_k), carrying the v ratio in P
// changes nothing: the ratio is exactly 1 and the tile's product takes that one scale. Where tiles span
// several scales, quantize_fp8's v scales (powers of two) keep it exact but for P on e4m3's subnormal
// grid and the order of float sums; other scales make it round P differently (so the check has teeth).
TEST(Fp8Attention, VRatioInPIsExactWithPowerOfTwoVScales) {
  const fp8_test::QuantShape shape{1, 13, 257, 2, 1, 64};
  QuantCase c = fp8_test::make_case(shape, Dtype::kBFloat16, QuantGranularity::kPerBlock, false, rng(), 64, 64);
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  hopattn::reference::Fp8AttentionArgs fa = attention_args(c);
  fa.tile_k = 64;
  const std::vector<float> plain_tiles = hopattn::reference::fp8_attention(fa);
  fa.p_carries_v_ratio = true;
  EXPECT_EQ(hopattn::reference::fp8_attention(fa), plain_tiles);

  // The largest |carried - per-run| over its bound: float sums, and P that leave e4m3's normal range.
  auto worst_gap = [&]() {
    fa.tile_k = 192;
    fa.p_carries_v_ratio = true;
    const std::vector<float> carried = hopattn::reference::fp8_attention(fa);
    fa.p_carries_v_ratio = false;
    const std::vector<float> runs = hopattn::reference::fp8_attention(fa);
    const auto in = dense(shape, dequantized(c, 0), dequantized(c, 1), dequantized(c, 2));
    std::vector<double> weighted, plain;
    magnitudes(in, &weighted, &plain);
    const double shrink = largest_tile_v_ratio(c, 192);
    EXPECT_EQ(carried.size(), runs.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < carried.size() && i < runs.size(); ++i) {
      EXPECT_FALSE(std::isnan(carried[i]) || std::isnan(runs[i])) << i;
      const double bound = 1e-5 * weighted[i] + std::ldexp(1.0, -18) * shrink * plain[i] + 1e-7;
      worst = std::max(worst, std::fabs(double(carried[i]) - runs[i]) / bound);
    }
    return worst;
  };
  for (float scale : c.scales[2]) {
    int exponent = 0;
    ASSERT_EQ(std::frexp(scale, &exponent), 0.5f) << "quantize_fp8's v scales must be powers of two";
  }
  EXPECT_LE(worst_gap(), 1.0);
  for (std::size_t e = 0; e < c.scales[2].size(); ++e) c.scales[2][e] *= 1.0f + 0.3f * (e % 3);
  EXPECT_GT(worst_gap(), 1.0) << "v ratios other than powers of two must change P's rounding";
}

// An all-zero v block's scale from quantize_fp8 (2^-40) never becomes the largest of a key tile it
// shares with ordinary blocks: the tile's output is the one its neighbour's scale gives, bit for bit
// (the block's own P, however scaled, meet zero codes; the row sum takes P unscaled). With scale 1 the
// zero block would be that largest, and small v's P would be scaled down onto e4m3's subnormals.
TEST(Fp8Attention, ZeroVBlockScaleLeavesItsNeighboursPExact) {
  const fp8_test::QuantShape shape{1, 37, 384, 2, 1, 64};
  QuantCase c = fp8_test::make_case(shape, Dtype::kBFloat16, QuantGranularity::kPerBlock, false, rng(), 64, 64);
  for (std::size_t i = 0; i < c.in[2].size(); ++i) {  // small v: block scales near 2^-17
    c.in[2][i] = fp8_test::to_bits(1e-4f * c.input_value(2, static_cast<std::int64_t>(i)), Dtype::kBFloat16);
  }
  for (int s = 64; s < 128; ++s) {  // v block 1 all zeros, in 192-key tile 0 with blocks 0 and 2
    for (int j = 0; j < 64; ++j) c.in[2][c.offset(2, 0, s, 0, j)] = 0;
  }
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  ASSERT_EQ(c.scales[2][1], std::ldexp(1.0f, -40));
  hopattn::reference::Fp8AttentionArgs fa = attention_args(c);
  fa.tile_k = 192, fa.p_carries_v_ratio = true;
  const auto in = dense(shape, dequantized(c, 0), dequantized(c, 1), dequantized(c, 2));
  const std::vector<double> exact = hopattn::reference::attention_f64(in);
  const std::vector<float> quantized = hopattn::reference::fp8_attention(fa);
  for (float x : quantized) ASSERT_FALSE(std::isnan(x));

  c.scales[2][1] = c.scales[2][0];
  EXPECT_EQ(hopattn::reference::fp8_attention(fa), quantized) << "the neighbour's scale gives other P";
  c.scales[2][1] = 1.0f;
  const double error = hopattn::reference::rmse(quantized, exact);
  EXPECT_GT(hopattn::reference::rmse(hopattn::reference::fp8_attention(fa), exact), 1.5 * error)
      << "scale 1 for the zero block must cost its neighbours' P (so the check has teeth)";
}

TEST(Fp8Attention, StandardBaselineUsesTheSameOperands) {
  // Sanity of the paper-style baseline: close to exact attention of the dequantized operands, but with
  // the coarser unscaled P the error is larger than the flash-style emulation's.
  QuantCase c = fp8_test::make_case({1, 64, 512, 2, 2, 64}, Dtype::kFloat16, QuantGranularity::kPerTensor, false, rng());
  ASSERT_TRUE(hopattn::quantize_fp8(c.args).ok());
  const hopattn::reference::Fp8AttentionArgs fa = attention_args(c);
  const auto in = dense(c.shape, dequantized(c, 0), dequantized(c, 1), dequantized(c, 2));
  const std::vector<double> exact = hopattn::reference::attention_f64(in);
  double rms = 0.0;
  for (double x : exact) rms += x * x;
  rms = std::sqrt(rms / exact.size());
  const double flash = hopattn::reference::rmse(hopattn::reference::fp8_attention(fa), exact);
  const double standard = hopattn::reference::rmse(hopattn::reference::standard_fp8_attention(fa), exact);
  EXPECT_LT(standard, 0.5 * rms);
  EXPECT_GT(standard, flash);
}

TEST(Fp8Baselines, SixteenBitAttentionWithinItsRounding) {
  const fp8_test::QuantShape sh{2, 33, 200, 4, 2, 64};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Dtype dtype : {Dtype::kFloat16, Dtype::kBFloat16}) {
    auto round = [&](float x) {
      return dtype == Dtype::kFloat16 ? hopattn::reference::to_fp16_rn(x) : hopattn::reference::to_bf16_rn(x);
    };
    std::vector<float> qkv[3];
    for (int t = 0; t < 3; ++t) {
      const int s = t == 0 ? sh.seqlen_q : sh.seqlen_k, h = t == 0 ? sh.heads_q : sh.heads_kv;
      for (int i = 0; i < sh.batch * s * h * sh.d; ++i) qkv[t].push_back(round(normal(rng())));
    }
    const auto in = dense(sh, qkv[0], qkv[1], qkv[2]);
    const std::vector<double> exact = hopattn::reference::attention_f64(in);
    std::vector<double> weighted, plain;
    magnitudes(in, &weighted, &plain);
    const std::vector<float> out = hopattn::reference::flash_attention_16bit(in, dtype, 64);
    const double unit = dtype == Dtype::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);  // half an ulp
    for (std::size_t i = 0; i < out.size(); ++i) {
      // P rounded once (relative unit), the output rounded once (relative unit), float32 sums.
      const double bound = (unit + 1e-5) * weighted[i] + unit * std::fabs(exact[i]) * 1.01 + 1e-6;
      ASSERT_LE(std::fabs(out[i] - exact[i]), bound) << hopattn::dtype_name(dtype) << " element " << i;
    }
    if (dtype == Dtype::kFloat16) {
      const double standard = hopattn::reference::rmse(hopattn::reference::standard_attention_fp16(in), exact);
      EXPECT_LT(standard, 2e-3);  // fp16 scores of magnitude ~3 carry errors ~2^-11 * 3 into every weight
      EXPECT_GT(standard, hopattn::reference::rmse(out, exact));
    }
  }
}

}  // namespace
