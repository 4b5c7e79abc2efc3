// hopattn-bench's command line and grids (bench/cli.cpp, bench/shapes.cpp): the decode grid, the
// byte count behind its TB/s column, the flags it brought (--list, --queue-ahead, --back-to-back, --cache-seqlen), and
// the FP8 block descales' values (--fp8-scales).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "shapes.hpp"

namespace hopattn::bench {
namespace {

// parse_cli over {"hopattn-bench", args...}; *error holds its message when it returns false.
bool parse(std::vector<std::string> args, CliOptions* options, std::string* error) {
  args.insert(args.begin(), "hopattn-bench");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return parse_cli(static_cast<int>(argv.size()), argv.data(), options, error);
}

CliOptions parsed(std::vector<std::string> args) {
  CliOptions options;
  std::string error;
  EXPECT_TRUE(parse(std::move(args), &options, &error)) << error;
  return options;
}

std::string parse_error(std::vector<std::string> args) {
  CliOptions options;
  std::string error;
  EXPECT_FALSE(parse(std::move(args), &options, &error));
  return error;
}

TEST(BenchDecodeGrid, ParsesAndTimesAsInference) {
  const CliOptions options = parsed({"--grid", "decode"});
  EXPECT_EQ(options.grid, "decode");
  EXPECT_TRUE(options.queue_ahead);
  EXPECT_FALSE(options.write_lse);
  EXPECT_GE(options.shapes.size(), 30u);
  EXPECT_LE(options.shapes.size(), 45u);
  EXPECT_NE(std::string(grid_names()).find("decode"), std::string::npos);
}

// Decoding at the wide head dims: inference timing, one or two query rows a sequence (a tile's live
// rows: at most 8 packed), head dims 192 and 256, paged rows among them, FP8 ones last.
TEST(BenchDecodeWideGrid, RowsAreDecodingStepsAtWideHeadDims) {
  const CliOptions options = parsed({"--grid", "decode_wide"});
  EXPECT_TRUE(options.queue_ahead);
  EXPECT_FALSE(options.write_lse);
  ASSERT_EQ(options.shapes.size(), 17u);
  int paged = 0, fp8 = 0;
  for (const Shape& s : options.shapes) {
    EXPECT_TRUE(s.hdim == 192 || s.hdim == 256) << s.hdim;
    EXPECT_LE(s.seqlen_q * s.heads_q / s.heads_kv, 8);
    EXPECT_EQ(s.causal, s.seqlen_q > 1);
    paged += s.page_size > 0 ? 1 : 0;
    fp8 += s.dtype == Dtype::kFloat8E4M3 ? 1 : 0;
  }
  EXPECT_EQ(paged, 3);
  EXPECT_EQ(fp8, 3);
  EXPECT_EQ(options.shapes.back().dtype, Dtype::kFloat8E4M3);
}

// The head-dim grid: forward rows at head dims other than the papers' 64, 128 and 256, on the papers'
// convention (16k tokens, hidden 2048), which is what device_bench.sh runs the peers on.
TEST(BenchHeadDimsGrid, RowsAreForwardsAtTheOtherHeadDims) {
  std::vector<Shape> shapes;
  ASSERT_TRUE(make_grid("headdims", &shapes));
  ASSERT_EQ(shapes.size(), 16u);  // 4 head dims x causal or not x 2 lengths
  std::set<int> dims;
  for (const Shape& s : shapes) {
    EXPECT_FALSE(s.backward);
    EXPECT_EQ(s.batch * s.seqlen_q, 16384);
    EXPECT_EQ(s.heads_q, 2048 / s.hdim);
    dims.insert(s.hdim);
  }
  EXPECT_EQ(dims, (std::set<int>{80, 96, 160, 192}));
}

// FP8 between its kernels' widths: 96 and 192 on the papers' convention, then DeepSeek's 192 / 128 layers.
TEST(BenchFp8HeadDimsGrid, RowsAreFp8ForwardsAtTheOtherHeadDims) {
  std::vector<Shape> shapes, mla;
  ASSERT_TRUE(make_grid("fp8_headdims", &shapes));
  ASSERT_TRUE(make_grid("mla", &mla));
  ASSERT_EQ(shapes.size(), 8u + mla.size());  // 2 head dims x causal or not x 2 lengths, then the mla rows
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    EXPECT_EQ(s.dtype, Dtype::kFloat8E4M3);
    EXPECT_FALSE(s.backward);
    if (i < 8) {
      EXPECT_TRUE(s.hdim == 96 || s.hdim == 192) << s.hdim;
      EXPECT_EQ(head_dim_v(s), s.hdim);
    } else {
      EXPECT_EQ(s.hdim, 192);
      EXPECT_EQ(head_dim_v(s), 128);
    }
  }
}

// DeepSeek's layers: forwards of q/k 192 and v 128 (the kernels of v's own width), one packed.
TEST(BenchMlaGrid, RowsAreDeepSeekForwards) {
  std::vector<Shape> shapes;
  ASSERT_TRUE(make_grid("mla", &shapes));
  ASSERT_EQ(shapes.size(), 6u);
  int packed = 0;
  for (const Shape& s : shapes) {
    EXPECT_FALSE(s.backward);
    EXPECT_EQ(s.hdim, 192);
    EXPECT_EQ(head_dim_v(s), 128);
    EXPECT_EQ(s.dtype, Dtype::kBFloat16);
    packed += s.varlen ? 1 : 0;
  }
  EXPECT_EQ(packed, 1);
  EXPECT_NE(std::string(grid_names()).find("mla"), std::string::npos);
}

// Their backward: the same layers, timing hopattn::backward, whose FLOPs count S, dK and dQ at q/k's
// 192 columns and dP and dV at v's 128.
TEST(BenchMlaGrid, BackwardRowsAreTheSameLayers) {
  std::vector<Shape> forwards, backwards;
  ASSERT_TRUE(make_grid("mla", &forwards));
  ASSERT_TRUE(make_grid("mla_bwd", &backwards));
  ASSERT_EQ(backwards.size(), forwards.size());
  for (std::size_t i = 0; i < backwards.size(); ++i) {
    const Shape& s = backwards[i];
    EXPECT_TRUE(s.backward);
    EXPECT_EQ(s.variant, "backward_" + forwards[i].variant);
    EXPECT_EQ(head_dim_v(s), 128);
    EXPECT_DOUBLE_EQ(timed_flops(s), forward_flops(forwards[i]) * (3 * 192 + 2 * 128) / (192 + 128));
  }
  Shape equal = forwards[0];
  equal.hdim_v = 0;  // v of q's head dim: the papers' 2.5x
  EXPECT_DOUBLE_EQ(backward_flops(equal), 2.5 * forward_flops(equal));
}

TEST(BenchDecodeGrid, OtherGridsKeepTheirTiming) {
  const CliOptions options = parsed({"--grid", "paper"});
  EXPECT_FALSE(options.queue_ahead);
  EXPECT_FALSE(options.back_to_back);
  EXPECT_TRUE(options.write_lse);
}

// --back-to-back queues the calls ahead too (its groups of calls would otherwise time the host).
TEST(BenchDecodeGrid, BackToBackQueuesAhead) {
  const CliOptions options = parsed({"--grid", "decode", "--back-to-back"});
  EXPECT_TRUE(options.back_to_back);
  EXPECT_TRUE(options.queue_ahead);
  const CliOptions plain = parsed({"--back-to-back"});
  EXPECT_TRUE(plain.back_to_back);
  EXPECT_TRUE(plain.queue_ahead);
}

// --no-programmatic-launch reaches every shape of a grid, and only then.
TEST(BenchDecodeGrid, NoProgrammaticLaunchReachesEveryShape) {
  const CliOptions off = parsed({"--grid", "decode", "--no-programmatic-launch"});
  ASSERT_FALSE(off.shapes.empty());
  for (const Shape& s : off.shapes) EXPECT_FALSE(s.options.programmatic_launch);
  const CliOptions on = parsed({"--grid", "decode"});
  for (const Shape& s : on.shapes) EXPECT_TRUE(s.options.programmatic_launch);
  EXPECT_NE(parse_error({"--no-programmatic-launch=1"}).find("takes no value"), std::string::npos);
}

TEST(BenchDecodeGrid, RowsAreDecodingSteps) {
  std::vector<Shape> shapes;
  ASSERT_TRUE(make_grid("decode", &shapes));
  int speculative = 0;
  std::set<std::pair<int, int>> heads;
  for (const Shape& s : shapes) {
    SCOPED_TRACE("batch " + std::to_string(s.batch) + " seqlen_k " + std::to_string(s.seqlen_k) + " " + s.variant);
    EXPECT_EQ(s.dtype, Dtype::kBFloat16);
    EXPECT_FALSE(s.backward);
    EXPECT_TRUE(s.hdim == 128 || s.hdim == 64);
    EXPECT_TRUE(s.batch == 1 || s.batch == 8 || s.batch == 32);
    EXPECT_GE(s.seqlen_k, 1024);
    EXPECT_LE(s.seqlen_k, 65536);
    // K and V of one call stay within 16 GiB.
    EXPECT_LE(2.0 * s.batch * s.heads_kv * allocated_keys(s) * s.hdim * 2, 16.0 * (1 << 30));
    if (s.seqlen_q == 4) {
      EXPECT_TRUE(s.causal) << "the speculative row is causal";
      ++speculative;
    } else {
      EXPECT_EQ(s.seqlen_q, 1);
    }
    if (s.page_size > 0) EXPECT_EQ(allocated_keys(s) % s.page_size, 0);
    heads.insert({s.heads_q, s.heads_kv});
  }
  EXPECT_EQ(speculative, 1);
  EXPECT_EQ(heads, (std::set<std::pair<int, int>>{{32, 8}, {32, 32}, {28, 4}}));
}

TEST(BenchDecodeGrid, HasPagedAndSequsedRows) {
  std::vector<Shape> shapes;
  ASSERT_TRUE(make_grid("decode", &shapes));
  const auto paged = std::count_if(shapes.begin(), shapes.end(), [](const Shape& s) {
    return s.page_size == 256 && s.variant == "paged_256";
  });
  const auto small_pages = std::count_if(shapes.begin(), shapes.end(), [](const Shape& s) {
    return s.page_size == 16 && s.variant == "paged_16";
  });
  const auto token_pages = std::count_if(shapes.begin(), shapes.end(), [](const Shape& s) {
    return s.page_size == 1 && s.variant == "paged_1";
  });
  const auto cached = std::count_if(shapes.begin(), shapes.end(), [](const Shape& s) {
    return s.cache_seqlen_k > s.seqlen_k && s.variant == "seqused_k";
  });
  EXPECT_GE(paged, 1);
  EXPECT_GE(small_pages, 1);
  EXPECT_GE(token_pages, 1);
  EXPECT_GE(cached, 1);
}

TEST(BenchForwardBytes, CountsQKVReadAndOutWritten) {
  Shape s;  // bf16
  s.batch = 1;
  s.heads_q = 32;
  s.heads_kv = 8;
  s.seqlen_q = 1;
  s.seqlen_k = 1024;
  s.hdim = 128;
  const double q = 32 * 128 * 2, kv = 1024 * 8 * 128 * 2;
  EXPECT_DOUBLE_EQ(forward_bytes(s), 2 * q + 2 * kv);  // q and out, k and v
  EXPECT_DOUBLE_EQ(timed_bytes(s), forward_bytes(s));

  Shape cached = s;  // a larger cache reads only the keys in use
  cached.cache_seqlen_k = 4096;
  EXPECT_DOUBLE_EQ(forward_bytes(cached), forward_bytes(s));

  Shape fp8 = s;  // one byte in, bf16 out
  fp8.dtype = Dtype::kFloat8E4M3;
  EXPECT_DOUBLE_EQ(forward_bytes(fp8), q / 2 + q + kv);

  Shape backward = s;
  backward.backward = true;
  EXPECT_DOUBLE_EQ(timed_bytes(backward), 0.0);
}

TEST(BenchForwardFlops, SpeculativeRowsCountTheBottomRightMask) {
  Shape s;
  s.batch = 1;
  s.heads_q = 1;
  s.hdim = 1;
  s.seqlen_q = 4;
  s.seqlen_k = 16384;
  s.causal = true;
  // Query i sees keys 0 ..= i + 16380: 16381 + 16382 + 16383 + 16384 pairs, 4 FLOPs each.
  EXPECT_DOUBLE_EQ(forward_flops(s), 4.0 * (16381 + 16382 + 16383 + 16384));
}

TEST(BenchCli, CacheSeqlenIsSequsedK) {
  const CliOptions options = parsed({"--seqlen-q", "1", "--seqlen-k", "1000", "--cache-seqlen", "4096"});
  ASSERT_EQ(options.shapes.size(), 1u);
  EXPECT_EQ(options.shapes[0].cache_seqlen_k, 4096);
  EXPECT_EQ(options.shapes[0].variant, "seqused_k");
  EXPECT_EQ(allocated_keys(options.shapes[0]), 4096);
}

// --padded-seqlen-q: q stored with more rows than it uses; FLOPs and bytes count the rows in use.
TEST(BenchCli, PaddedSeqlenQIsSequsedQ) {
  const CliOptions options = parsed({"--seqlen-q", "1000", "--seqlen-k", "3000", "--padded-seqlen-q", "1024"});
  ASSERT_EQ(options.shapes.size(), 1u);
  const Shape& padded = options.shapes[0];
  EXPECT_EQ(padded.padded_seqlen_q, 1024);
  EXPECT_EQ(padded.variant, "seqused_q");
  EXPECT_EQ(allocated_rows_q(padded), 1024);
  Shape unpadded = padded;
  unpadded.padded_seqlen_q = 0;
  EXPECT_EQ(allocated_rows_q(unpadded), 1000);
  EXPECT_DOUBLE_EQ(forward_flops(padded), forward_flops(unpadded));
  EXPECT_DOUBLE_EQ(forward_bytes(padded), forward_bytes(unpadded));
  const CliOptions backward = parsed({"--seqlen-q", "1000", "--padded-seqlen-q", "1024", "--backward"});
  ASSERT_EQ(backward.shapes.size(), 1u);
  EXPECT_EQ(backward.shapes[0].variant, "backward_seqused_q");
  EXPECT_EQ(backward.shapes[0].seqlen_k, 1000);  // follows the rows in use, as without padding
}

// --hdim-v: v's own head dim; FLOPs count QK^T at hdim and P V at hdim_v, bytes v and out at hdim_v.
TEST(BenchCli, HdimVCountsPVAtItsOwnHeadDim) {
  const CliOptions options = parsed({"--hdim", "192", "--hdim-v", "128", "--seqlen-q", "1000", "--heads", "3"});
  ASSERT_EQ(options.shapes.size(), 1u);
  const Shape& s = options.shapes[0];
  EXPECT_EQ(head_dim_v(s), 128);
  EXPECT_EQ(s.variant, "hdim_v_128");
  EXPECT_DOUBLE_EQ(forward_flops(s), 2.0 * 2 * 3 * (192 + 128) * 1000.0 * 1000.0);
  const double rows_q = 2.0 * 1000 * 3, rows_kv = 2.0 * 1000 * 3;
  EXPECT_DOUBLE_EQ(forward_bytes(s), rows_q * (192 + 128) * 2 + rows_kv * (192 + 128) * 2);
  Shape same = s;
  same.hdim_v = 0;
  EXPECT_EQ(head_dim_v(same), 192);
  EXPECT_DOUBLE_EQ(forward_flops(same), 4.0 * 2 * 3 * 192 * 1000.0 * 1000.0);
  const CliOptions fp8 = parsed({"--hdim", "192", "--hdim-v", "128", "--dtype", "fp8"});
  ASSERT_EQ(fp8.shapes.size(), 1u);
  EXPECT_EQ(head_dim_v(fp8.shapes[0]), 128);
}

TEST(BenchCli, PaddedSeqlenQRefusals) {
  EXPECT_NE(parse_error({"--seqlen-q", "1000", "--padded-seqlen-q", "999"}).find("at least seqlen_q"),
            std::string::npos);
  EXPECT_NE(parse_error({"--padded-seqlen-q", "0"}).find("positive integer"), std::string::npos);
}

// --fp8-scales: the values of the block descales; the default is what quantize_fp8 writes.
TEST(BenchCli, Fp8ScalesNameTheirRowAndNeedBlockRows) {
  const CliOptions quantized = parsed({"--dtype", "fp8", "--fp8-block-rows", "128"});
  ASSERT_EQ(quantized.shapes.size(), 1u);
  EXPECT_EQ(quantized.shapes[0].fp8_block_scales, Fp8BlockScales::kQuantized);
  EXPECT_EQ(quantized.shapes[0].variant, "block_scales");
  const CliOptions amax = parsed({"--dtype", "fp8", "--fp8-block-rows", "128", "--fp8-scales", "amax"});
  EXPECT_EQ(amax.shapes[0].fp8_block_scales, Fp8BlockScales::kAmax);
  EXPECT_EQ(amax.shapes[0].variant, "block_scales_amax");
  const CliOptions ones = parsed({"--dtype", "fp8", "--fp8-scales=ones", "--fp8-block-rows", "192"});
  EXPECT_EQ(ones.shapes[0].fp8_block_scales, Fp8BlockScales::kOnes);
  EXPECT_EQ(ones.shapes[0].variant, "block_scales_ones");
  EXPECT_NE(parse_error({"--dtype", "fp8", "--fp8-scales", "amax"}).find("--fp8-block-rows"), std::string::npos);
  const std::string bad_value = parse_error({"--dtype", "fp8", "--fp8-block-rows", "128", "--fp8-scales", "unit"});
  EXPECT_NE(bad_value.find("quantized, amax, straddle or ones"), std::string::npos) << bad_value;
  EXPECT_EQ(parsed({"--dtype", "fp8", "--fp8-block-rows", "128", "--fp8-scales", "straddle"}).shapes[0].variant,
            "block_scales_straddle");
  EXPECT_FALSE(parse_error({"--grid", "fp8", "--fp8-scales", "amax"}).empty());
}

// The descales' values: amax / 448 for an amax in [4, 5.5]; v's powers of two where quantized.
TEST(BenchFp8Scales, ValuesAreWhatQuantizeFp8Writes) {
  const std::int64_t n = 1000;
  for (bool v : {false, true}) {
    const std::vector<float> amax = fp8_block_descale_values(n, Fp8BlockScales::kAmax, v, 7);
    const std::vector<float> quantized = fp8_block_descale_values(n, Fp8BlockScales::kQuantized, v, 7);
    ASSERT_EQ(amax.size(), std::size_t(n));
    ASSERT_EQ(quantized.size(), std::size_t(n));
    EXPECT_GT(std::set<float>(amax.begin(), amax.end()).size(), std::size_t(n / 2)) << "every block its own scale";
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_GE(amax[i], 4.0f / 448.0f);
      EXPECT_LE(amax[i], 5.5f / 448.0f);
      if (v) {
        EXPECT_EQ(quantized[i], 1.0f / 64.0f) << "amax / 448 in (2^-7, 2^-6] rounds up to 2^-6";
      } else {
        EXPECT_EQ(quantized[i], amax[i]);
      }
    }
  }
  for (float x : fp8_block_descale_values(5, Fp8BlockScales::kOnes, true, 7)) EXPECT_EQ(x, 1.0f);
  const std::vector<float> straddle = fp8_block_descale_values(n, Fp8BlockScales::kStraddle, true, 7);
  EXPECT_EQ(std::set<float>(straddle.begin(), straddle.end()), (std::set<float>{1.0f / 128, 1.0f / 64}));
}

