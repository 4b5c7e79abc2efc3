// FP8 v given with its keys contiguous (V^T in memory) on host tensors: forward and quantize_fp8 give
// the bits they give for the same values in the ordinary layout, and write nothing into the padding.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "common/host_tensor.hpp"
#include "cpu/test_fp8_util.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/quantize.hpp"

namespace hopattn {
namespace {

using test::HostTensor;

std::mt19937_64& rng() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine;
}

// A (batch, heads_kv, d, padded_keys) buffer holding x's values, and the (batch, seqlen_k, heads_kv, d)
// view of it with stride[1] == 1. The padding keys are NaN, so reading one would show in the output.
struct KeysContiguous {
  HostTensor storage;
  Tensor view;
  KeysContiguous(const HostTensor& x, std::int64_t padded_keys) {
    const auto& s = x.shape();  // (batch, seqlen_k, heads_kv, d)
    storage = HostTensor(x.dtype(), {s[0], s[2], s[3], padded_keys});
    storage.poison();
    view = storage.view({s[0], s[1], s[2], s[3]}, {s[2] * s[3] * padded_keys, 1, s[3] * padded_keys, padded_keys});
    test::write_tensor(view, x.to_double());
  }
};

struct ForwardConfig {
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, d;
  std::int64_t padded_keys;
  bool causal;
  int window_left, window_right;
  float softcap;
  bool head_descales, block_descales;
};

struct Output {
  HostTensor out, lse;
};

Output run_forward(FwdArgs args, const ForwardConfig& c) {
  Output o{HostTensor(Dtype::kBFloat16, {c.batch, c.seqlen_q, c.heads_q, c.d}),
           HostTensor(Dtype::kFloat32, {c.batch, c.heads_q, c.seqlen_q})};
  o.out.poison();
  o.lse.poison();
  args.out = o.out.tensor();
  args.lse = o.lse.tensor();
  const Status status = forward(args);
  EXPECT_TRUE(status.ok()) << status.message();
  return o;
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.numel() * dtype_size(a.dtype())) == 0;
}

TEST(Fp8VKeysContiguous, HostForwardGivesTheBitsOfTheOrdinaryLayout) {
  const ForwardConfig configs[] = {
      {2, 33, 77, 4, 2, 40, 80, false, -1, -1, 0.0f, true, false},
      {1, 77, 77, 3, 1, 64, 96, true, -1, -1, 30.0f, false, true},
      {3, 5, 1, 2, 2, 16, 16, false, -1, -1, 0.0f, true, true},  // one key: stride[1] is moot
      {2, 20, 77, 2, 1, 8, 128, false, 10, 3, 0.0f, false, false},
  };
  for (const ForwardConfig& c : configs) {
    SCOPED_TRACE("sk " + std::to_string(c.seqlen_k) + " d " + std::to_string(c.d) + " padded " +
                 std::to_string(c.padded_keys));
    HostTensor q(Dtype::kFloat8E4M3, {c.batch, c.seqlen_q, c.heads_q, c.d});
    HostTensor k(Dtype::kFloat8E4M3, {c.batch, c.seqlen_k, c.heads_kv, c.d});
    HostTensor v(Dtype::kFloat8E4M3, {c.batch, c.seqlen_k, c.heads_kv, c.d});
    for (HostTensor* x : {&q, &k, &v}) x->fill_random(rng()(), -8.0, 8.0);
    const KeysContiguous v_t(v, c.padded_keys);
    const int rows_q = 16, rows_kv = 32;
    HostTensor head_descale(Dtype::kFloat32, {c.batch, c.heads_kv});
    HostTensor q_block(Dtype::kFloat32, {c.batch, c.heads_q, (c.seqlen_q + rows_q - 1) / rows_q});
    HostTensor kv_block(Dtype::kFloat32, {c.batch, c.heads_kv, (c.seqlen_k + rows_kv - 1) / rows_kv});
    for (HostTensor* x : {&head_descale, &q_block, &kv_block}) x->fill_random(rng()(), 0.1, 2.0);

    FwdArgs args;
    args.q = q.tensor();
    args.k = k.tensor();
    args.v = v.tensor();
    args.causal = c.causal;
    args.window_left = c.window_left;
    args.window_right = c.window_right;
    args.softcap = c.softcap;
    if (c.head_descales) args.q_descale = args.k_descale = args.v_descale = head_descale.tensor();
    if (c.block_descales) {
      args.q_block_descale = q_block.tensor();
      args.k_block_descale = args.v_block_descale = kv_block.tensor();
      args.descale_block_rows_q = rows_q;
      args.descale_block_rows_kv = rows_kv;
    }
    const Output ordinary = run_forward(args, c);
    args.v = v_t.view;
    const Output keys = run_forward(args, c);
    EXPECT_TRUE(same_bits(ordinary.out, keys.out)) << "out differs";
    EXPECT_TRUE(same_bits(ordinary.lse, keys.lse)) << "lse differs";
  }
}

TEST(Fp8VKeysContiguous, HostQuantizeWritesTheCodesOfTheOrdinaryLayout) {
  using fp8_test::QuantCase;
  const std::int64_t padded_keys = 80;  // seqlen_k 77
  for (QuantGranularity g : {QuantGranularity::kPerTensor, QuantGranularity::kPerHead, QuantGranularity::kPerBlock}) {
    SCOPED_TRACE(granularity_name(g));
    QuantCase ordinary = fp8_test::make_case({2, 37, 77, 4, 2, 64}, Dtype::kBFloat16, g, true, rng(), 16, 32);
    QuantCase keys = fp8_test::make_case({2, 37, 77, 4, 2, 64}, Dtype::kBFloat16, g, true, rng(), 16, 32);
    keys.args.seed = ordinary.args.seed;
    for (int t = 0; t < 3; ++t) std::copy(ordinary.in[t].begin(), ordinary.in[t].end(), keys.in[t].begin());
    fp8_test::store_v8_keys_contiguous(keys, padded_keys);
    Status status = quantize_fp8(ordinary.args);
    ASSERT_TRUE(status.ok()) << status.message();
    status = quantize_fp8(keys.args);
    ASSERT_TRUE(status.ok()) << status.message();
    for (int t = 0; t < 3; ++t) {
      ASSERT_EQ(std::memcmp(ordinary.scales[t].data(), keys.scales[t].data(), ordinary.scales[t].size() * 4), 0)
          << "scales of tensor " << t;
    }
    for (int t = 0; t < 2; ++t) EXPECT_EQ(ordinary.codes[t], keys.codes[t]) << "codes of tensor " << t;
    for (int b = 0; b < 2; ++b) {
      for (int s = 0; s < 77; ++s) {
        for (int h = 0; h < 2; ++h) {
          for (int j = 0; j < 64; ++j) {
            ASSERT_EQ(ordinary.codes[2][ordinary.code_offset(2, b, s, h, j)], keys.codes[2][keys.code_offset(2, b, s, h, j)])
                << "v8 (" << b << ", " << s << ", " << h << ", " << j << ")";
          }
        }
      }
    }
    for (std::size_t i = 0; i < keys.codes[2].size(); ++i) {
      if (static_cast<std::int64_t>(i) % padded_keys >= 77)
        ASSERT_EQ(keys.codes[2][i], fp8_test::kPoisonCode) << "wrote padding byte " << i;
    }
  }
}

}  // namespace
}  // namespace hopattn
