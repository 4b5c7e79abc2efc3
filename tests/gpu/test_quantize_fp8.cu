// quantize_fp8 on CUDA tensors gives the same e4m3 codes and scales, bit for bit, as on host tensors,
// for every granularity, with and without incoherent processing, on odd and strided shapes, and with
// v8 written keys contiguous (V^T in memory).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "cpu/test_fp8_util.hpp"
#include "gpu/gpu_test_util.cuh"

namespace {

using fp8_test::QuantCase;
using hopattn::Dtype;
using hopattn::QuantGranularity;
using hopattn::test::DeviceBuffer;

class QuantizeFp8Gpu : public hopattn::test::HopperTest {};

struct Config {
  fp8_test::QuantShape shape;
  QuantGranularity granularity;
  bool hadamard;
  int block_q, block_kv, pad;
};

const Config kConfigs[] = {
    {{1, 1, 1, 1, 1, 64}, QuantGranularity::kPerBlock, true, 128, 128, 0},
    {{2, 130, 67, 4, 2, 64}, QuantGranularity::kPerBlock, true, 64, 32, 0},
    {{1, 333, 200, 3, 1, 128}, QuantGranularity::kPerBlock, true, 128, 128, 8},
    {{2, 17, 9, 2, 2, 256}, QuantGranularity::kPerHead, true, 128, 128, 0},
    {{2, 300, 500, 2, 2, 128}, QuantGranularity::kPerTensor, true, 128, 128, 3},
    {{3, 7, 5, 5, 5, 40}, QuantGranularity::kPerBlock, false, 1, 2, 0},
    {{1, 9, 4, 1, 1, 1}, QuantGranularity::kPerHead, false, 128, 128, 2},
    {{2, 129, 31, 2, 1, 3}, QuantGranularity::kPerTensor, false, 128, 16, 0},
    {{1, 1000, 1000, 8, 8, 128}, QuantGranularity::kPerBlock, true, 128, 128, 0},
    {{1, 40, 40, 2, 2, 300}, QuantGranularity::kPerBlock, false, 1000, 1000, 0},
    // d 64 / 128 / 256 move a lane's elements and codes as vectors where every row is 16-byte aligned
    // (pad 0 or 16), with or without the transform, and go element by element otherwise (pad 3).
    {{2, 130, 67, 4, 2, 128}, QuantGranularity::kPerBlock, false, 64, 32, 0},
    {{1, 77, 200, 2, 1, 256}, QuantGranularity::kPerHead, false, 128, 128, 16},
    {{2, 33, 65, 3, 3, 64}, QuantGranularity::kPerTensor, false, 128, 16, 3},
    {{1, 70, 90, 2, 2, 64}, QuantGranularity::kPerBlock, true, 32, 64, 16},
    // Blocks longer than one staged chunk (64 KB of rows) reduce amax per block over several CTAs;
    // a block of exactly 64 KB (256 rows at d 128) is one chunk.
    {{1, 700, 650, 2, 2, 256}, QuantGranularity::kPerBlock, true, 300, 192, 0},
    {{2, 1100, 1300, 2, 1, 64}, QuantGranularity::kPerBlock, false, 600, 1000, 16},
    {{1, 300, 520, 2, 2, 128}, QuantGranularity::kPerBlock, true, 256, 192, 3},
    // Transformed blocks of up to 128 rows are held in registers between amax and codes (16 warps at d 256).
    {{2, 200, 130, 2, 1, 256}, QuantGranularity::kPerBlock, true, 128, 64, 0},
    // v of its own head dim: q/k in the generic kernel with v in the staged one (DeepSeek's 192 / 128),
    // and transformed q/k 128 with v 64 (two launches of the staged kernel).
    {{2, 300, 257, 4, 2, 192, 128}, QuantGranularity::kPerBlock, false, 64, 128, 0},
    {{1, 130, 200, 2, 1, 128, 64}, QuantGranularity::kPerBlock, true, 128, 128, 16},
    // The generic kernel's block-diagonal transform (blocks of 32 at d 96, 64 at d 192, 16 at d 48, the
    // whole row at d 32), fused and in two passes.
    {{2, 300, 257, 4, 2, 96}, QuantGranularity::kPerBlock, true, 64, 128, 0},
    {{1, 200, 333, 2, 2, 192, 128}, QuantGranularity::kPerHead, true, 128, 128, 3},
    {{3, 70, 50, 2, 1, 48}, QuantGranularity::kPerBlock, true, 32, 16, 16},
    {{1, 100, 100, 1, 1, 32}, QuantGranularity::kPerTensor, true, 128, 128, 0},
};

// Runs the case on the host, then the same inputs on the device with poisoned outputs, and compares.
// keys_contiguous_v8: both write v8 as V^T, its keys padded to a multiple of 16 plus 16 (the TMA rule
// for CUDA tensors), and the padding must stay poisoned on both. edit_inputs: changes the random
// inputs before either side runs.
void expect_device_matches_host(const Config& cfg, Dtype dtype, std::mt19937_64& rng, cudaStream_t stream,
                                bool keys_contiguous_v8 = false,
                                const std::function<void(QuantCase&)>& edit_inputs = nullptr) {
  QuantCase host = fp8_test::make_case(cfg.shape, dtype, cfg.granularity, cfg.hadamard, rng, cfg.block_q,
                                       cfg.block_kv, cfg.pad);
  if (keys_contiguous_v8) fp8_test::store_v8_keys_contiguous(host, (cfg.shape.seqlen_k + 15) / 16 * 16 + 16);
  if (edit_inputs) edit_inputs(host);
  QuantCase device = host;  // same inputs, strides and poisoned outputs; pointers replaced below
  hopattn::QuantizeArgs& args = device.args;
  std::vector<DeviceBuffer> buffers;
  for (int t = 0; t < 3; ++t) {
    const std::size_t bytes[3] = {host.in[t].size() * sizeof(std::uint16_t), host.codes[t].size(),
                                  host.scales[t].size() * sizeof(float)};
    const void* sources[3] = {host.in[t].data(), host.codes[t].data(), host.scales[t].data()};
    hopattn::Tensor* views[3] = {&device.input(t), &device.output(t), &device.descale(t)};
    for (int i = 0; i < 3; ++i) {
      buffers.emplace_back(bytes[i]);
      HOPATTN_CUDA_CHECK(cudaMemcpy(buffers.back().data(), sources[i], bytes[i], cudaMemcpyHostToDevice));
      views[i]->data = buffers.back().data();
      views[i]->device = hopattn::DeviceType::kCuda;
    }
  }
  args.stream = stream;
  hopattn::Status status = hopattn::quantize_fp8(args);
  ASSERT_TRUE(status.ok()) << status.message();
  status = hopattn::quantize_fp8(host.args);
  ASSERT_TRUE(status.ok()) << status.message();
  HOPATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int t = 0; t < 3; ++t) {
    SCOPED_TRACE("tensor " + std::to_string(t));
    const std::vector<std::uint8_t> codes = buffers[3 * t + 1].to_host<std::uint8_t>();
    const std::vector<float> scales = buffers[3 * t + 2].to_host<float>();
    ASSERT_EQ(codes.size(), host.codes[t].size());
    for (std::size_t i = 0; i < codes.size(); ++i) {
      ASSERT_EQ(codes[i], host.codes[t][i]) << "element " << i;  // row padding included: poison on both
    }
    ASSERT_EQ(scales.size(), host.scales[t].size());
    for (std::size_t i = 0; i < scales.size(); ++i) {
      ASSERT_EQ(std::memcmp(&scales[i], &host.scales[t][i], sizeof(float)), 0)
          << "scale " << i << ": device " << scales[i] << " host " << host.scales[t][i];
    }
  }
}