TEST(BenchCli, LearnableSinkNamesItsRow) {
  const CliOptions options = parsed({"--hdim", "128", "--seqlen-q", "512", "--learnable-sink", "--backward"});
  ASSERT_EQ(options.shapes.size(), 1u);
  EXPECT_TRUE(options.shapes[0].learnable_sink);
  EXPECT_TRUE(options.shapes[0].backward);
  EXPECT_FALSE(parsed({"--hdim", "128"}).shapes[0].learnable_sink);
}

// A causal sliding window counts the visible pairs: query i sees min(i, window_left) + 1 keys.
TEST(BenchForwardFlops, SlidingWindowCountsTheVisiblePairs) {
  const CliOptions options = parsed({"--hdim", "64", "--heads", "2", "--batch", "3", "--seqlen-q", "300",
                                     "--causal", "--window-left", "127"});
  ASSERT_EQ(options.shapes.size(), 1u);
  EXPECT_EQ(options.shapes[0].window_left, 127);
  double pairs = 0.0;
  for (int i = 0; i < 300; ++i) pairs += std::min(i, 127) + 1;
  EXPECT_DOUBLE_EQ(forward_flops(options.shapes[0]), 4.0 * 3 * 2 * 64 * pairs);
  EXPECT_FALSE(parse_error({"--window-left", "0"}).empty());
}

