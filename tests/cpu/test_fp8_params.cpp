// The parameters launch_forward_fp8 passes to the FP8 kernel, built on the CPU by the same code
// (sm90/fwd_fp8/params_builder.hpp) from a validated problem: every field the kernel reads is set and
// consistent with the problem (shapes, strides, the tile schedule of scheduler.cuh, descale views), and
// the launch-time check refuses the unset fields that once made the kernel write nothing
// (heads_per_group 0: decode_tile divides by it) and scales the kernel cannot use.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "api/problem.hpp"
#include "common/host_tensor.hpp"
#include "hopattn/hopattn.hpp"
#include "sm90/fwd_fp8/params_builder.hpp"

namespace hopattn::sm90 {
namespace {

using test::HostTensor;

constexpr int kBlockM = 128;  // Fp8FwdTraits<d>::kBlockM for every head dim
constexpr int kBlockN = 64;   // Fp8FwdTraits<256, true>::kBlockN: 128-row kv blocks are 2 K blocks

struct Fp8ParamsCase {
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, d;
  bool causal, with_lse, head_scales, block_scales;
  HostTensor q, k, v, out_buffer, lse, q_head, k_head, v_head, q_block, k_block, v_block;
  Tensor out;  // a strided view: rows padded by 8 columns, so no stride equals its dense value by luck

  explicit Fp8ParamsCase(std::mt19937_64& rng) {
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    batch = pick(1, 3);
    heads_kv = pick(1, 3);
    heads_q = heads_kv * pick(1, 4);
    seqlen_q = pick(0, 2) == 0 ? 1 : pick(1, 700);
    seqlen_k = pick(0, 2) == 0 ? 1 : pick(1, 700);
    d = 64 << pick(0, 2);
    causal = pick(0, 1), with_lse = pick(0, 1), head_scales = pick(0, 1), block_scales = pick(0, 1);
    q = HostTensor(Dtype::kFloat8E4M3, {batch, seqlen_q, heads_q, d});
    k = HostTensor(Dtype::kFloat8E4M3, {batch, seqlen_k, heads_kv, d});
    v = HostTensor(Dtype::kFloat8E4M3, {batch, seqlen_k, heads_kv, d});
    for (HostTensor* t : {&q, &k, &v}) t->fill_random(rng(), -4.0, 4.0);
    out_buffer = HostTensor(Dtype::kBFloat16, {batch, seqlen_q, heads_q, d + 8});
    out = out_buffer.tensor();
    out.shape[3] = d;
    lse = HostTensor(Dtype::kFloat32, {batch, heads_q, seqlen_q});
    for (HostTensor* t : {&q_head, &k_head, &v_head}) {
      *t = HostTensor(Dtype::kFloat32, {batch, heads_kv});
      t->fill_random(rng(), 0.1, 2.0);
    }
    q_block = HostTensor(Dtype::kFloat32, {batch, heads_q, (seqlen_q + 63) / 64});
    k_block = HostTensor(Dtype::kFloat32, {batch, heads_kv, (seqlen_k + 127) / 128});
    v_block = HostTensor(Dtype::kFloat32, {batch, heads_kv, (seqlen_k + 127) / 128});
    for (HostTensor* t : {&q_block, &k_block, &v_block}) t->fill_random(rng(), 0.25, 4.0);
  }

  FwdArgs args() const {
    FwdArgs a;
    a.q = q.tensor(), a.k = k.tensor(), a.v = v.tensor(), a.out = out;
    if (with_lse) a.lse = lse.tensor();
    if (head_scales) a.q_descale = q_head.tensor(), a.k_descale = k_head.tensor(), a.v_descale = v_head.tensor();
    if (block_scales) {
      a.q_block_descale = q_block.tensor(), a.k_block_descale = k_block.tensor(), a.v_block_descale = v_block.tensor();
      a.descale_block_rows_q = 64, a.descale_block_rows_kv = 128;
    }
    a.causal = causal;
    return a;
  }

