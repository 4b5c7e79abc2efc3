// The parameters launch_backward passes to the variable-length backward kernels
// (sm90/bwd/params_builder.hpp), built on the CPU from a validated problem: a packed side (q, out, dout
// and dq; or k, v, dk and dv) is addressed by row (batch strides 0, row and head strides from its rank-3
// view), the packed LSE (heads_q, total_q) likewise, the cu_seqlens / seqused_k / seqused_q arrays reach
// the kernels, the grids count the longest sequence's blocks, and the workspace holds every sequence's q
// blocks (workspace_blocks.hpp). A dense call keeps its strides and passes no arrays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "api/problem.hpp"
#include "common/host_tensor.hpp"
#include "cpu/sequence_arrays.hpp"
#include "hopattn/hopattn.hpp"
#include "sm90/bwd/params_builder.hpp"

namespace hopattn::sm90 {
namespace {

using test::HostTensor;
using test::int_array;
using test::prefix_sums;

constexpr int kBlockM = 64;

// Padded views: a (rows, heads, d) or (batch, rows, heads, d) tensor whose heads are d + 8 apart, so no
// stride is dense by luck.
Tensor padded_view(HostTensor& buffer, int d) {
  Tensor t = buffer.tensor();
  t.shape[t.rank - 1] = d;
  return t;
}

TEST(BwdVarlenParams, PackedSidesAreAddressedByRowAndTheArraysReachTheKernels) {
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 20; ++trial) {
    const int batch = pick(1, 5), heads_kv = pick(1, 3), heads_q = heads_kv * pick(1, 4), d = 64 << pick(0, 1);
    const bool varlen_q = pick(0, 1), varlen_k = !varlen_q || pick(0, 1), with_seqused = pick(0, 1);
    const bool with_seqused_q = pick(0, 1);
    const int dense_q = pick(1, 300), dense_k = pick(1, 300);
    std::vector<int> len_q, len_k;
    for (int b = 0; b < batch; ++b)
      len_q.push_back(varlen_q ? pick(0, 300) : dense_q), len_k.push_back(varlen_k ? pick(0, 300) : dense_k);
    // At least one row on each side, as CUDA tensors have.
    if (prefix_sums(len_q).back() == 0) len_q[0] = 1;
    if (prefix_sums(len_k).back() == 0) len_k[0] = 1;
    const std::vector<int> cu_q = prefix_sums(len_q), cu_k = prefix_sums(len_k);
    const int total_q = cu_q.back(), total_k = cu_k.back();
    const int max_q = *std::max_element(len_q.begin(), len_q.end());
    const int max_k = *std::max_element(len_k.begin(), len_k.end());

    const auto q_side = [&] {
      return varlen_q ? HostTensor(Dtype::kBFloat16, {total_q, heads_q, d + 8})
                      : HostTensor(Dtype::kBFloat16, {batch, dense_q, heads_q, d + 8});
    };
    const auto k_side = [&] {
      return varlen_k ? HostTensor(Dtype::kBFloat16, {total_k, heads_kv, d + 8})
                      : HostTensor(Dtype::kBFloat16, {batch, dense_k, heads_kv, d + 8});
    };
    HostTensor q = q_side(), out = q_side(), dout = q_side(), dq = q_side();
    HostTensor k = k_side(), v = k_side(), dk = k_side(), dv = k_side();
    // The LSE with 3 spare entries after each row: (heads_q, total_q + 3) or (batch, heads_q, dense_q + 3).
    HostTensor lse = varlen_q ? HostTensor(Dtype::kFloat32, {heads_q, total_q + 3})
                              : HostTensor(Dtype::kFloat32, {batch, heads_q, dense_q + 3});
    HostTensor cu_q_t = int_array(cu_q), cu_k_t = int_array(cu_k);
    std::vector<int> used;
    for (int n : len_k) used.push_back(pick(0, n));
    HostTensor used_t = int_array(used);
    std::vector<int> used_q;
    for (int n : len_q) used_q.push_back(pick(0, n));
    HostTensor used_q_t = int_array(used_q);

    BwdArgs a;
    a.q = padded_view(q, d), a.k = padded_view(k, d), a.v = padded_view(v, d);
    a.out = padded_view(out, d), a.dout = padded_view(dout, d), a.dq = padded_view(dq, d);
    a.dk = padded_view(dk, d), a.dv = padded_view(dv, d);
    a.lse = lse.tensor();
    a.lse.shape[a.lse.rank - 1] -= 3;
    if (varlen_q) a.cu_seqlens_q = cu_q_t.tensor(), a.max_seqlen_q = max_q;
    if (varlen_k) a.cu_seqlens_k = cu_k_t.tensor(), a.max_seqlen_k = max_k;
    if (with_seqused) a.seqused_k = used_t.tensor();
    if (with_seqused_q) a.seqused_q = used_q_t.tensor();
    a.causal = pick(0, 1);

    const std::string where = "seed " + std::to_string(seed) + " trial " + std::to_string(trial);
    detail::Problem pr;
    const Status st = detail::validate_backward(a, &pr);
    ASSERT_TRUE(st.ok()) << where << ": " << st.message();
    const BwdParams p = make_bwd_params<kBlockM>(a, pr);

    EXPECT_EQ(p.cu_seqlens_q, varlen_q ? static_cast<const int*>(cu_q_t.data()) : nullptr) << where;
    EXPECT_EQ(p.cu_seqlens_k, varlen_k ? static_cast<const int*>(cu_k_t.data()) : nullptr) << where;
    EXPECT_EQ(p.seqused_k, with_seqused ? static_cast<const int*>(used_t.data()) : nullptr) << where;
    EXPECT_EQ(p.seqused_q, with_seqused_q ? static_cast<const int*>(used_q_t.data()) : nullptr) << where;
    EXPECT_EQ(p.seqlen_q, varlen_q ? max_q : dense_q) << where;
    EXPECT_EQ(p.seqlen_k, varlen_k ? max_k : dense_k) << where;

    const std::int64_t q_row = std::int64_t(heads_q) * (d + 8), k_row = std::int64_t(heads_kv) * (d + 8);
    for (const auto& [name, batch_stride, row_stride, head_stride] :
         {std::tuple{"out", p.out_batch_stride, p.out_row_stride, p.out_head_stride},
          std::tuple{"dout", p.dout_batch_stride, p.dout_row_stride, p.dout_head_stride},
          std::tuple{"dq", p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride}}) {
      EXPECT_EQ(batch_stride, varlen_q ? 0 : dense_q * q_row) << where << " " << name;
      EXPECT_EQ(row_stride, q_row) << where << " " << name;
      EXPECT_EQ(head_stride, d + 8) << where << " " << name;
    }
    for (const auto& [name, batch_stride, row_stride, head_stride] :
         {std::tuple{"dk", p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride},
          std::tuple{"dv", p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride}}) {
      EXPECT_EQ(batch_stride, varlen_k ? 0 : dense_k * k_row) << where << " " << name;
      EXPECT_EQ(row_stride, k_row) << where << " " << name;
      EXPECT_EQ(head_stride, d + 8) << where << " " << name;
    }
    EXPECT_EQ(p.lse_batch_stride, varlen_q ? 0 : std::int64_t(heads_q) * (dense_q + 3)) << where;
    EXPECT_EQ(p.lse_head_stride, varlen_q ? total_q + 3 : dense_q + 3) << where;
    EXPECT_EQ(p.lse_row_stride, 1) << where;

    // Every sequence's q blocks within its head's range: the last one ends at or before it.
    EXPECT_EQ(p.q_blocks_per_head, (varlen_q ? total_q : batch * dense_q) / kBlockM + batch) << where;
    EXPECT_EQ(bwd_workspace_blocks(p), std::int64_t(heads_q) * p.q_blocks_per_head) << where;
  }
}

TEST(BwdVarlenParams, DenseCallsKeepTheirStridesAndPassNoArrays) {
  HostTensor q(Dtype::kBFloat16, {2, 100, 4, 64}), k(Dtype::kBFloat16, {2, 70, 2, 64}),
      v(Dtype::kBFloat16, {2, 70, 2, 64}), lse(Dtype::kFloat32, {2, 4, 100});
  BwdArgs a;
  a.q = a.out = a.dout = a.dq = q.tensor();
  a.k = a.dk = k.tensor();
  a.v = a.dv = v.tensor();
  a.lse = lse.tensor();
  detail::Problem pr;
  ASSERT_TRUE(detail::validate_backward(a, &pr).ok());
  const BwdParams p = make_bwd_params<kBlockM>(a, pr);
  EXPECT_EQ(p.cu_seqlens_q, nullptr);
  EXPECT_EQ(p.cu_seqlens_k, nullptr);
  EXPECT_EQ(p.seqused_k, nullptr);
  EXPECT_EQ(p.seqused_q, nullptr);
  EXPECT_EQ(p.dq_batch_stride, 100 * 4 * 64);
  EXPECT_EQ(p.dk_batch_stride, 70 * 2 * 64);
  EXPECT_EQ(p.lse_batch_stride, 4 * 100);
  // A dense q is addressed as if packed: 200 rows, 200 / 64 + 2 blocks per head.
  EXPECT_EQ(p.q_blocks_per_head, 5);
  EXPECT_EQ(bwd_workspace_blocks(p), 4 * 5);
}

}  // namespace
}  // namespace hopattn::sm90