TEST(BenchCli, CacheSeqlenRefusals) {
  EXPECT_NE(parse_error({"--seqlen-k", "1000", "--cache-seqlen", "999"}).find("at least seqlen_k"), std::string::npos);
  EXPECT_NE(parse_error({"--seqlen-k", "1000", "--cache-seqlen", "2000", "--varlen"}).find("--varlen"),
            std::string::npos);
  EXPECT_NE(parse_error({"--seqlen-k", "1000", "--cache-seqlen", "2000", "--page-size", "256"}).find("must divide"),
            std::string::npos);
  EXPECT_NE(parse_error({"--seqlen-k", "1024", "--cache-seqlen", "2048", "--backward"}).find("--cache-seqlen"),
            std::string::npos);
  EXPECT_NE(parse_error({"--cache-seqlen", "0"}).find("positive integer"), std::string::npos);
}

TEST(BenchCli, ListAndQueueAhead) {
  const CliOptions options = parsed({"--grid", "quick", "--list", "--queue-ahead"});
  EXPECT_TRUE(options.list_only);
  EXPECT_TRUE(options.queue_ahead);
  EXPECT_NE(parse_error({"--list=1"}).find("takes no value"), std::string::npos);
  EXPECT_NE(parse_error({"--queue-ahead=yes"}).find("takes no value"), std::string::npos);
}