  std::string describe() const {
    return "b " + std::to_string(batch) + " hq " + std::to_string(heads_q) + " hkv " + std::to_string(heads_kv) +
           " sq " + std::to_string(seqlen_q) + " sk " + std::to_string(seqlen_k) + " d " + std::to_string(d) +
           (causal ? " causal" : "") + (with_lse ? " lse" : "") + (head_scales ? " head-scales" : "") +
           (block_scales ? " block-scales" : "");
  }
};

void expect_view(const DescaleView& view, const HostTensor* t, int rows_per_block, const std::string& name) {
  if (t == nullptr) {
    EXPECT_EQ(view.data, nullptr) << name;
    return;
  }
  const Tensor x = t->tensor();
  EXPECT_EQ(view.data, x.data) << name;
  EXPECT_EQ(view.batch_stride, x.stride[0]) << name;
  EXPECT_EQ(view.head_stride, x.stride[1]) << name;
  EXPECT_EQ(view.block_stride, x.rank > 2 ? x.stride[2] : 0) << name;
  EXPECT_EQ(view.rows_per_block, rows_per_block) << name;
}

TEST(Fp8Params, EveryFieldTheKernelReadsIsSetFromTheProblem) {
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 40; ++i) {
    const Fp8ParamsCase c(rng);
    SCOPED_TRACE(c.describe() + " (seed " + std::to_string(seed) + ")");
    const FwdArgs args = c.args();
    detail::Problem pr;
    const Status st = detail::validate_forward(args, &pr);
    ASSERT_TRUE(st.ok()) << st.message();
    // heads_per_group as launch.cuh's heads_per_group() may give it: a divisor of batch * heads_q.
    const int pairs = c.batch * c.heads_q;
    int group = std::uniform_int_distribution<int>(1, pairs)(rng);
    while (pairs % group != 0) --group;
    const Fp8FwdParams fp = make_fp8_params(args, pr, kBlockM, kBlockN, group);
    const FwdParams& p = fp.base;

    EXPECT_EQ(fp8_params_error(fp, kBlockM), "");
    EXPECT_EQ(p.batch, c.batch);
    EXPECT_EQ(p.heads_q, c.heads_q);
    EXPECT_EQ(p.heads_kv, c.heads_kv);
    EXPECT_EQ(p.seqlen_q, c.seqlen_q);
    EXPECT_EQ(p.seqlen_k, c.seqlen_k);
    EXPECT_EQ(p.head_ratio * c.heads_kv, c.heads_q);
    EXPECT_FLOAT_EQ(p.logit_scale, 1.0f / std::sqrt(static_cast<float>(c.d)));  // no softcap on FP8
    EXPECT_FLOAT_EQ(p.scale_log2, p.logit_scale * 1.4426950408889634f);
    EXPECT_EQ(p.causal, c.causal);
    EXPECT_EQ(p.pingpong, args.options.pingpong);
    EXPECT_EQ(p.intra_wg_overlap, args.options.intra_wg_overlap);
    EXPECT_EQ(p.out, c.out.data);
    EXPECT_EQ(p.out_batch_stride, std::int64_t(c.seqlen_q) * c.heads_q * (c.d + 8));
    EXPECT_EQ(p.out_row_stride, std::int64_t(c.heads_q) * (c.d + 8));
    EXPECT_EQ(p.out_head_stride, c.d + 8);
    if (c.with_lse) {
      EXPECT_EQ(p.lse, c.lse.tensor().data);
      EXPECT_EQ(p.lse_batch_stride, std::int64_t(c.heads_q) * c.seqlen_q);
      EXPECT_EQ(p.lse_head_stride, c.seqlen_q);
      EXPECT_EQ(p.lse_row_stride, 1);
    } else {
      EXPECT_EQ(p.lse, nullptr);
    }
    // The schedule: every (batch, head, 128-row block) is one tile; the hand-out's group size is the
    // launcher's; the counter is set only by a persistent launch, after this.
    const int m_blocks = (c.seqlen_q + kBlockM - 1) / kBlockM;
    EXPECT_EQ(p.num_m_blocks, m_blocks);
    EXPECT_EQ(p.num_tiles, m_blocks * pairs);
    EXPECT_EQ(p.heads_per_group, group);
    EXPECT_EQ(p.tile_counter, nullptr);

    expect_view(fp.q_descale, c.head_scales ? &c.q_head : nullptr, 0, "q_descale");
    expect_view(fp.k_descale, c.head_scales ? &c.k_head : nullptr, 0, "k_descale");
    expect_view(fp.v_descale, c.head_scales ? &c.v_head : nullptr, 0, "v_descale");
    expect_view(fp.q_block_descale, c.block_scales ? &c.q_block : nullptr, 64, "q_block_descale");
    expect_view(fp.k_block_descale, c.block_scales ? &c.k_block : nullptr, 128, "k_block_descale");
    expect_view(fp.v_block_descale, c.block_scales ? &c.v_block : nullptr, 128, "v_block_descale");
    EXPECT_EQ(fp.kv_groups_per_descale.divisor, c.block_scales ? 128u / kBlockN : 1u);
  }
}

// The launch-time check names the field when one the schedule divides by or counts with is wrong.
TEST(Fp8Params, LaunchCheckRefusesUnsetScheduleFields) {
  std::mt19937_64 rng(std::random_device{}());
  const Fp8ParamsCase c(rng);
  SCOPED_TRACE(c.describe());
  const FwdArgs args = c.args();
  detail::Problem pr;
  ASSERT_TRUE(detail::validate_forward(args, &pr).ok());
  const int pairs = c.batch * c.heads_q;
  Fp8FwdParams fp = make_fp8_params(args, pr, kBlockM, kBlockN, pairs);
  ASSERT_EQ(fp8_params_error(fp, kBlockM), "");
  // heads_per_group 0 is what the FP8 launcher left before it shared the 16-bit hand-out.
  for (int group : {0, -1, pairs + 1, 2 * pairs}) {
    Fp8FwdParams bad = fp;
    bad.base.heads_per_group = group;
    const std::string why = fp8_params_error(bad, kBlockM);
    EXPECT_NE(why.find("heads_per_group"), std::string::npos) << group << ": " << why;
  }
  Fp8FwdParams stale = fp;  // a group size whose decode divisors were not rebuilt
  stale.base.group_tiles_divisor = FastDivisor(stale.base.group_tiles_divisor.divisor + 1);
  EXPECT_NE(fp8_params_error(stale, kBlockM).find("divisor"), std::string::npos);
  fp.base.num_tiles += 1;
  EXPECT_NE(fp8_params_error(fp, kBlockM).find("num_tiles"), std::string::npos);
  fp = make_fp8_params(args, pr, kBlockM, kBlockN, pairs);
  fp.base.num_m_blocks = 0;
  EXPECT_NE(fp8_params_error(fp, kBlockM).find("num_m_blocks"), std::string::npos);
  // A per-block view the kernel divides by must have rows_per_block >= 1.
  FwdArgs blocked = args;
  blocked.q_block_descale = c.q_block.tensor(), blocked.k_block_descale = c.k_block.tensor();
  blocked.v_block_descale = c.v_block.tensor();
  fp = make_fp8_params(blocked, pr, kBlockM, kBlockN, pairs);
  fp.k_block_descale.rows_per_block = 0;
  EXPECT_NE(fp8_params_error(fp, kBlockM).find("rows_per_block"), std::string::npos);
}

// ... and a scale the kernels read that is not finite, or a scale_log2 that is not positive (the
// running max of raw scores orders logits only for a positive scale).
TEST(Fp8Params, LaunchCheckRefusesBadScales) {
  std::mt19937_64 rng(std::random_device{}());
  const Fp8ParamsCase c(rng);
  SCOPED_TRACE(c.describe());
  detail::Problem pr;
  ASSERT_TRUE(detail::validate_forward(c.args(), &pr).ok());
  const Fp8FwdParams fp = make_fp8_params(c.args(), pr, kBlockM, kBlockN, 1);
  ASSERT_EQ(fp8_params_error(fp, kBlockM), "");
  for (float FwdParams::*field : {&FwdParams::logit_scale, &FwdParams::softcap_input_scale, &FwdParams::scale_log2}) {
    for (float value : {INFINITY, -INFINITY, NAN}) {
      Fp8FwdParams bad = fp;
      bad.base.*field = value;
      EXPECT_NE(fp8_params_error(bad, kBlockM).find("scale"), std::string::npos) << value;
    }
  }
  for (float value : {0.0f, -0.5f}) {
    Fp8FwdParams bad = fp;
    bad.base.scale_log2 = value;
    EXPECT_NE(fp8_params_error(bad, kBlockM).find("scale_log2"), std::string::npos) << value;
  }
}

}  // namespace
}  // namespace hopattn::sm90