// Every config in both dtypes.
void expect_all_configs_match(bool keys_contiguous_v8) {
  std::mt19937_64 rng{std::random_device{}()};
  cudaStream_t stream;
  HOPATTN_CUDA_CHECK(cudaStreamCreate(&stream));
  for (Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat16}) {
    for (const Config& cfg : kConfigs) {
      SCOPED_TRACE(std::string(hopattn::dtype_name(dtype)) + " " + hopattn::granularity_name(cfg.granularity) +
                   (cfg.hadamard ? " hadamard" : "") + " d " + std::to_string(cfg.shape.d) + " dv " + std::to_string(cfg.shape.d_v) + " sq " +
                   std::to_string(cfg.shape.seqlen_q) + " sk " + std::to_string(cfg.shape.seqlen_k));
      expect_device_matches_host(cfg, dtype, rng, stream, keys_contiguous_v8);
      if (::testing::Test::HasFatalFailure()) break;
    }
  }
  HOPATTN_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_F(QuantizeFp8Gpu, CodesAndScalesMatchTheHostBitForBit) { expect_all_configs_match(false); }

// The GPU writes keys-contiguous v8 through shared memory (quantize.cu); the host writes it element by
// element, and its codes equal the ordinary layout's (tests/cpu/test_fp8_v_keys_contiguous.cpp).
TEST_F(QuantizeFp8Gpu, KeysContiguousV8MatchesTheHostBitForBit) { expect_all_configs_match(true); }