TEST(BenchCli, KvLoadFlagsSetTheKernelOption) {
  const CliOptions tma = parsed({"--seqlen-q", "1", "--kv-tma"}), copies = parsed({"--seqlen-q", "1", "--kv-copies"});
  ASSERT_EQ(tma.shapes.size(), 1u);
  ASSERT_EQ(copies.shapes.size(), 1u);
  EXPECT_EQ(tma.shapes[0].options.kv_loads, KernelOptions::KvLoads::kTma);
  EXPECT_EQ(tma.shapes[0].variant, "kv-tma");
  EXPECT_EQ(copies.shapes[0].options.kv_loads, KernelOptions::KvLoads::kCopyThreads);
  EXPECT_EQ(copies.shapes[0].variant, "kv-copies");
  EXPECT_NE(parse_error({"--backward", "--kv-copies"}).find("--kv-*"), std::string::npos);
}

// --kv-heads-major stores dense k and v as PyTorch's SDPA takes them, (batch, heads_kv, keys, d); it lays
// out dense tensors only.
TEST(BenchCli, KvHeadsMajorLaysOutDenseKv) {
  const CliOptions options = parsed({"--seqlen-q", "1", "--seqlen-k", "4096", "--kv-heads-major"});
  ASSERT_EQ(options.shapes.size(), 1u);
  EXPECT_TRUE(options.shapes[0].kv_heads_major);
  EXPECT_EQ(options.shapes[0].variant, "kv_heads_major");
  EXPECT_FALSE(parsed({"--seqlen-q", "1"}).shapes[0].kv_heads_major);
  for (const std::vector<std::string>& clash : std::vector<std::vector<std::string>>{
           {"--kv-heads-major", "--varlen"}, {"--kv-heads-major", "--page-size", "256", "--seqlen-k", "1024"},
           {"--kv-heads-major", "--dtype", "fp8", "--v-keys-contiguous"}}) {
    EXPECT_NE(parse_error(clash).find("--kv-heads-major lays out dense k and v"), std::string::npos) << clash[1];
  }
}

