// FwdArgs per-block fp8 scales (q_block_descale, k_block_descale, v_block_descale) on the reference
// backend: each row is multiplied by its block's scale (on top of the per-head descale), and every
// malformed argument is refused with its name in the message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "common/host_tensor.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn {
namespace {

using test::HostTensor;

struct BlockScaleCase {
  int batch = 2, seqlen_q = 37, seqlen_k = 45, heads_q = 4, heads_kv = 2, d = 16;
  int rows_q = 8, rows_kv = 16;
  HostTensor q, k, v, out, lse, q_head, k_head, v_head, q_block, k_block, v_block;

  explicit BlockScaleCase(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    const std::int64_t blocks_q = (seqlen_q + rows_q - 1) / rows_q, blocks_kv = (seqlen_k + rows_kv - 1) / rows_kv;
    q = HostTensor(Dtype::kFloat8E4M3, {batch, seqlen_q, heads_q, d});
    k = HostTensor(Dtype::kFloat8E4M3, {batch, seqlen_k, heads_kv, d});
    v = HostTensor(Dtype::kFloat8E4M3, {batch, seqlen_k, heads_kv, d});
    q.fill_random(rng(), -8.0, 8.0);
    k.fill_random(rng(), -8.0, 8.0);
    v.fill_random(rng(), -8.0, 8.0);
    out = HostTensor(Dtype::kBFloat16, {batch, seqlen_q, heads_q, d});
    lse = HostTensor(Dtype::kFloat32, {batch, heads_q, seqlen_q});
    out.poison();
    lse.poison();
    for (HostTensor* t : {&q_head, &k_head, &v_head}) {
      *t = HostTensor(Dtype::kFloat32, {batch, heads_kv});
      t->fill_random(rng(), 0.05, 0.3);
    }
    q_block = HostTensor(Dtype::kFloat32, {batch, heads_q, blocks_q});
    k_block = HostTensor(Dtype::kFloat32, {batch, heads_kv, blocks_kv});
    v_block = HostTensor(Dtype::kFloat32, {batch, heads_kv, blocks_kv});
    for (HostTensor* t : {&q_block, &k_block, &v_block}) t->fill_random(rng(), 0.25, 4.0);
  }

  FwdArgs args(bool causal) const {
    FwdArgs a;
    a.q = q.tensor(), a.k = k.tensor(), a.v = v.tensor(), a.out = out.tensor(), a.lse = lse.tensor();
    a.q_descale = q_head.tensor(), a.k_descale = k_head.tensor(), a.v_descale = v_head.tensor();
    a.q_block_descale = q_block.tensor(), a.k_block_descale = k_block.tensor(), a.v_block_descale = v_block.tensor();
    a.descale_block_rows_q = rows_q, a.descale_block_rows_kv = rows_kv;
    a.causal = causal;
    return a;
  }

  // x[b, row, h, c] * head scale(b, h / group) * block scale(b, h, row / rows), as float32.
  HostTensor scaled(const HostTensor& x, const HostTensor& head, const HostTensor& block, int rows,
                    bool indexed_by_q_head) const {
    const auto& shape = x.shape();
    HostTensor f(Dtype::kFloat32, shape);
    const std::int64_t s = shape[1], h = shape[2], blocks = block.shape()[2];
    const int group = heads_q / heads_kv;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t hh = i / d % h, row = i / (d * h) % s, b = i / (d * h * s);
      const std::int64_t kv_head = indexed_by_q_head ? hh / group : hh;
      f.set(i, x.get(i) * head.get(b * heads_kv + kv_head) * block.get((b * h + hh) * blocks + row / rows));
    }
    return f;
  }
};