TEST_F(QuantizeFp8Gpu, AmaxReducedAcrossManyTilesMatchesTheHost) {
  // kPerTensor / kPerHead reduce amax over hundreds of CTAs with atomicMax in whatever order they finish;
  // the scales and codes must still equal the host's.
  std::mt19937_64 rng{std::random_device{}()};
  for (QuantGranularity g : {QuantGranularity::kPerTensor, QuantGranularity::kPerHead}) {
    expect_device_matches_host({{4, 2048, 2048, 4, 4, 128}, g, true, 128, 128, 0}, Dtype::kBFloat16, rng, nullptr);
  }
}

TEST_F(QuantizeFp8Gpu, SubnormalAndNaNInputsGiveTheHostsScales) {
  // Without the transform the device takes amax over the 16-bit inputs as they are (their magnitude bits
  // and a 16-bit max): subnormals must count at their value and NaN must be ignored, as the host's
  // float fmax does. q: one 128-row block of only subnormals; k: NaNs sprinkled over random rows; v: both.
  std::mt19937_64 rng{std::random_device{}()};
  for (Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat16}) {
    SCOPED_TRACE(hopattn::dtype_name(dtype));
    const std::uint16_t nan = dtype == Dtype::kBFloat16 ? 0x7fc0 : 0x7e00;
    const auto edit = [&](QuantCase& c) {
      std::uniform_int_distribution<int> mantissa(1, dtype == Dtype::kBFloat16 ? 0x7f : 0x3ff);
      std::uniform_int_distribution<int> sign(0, 1);
      const std::size_t block = 128 * 2 * 128;  // rows 0-127 of batch 0 (rows of 2 heads x d 128)
      for (std::size_t i = 0; i < block; ++i) {
        const auto subnormal = static_cast<std::uint16_t>(mantissa(rng) | sign(rng) << 15);
        c.in[0][i] = subnormal;
        c.in[2][i] = subnormal;
      }
      for (std::size_t i = 37; i < c.in[1].size(); i += 997) c.in[1][i] = c.in[2][i] = nan;
    };
    expect_device_matches_host({{1, 300, 300, 2, 2, 128}, QuantGranularity::kPerBlock, false, 128, 128, 0}, dtype, rng,
                               nullptr, false, edit);
  }
}

TEST_F(QuantizeFp8Gpu, AllZeroBlocksGiveTheHostsScales) {
  // An all-zero scale group: 1 for q and k, 2^-40 for a v block (quantize.hpp), on both sides, through
  // the fused kernels (transformed and held at d 128, plain at d 64), a block spread over several
  // chunks (320 rows at d 256), and per head. Block 1 of head 0 of batch 0 is zeroed in each tensor.
  std::mt19937_64 rng{std::random_device{}()};
  const Config configs[] = {
      {{2, 300, 260, 2, 2, 128}, QuantGranularity::kPerBlock, true, 128, 128, 0},
      {{1, 200, 190, 3, 1, 64}, QuantGranularity::kPerBlock, false, 64, 64, 0},
      {{1, 700, 650, 2, 2, 256}, QuantGranularity::kPerBlock, false, 320, 320, 0},
      {{2, 40, 50, 2, 2, 128}, QuantGranularity::kPerHead, true, 128, 128, 0},
  };
  for (const Config& cfg : configs) {
    SCOPED_TRACE(std::string(hopattn::granularity_name(cfg.granularity)) + " d " + std::to_string(cfg.shape.d));
    const bool per_block = cfg.granularity == QuantGranularity::kPerBlock;
    const auto edit = [&](QuantCase& c) {
      for (int t = 0; t < 3; ++t) {
        const int rows = t == 0 ? cfg.block_q : cfg.block_kv;
        const int first = per_block ? rows : 0, last = per_block ? 2 * rows : c.seqlen(t);
        for (int s = first; s < std::min(last, c.seqlen(t)); ++s) {
          for (int j = 0; j < c.dim(t); ++j) c.in[t][c.offset(t, 0, s, 0, j)] = 0;
        }
      }
    };
    expect_device_matches_host(cfg, Dtype::kBFloat16, rng, nullptr, false, edit);
    if (::testing::Test::HasFatalFailure()) break;
  }
}

}  // namespace