// --pages-in-order hands out a paged cache's pages in storage order; without it they are a shuffled
// permutation of the batch's pages. It orders pages, so it needs --page-size.
TEST(BenchCli, PagesInOrderNeedsPagesAndNamesItsRow) {
  const CliOptions options = parsed({"--seqlen-q", "1", "--seqlen-k", "4096", "--page-size", "16", "--pages-in-order"});
  ASSERT_EQ(options.shapes.size(), 1u);
  EXPECT_TRUE(options.shapes[0].pages_in_order);
  EXPECT_EQ(options.shapes[0].variant, "paged_16_in_order");
  EXPECT_FALSE(parsed({"--seqlen-k", "4096", "--page-size", "16"}).shapes[0].pages_in_order);
  EXPECT_NE(parse_error({"--pages-in-order"}).find("it needs --page-size"), std::string::npos);
}

TEST(BenchPageTable, InOrderOrAPermutationOfTheBatchsPages) {
  const int batch = 3, pages_per_seq = 37;
  const std::vector<int> in_order = page_table_values(batch, pages_per_seq, true, 7);
  ASSERT_EQ(in_order.size(), static_cast<std::size_t>(batch * pages_per_seq));
  for (std::size_t i = 0; i < in_order.size(); ++i) EXPECT_EQ(in_order[i], static_cast<int>(i));
  std::vector<int> shuffled = page_table_values(batch, pages_per_seq, false, 7);
  EXPECT_NE(shuffled, in_order);
  EXPECT_EQ(shuffled, page_table_values(batch, pages_per_seq, false, 7));  // seeded
  std::sort(shuffled.begin(), shuffled.end());
  EXPECT_EQ(shuffled, in_order);
}