TEST(Fp8BlockDescale, ReferenceAppliesBlockScalesOnTopOfHeadScales) {
  for (bool causal : {false, true}) {
    const BlockScaleCase c(std::random_device{}());
    ASSERT_TRUE(forward(c.args(causal)).ok());
    // The same attention on float32 inputs that carry the scales in their values.
    const HostTensor qf = c.scaled(c.q, c.q_head, c.q_block, c.rows_q, true);
    const HostTensor kf = c.scaled(c.k, c.k_head, c.k_block, c.rows_kv, false);
    const HostTensor vf = c.scaled(c.v, c.v_head, c.v_block, c.rows_kv, false);
    HostTensor out(Dtype::kFloat32, c.out.shape()), lse(Dtype::kFloat32, c.lse.shape());
    FwdArgs a;
    a.q = qf.tensor(), a.k = kf.tensor(), a.v = vf.tensor(), a.out = out.tensor(), a.lse = lse.tensor();
    a.causal = causal;
    a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    ASSERT_TRUE(forward(a).ok());
    double max_out = 0.0;
    for (std::int64_t i = 0; i < out.numel(); ++i) max_out = std::max(max_out, std::fabs(out.get(i)));
    ASSERT_GT(max_out, 0.0);
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      ASSERT_FALSE(std::isnan(c.out.get(i))) << i;
      // bf16 rounding of the fp8 call's output, plus float32 rounding of the scaled inputs.
      ASSERT_NEAR(c.out.get(i), out.get(i), std::fabs(out.get(i)) * 0x1p-8 + 1e-5 * max_out) << "element " << i;
    }
    for (std::int64_t i = 0; i < lse.numel(); ++i) {
      if (std::isinf(lse.get(i))) {
        ASSERT_EQ(c.lse.get(i), lse.get(i)) << i;
      } else {
        ASSERT_NEAR(c.lse.get(i), lse.get(i), 1e-4 * (1.0 + std::fabs(lse.get(i)))) << "lse " << i;
      }
    }
  }
}

TEST(Fp8BlockDescale, ScalesChangeTheResult) {
  // Guards the test above against scales that are silently ignored on both sides.
  BlockScaleCase c(std::random_device{}());
  ASSERT_TRUE(forward(c.args(false)).ok());
  const std::vector<double> with_blocks = c.out.to_double();
  FwdArgs a = c.args(false);
  a.k_block_descale.reset();
  a.v_block_descale.reset();
  ASSERT_TRUE(forward(a).ok());
  const std::vector<double> without = c.out.to_double();
  double diff = 0.0;
  for (std::size_t i = 0; i < with_blocks.size(); ++i) diff = std::max(diff, std::fabs(with_blocks[i] - without[i]));
  EXPECT_GT(diff, 1e-2);
}

void expect_refused(const FwdArgs& a, const std::string& names) {
  const Status s = forward(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << names << ": " << s.message();
  EXPECT_NE(s.message().find(names), std::string::npos) << s.message();
}

TEST(Fp8BlockDescale, MalformedArgumentsAreRefusedByName) {
  const BlockScaleCase c(std::random_device{}());
  HostTensor wrong_blocks(Dtype::kFloat32, {c.batch, c.heads_q, 4});  // needs ceil(37 / 8) = 5
  HostTensor wrong_heads(Dtype::kFloat32, {c.batch, c.heads_q, 3});   // k blocks use heads_kv
  HostTensor wrong_dtype(Dtype::kFloat16, {c.batch, c.heads_kv, 3});
  FwdArgs a = c.args(false);
  a.q_block_descale = wrong_blocks.tensor();
  expect_refused(a, "q_block_descale");
  a = c.args(false);
  a.k_block_descale = wrong_heads.tensor();
  expect_refused(a, "k_block_descale");
  a = c.args(false);
  a.v_block_descale = wrong_dtype.tensor();
  expect_refused(a, "v_block_descale");
  a = c.args(false);
  a.descale_block_rows_q = 0;
  expect_refused(a, "descale_block_rows_q");
  a = c.args(false);
  a.descale_block_rows_kv = -3;
  expect_refused(a, "descale_block_rows_kv");

  // Block scales with 16-bit inputs.
  HostTensor q(Dtype::kBFloat16, {1, 5, 1, 16}), k(Dtype::kBFloat16, {1, 5, 1, 16}), v(Dtype::kBFloat16, {1, 5, 1, 16});
  HostTensor out(Dtype::kBFloat16, {1, 5, 1, 16}), kb(Dtype::kFloat32, {1, 1, 1});
  q.fill_random(1), k.fill_random(2), v.fill_random(3), kb.fill_random(4, 0.5, 1.0);
  FwdArgs b;
  b.q = q.tensor(), b.k = k.tensor(), b.v = v.tensor(), b.out = out.tensor();
  b.k_block_descale = kb.tensor();
  expect_refused(b, "k_block_descale");
}

}  // namespace
}  // namespace hopattn