TEST(BenchCli, DeterministicBackwardSingleOrGrid) {
  const CliOptions single = parsed({"--backward", "--deterministic", "--hdim", "64"});
  ASSERT_EQ(single.shapes.size(), 1u);
  EXPECT_TRUE(single.shapes[0].deterministic);
  EXPECT_EQ(single.shapes[0].variant, "backward_deterministic");
  const CliOptions grid = parsed({"--grid", "bwd", "--deterministic"});
  ASSERT_EQ(grid.shapes.size(), 36u);
  for (const Shape& s : grid.shapes) {
    EXPECT_TRUE(s.backward && s.deterministic);
    EXPECT_EQ(s.variant, "backward_deterministic");
  }
  for (const Shape& s : parsed({"--grid", "bwd"}).shapes) EXPECT_FALSE(s.deterministic);
  EXPECT_NE(parse_error({"--deterministic"}).find("backward only"), std::string::npos);
  EXPECT_NE(parse_error({"--grid", "paper", "--deterministic"}).find("backward only"), std::string::npos);
}

TEST(BenchCli, UsageNamesTheDecodeFlags) {
  const std::string usage = usage_text();
  for (const char* flag : {"decode", "--list", "--queue-ahead", "--cache-seqlen", "--padded-seqlen-q", "kv_tbps",
                           "--kv-copies", "--kv-heads-major"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace hopattn::bench
