// Layouts: varlen equals per-sequence dense calls, seqused_k equals truncated keys, seqused_q equals
// truncated query rows, paged K/V equals contiguous K/V, and strided views equal contiguous tensors.
// All float32, compared bit for bit: the same math must come out whatever the addressing.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_reference_support.hpp"

namespace hopattn::test {
namespace {

// out (rows, hq, d) and lse (hq, rows), both in logical row-major order.
struct Output {
  std::vector<double> out, lse;
};

// A forward call on (batch, s, heads, d) tensors; out and lse are poisoned first.
Output call_dense(const HostTensor& q, const HostTensor& k, const HostTensor& v, FwdArgs options) {
  const auto& qs = q.shape();
  HostTensor out(Dtype::kFloat32, qs);
  HostTensor lse(Dtype::kFloat32, {qs[0], qs[2], qs[1]});
  out.poison();
  lse.poison();
  options.q = q.tensor();
  options.k = k.tensor();
  options.v = v.tensor();
  options.out = out.tensor();
  options.lse = lse.tensor();
  const Status status = hopattn::forward(options);
  EXPECT_TRUE(status.ok()) << status.message();
  return {out.to_double(), dense_lse_to_packed(lse.to_double(), static_cast<int>(qs[0]), static_cast<int>(qs[2]),
                                               static_cast<int>(qs[1]))};
}

// Rows [start, start + count) of a packed (rows, heads, d) or dense (batch, s, heads, d) tensor, as a
// dense (1, count, heads, d) tensor.
HostTensor take_rows(const HostTensor& source, std::int64_t start, std::int64_t count) {
  const auto& shape = source.shape();
  const std::int64_t heads = shape[shape.size() - 2], d = shape.back();
  HostTensor rows(source.dtype(), {1, count, heads, d});
  for (std::int64_t e = 0; e < rows.numel(); ++e) rows.set(e, source.get(start * heads * d + e));
  return rows;
}

HostTensor random_tensor(std::vector<std::int64_t> shape, std::uint64_t seed) {
  HostTensor t(Dtype::kFloat32, std::move(shape));
  t.fill_random(seed, -2.0, 2.0);
  return t;
}

TEST(ReferenceLayouts, VarlenEqualsPerSequenceDenseCalls) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int hq = 4, hkv = 2, d = 24;
  // Includes an empty query sequence and a sequence without keys (its rows see nothing).
  std::vector<int> len_q = {5, 0, 33, 1, 7, 3}, len_k = {9, 4, 17, 65, 1, 0};
  for (int b = 0; b < 4; ++b) {  // the rest random
    len_q.push_back(1 + static_cast<int>(rng() % 20));
    len_k.push_back(1 + static_cast<int>(rng() % 20));
  }
  std::vector<int> cu_q = prefix_sums(len_q), cu_k = prefix_sums(len_k);
  const HostTensor q = random_tensor({cu_q.back(), hq, d}, rng());
  const HostTensor k = random_tensor({cu_k.back(), hkv, d}, rng());
  const HostTensor v = random_tensor({cu_k.back(), hkv, d}, rng());

  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "no mask");
    HostTensor out(Dtype::kFloat32, {cu_q.back(), hq, d}), lse(Dtype::kFloat32, {hq, cu_q.back()});
    out.poison();
    lse.poison();
    FwdArgs args = forward_args(q, k, v, out, lse);
    args.cu_seqlens_q = int_tensor(cu_q);
    args.cu_seqlens_k = int_tensor(cu_k);
    args.max_seqlen_q = *std::max_element(len_q.begin(), len_q.end());
    args.max_seqlen_k = *std::max_element(len_k.begin(), len_k.end());
    args.causal = causal;
    const Status status = hopattn::forward(args);
    ASSERT_TRUE(status.ok()) << status.message();
    const std::vector<double> got_out = out.to_double(), got_lse = lse.to_double();

    for (std::size_t b = 0; b < len_q.size(); ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      const std::int64_t rows = static_cast<std::int64_t>(len_q[b]) * hq * d;
      const auto out_begin = got_out.begin() + static_cast<std::ptrdiff_t>(cu_q[b]) * hq * d;
      std::vector<double> seq_out(out_begin, out_begin + rows), seq_lse;
      for (int h = 0; h < hq; ++h)
        for (int i = 0; i < len_q[b]; ++i) seq_lse.push_back(got_lse[static_cast<std::size_t>(h) * cu_q.back() + cu_q[b] + i]);
      if (len_q[b] == 0) continue;
      if (len_k[b] == 0) {  // no keys: every row is empty
        EXPECT_EQ(seq_out, std::vector<double>(seq_out.size(), 0.0));
        EXPECT_EQ(seq_lse, std::vector<double>(seq_lse.size(), -std::numeric_limits<double>::infinity()));
        continue;
      }
      FwdArgs dense;
      dense.causal = causal;
      const Output want = call_dense(take_rows(q, cu_q[b], len_q[b]), take_rows(k, cu_k[b], len_k[b]),
                                     take_rows(v, cu_k[b], len_k[b]), dense);
      EXPECT_EQ(seq_out, want.out);
      EXPECT_EQ(seq_lse, want.lse);
    }
  }
}

TEST(ReferenceLayouts, SequsedKEqualsTruncatedKeys) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int batch = 3, sq = 6, sk = 20, hq = 2, hkv = 1, d = 8;
  std::vector<int> used = {20, 1, 11};
  const HostTensor q = random_tensor({batch, sq, hq, d}, seed);
  const HostTensor k = random_tensor({batch, sk, hkv, d}, seed + 1);
  const HostTensor v = random_tensor({batch, sk, hkv, d}, seed + 2);
  FwdArgs args;
  args.causal = true;
  args.seqused_k = int_tensor(used);
  const Output got = call_dense(q, k, v, args);
  for (int b = 0; b < batch; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    FwdArgs dense;
    dense.causal = true;
    const Output want = call_dense(take_rows(q, b * sq, sq), take_rows(k, b * sk, used[b]),
                                   take_rows(v, b * sk, used[b]), dense);
    const auto out_begin = got.out.begin() + static_cast<std::ptrdiff_t>(b) * sq * hq * d;
    EXPECT_EQ(std::vector<double>(out_begin, out_begin + sq * hq * d), want.out);
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < sq; ++i)
        EXPECT_EQ(got.lse[static_cast<std::size_t>(h) * batch * sq + b * sq + i], want.lse[h * sq + i]);
  }
}

// seqused_q, dense and variable-length q: sequence b's first used[b] rows equal a dense call on those
// rows alone (causal aligned to them, seqused_k too); the rows past them are neither read (q holds NaN
// there) nor written (out and lse keep a marker).
TEST(ReferenceLayouts, SequsedQEqualsTruncatedRows) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int hq = 4, hkv = 2, d = 12;
  const double marker = 1234.5;
  for (const bool varlen : {false, true}) {
    SCOPED_TRACE(varlen ? "variable-length q" : "dense q");
    // Rows per sequence (dense: all 9), and the used ones: all, none, one, and random.
    std::vector<int> rows = varlen ? std::vector<int>{7, 3, 9, 5} : std::vector<int>(4, 9);
    std::vector<int> used = {rows[0], 0, 1, static_cast<int>(rng() % (rows[3] + 1))};
    std::vector<int> used_k = {6, 11, 2, 1 + static_cast<int>(rng() % 11)};
    std::vector<int> cu_q = prefix_sums(rows);
    const int batch = 4, sk = 11;
    HostTensor q = varlen ? random_tensor({cu_q.back(), hq, d}, rng()) : random_tensor({batch, 9, hq, d}, rng());
    const HostTensor k = random_tensor({batch, sk, hkv, d}, rng());
    const HostTensor v = random_tensor({batch, sk, hkv, d}, rng());
    for (int b = 0; b < batch; ++b)
      for (int i = used[b]; i < rows[b]; ++i)
        for (int e = 0; e < hq * d; ++e) q.set((static_cast<std::int64_t>(cu_q[b]) + i) * hq * d + e, NAN);
    HostTensor out(Dtype::kFloat32, q.shape()), lse(Dtype::kFloat32, {hq, cu_q.back()});
    if (!varlen) lse = HostTensor(Dtype::kFloat32, {batch, hq, 9});
    for (std::int64_t e = 0; e < out.numel(); ++e) out.set(e, marker);
    for (std::int64_t e = 0; e < lse.numel(); ++e) lse.set(e, marker);
    FwdArgs args = forward_args(q, k, v, out, lse);
    args.causal = true;
    args.seqused_q = int_tensor(used);
    args.seqused_k = int_tensor(used_k);
    if (varlen) {
      args.cu_seqlens_q = int_tensor(cu_q);
      args.max_seqlen_q = 9;
    }
    const Status status = hopattn::forward(args);
    ASSERT_TRUE(status.ok()) << status.message();
    const std::vector<double> got_out = out.to_double();
    const std::vector<double> got_lse = varlen ? lse.to_double() : dense_lse_to_packed(lse.to_double(), batch, hq, 9);

    for (int b = 0; b < batch; ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b) + ", rows used " + std::to_string(used[b]));
      for (int i = 0; i < rows[b]; ++i)
        for (int h = 0; h < hq; ++h) {
          const std::size_t row = static_cast<std::size_t>(cu_q[b]) + i;
          const bool past = i >= used[b];
          if (past) EXPECT_EQ(got_lse[h * cu_q.back() + row], marker) << "lse row " << i << " written";
          for (int c = 0; c < d && past; ++c) ASSERT_EQ(got_out[(row * hq + h) * d + c], marker) << "out row " << i;
        }
      if (used[b] == 0) continue;
      FwdArgs dense;
      dense.causal = true;
      const Output want = call_dense(take_rows(q, cu_q[b], used[b]), take_rows(k, b * sk, used_k[b]),
                                     take_rows(v, b * sk, used_k[b]), dense);
      const auto out_begin = got_out.begin() + static_cast<std::ptrdiff_t>(cu_q[b]) * hq * d;
      EXPECT_EQ(std::vector<double>(out_begin, out_begin + static_cast<std::ptrdiff_t>(used[b]) * hq * d), want.out);
      for (int h = 0; h < hq; ++h)
        for (int i = 0; i < used[b]; ++i)
          EXPECT_EQ(got_lse[h * cu_q.back() + cu_q[b] + i], want.lse[h * used[b] + i]);
    }
  }
}

TEST(ReferenceLayouts, PagedKvEqualsContiguousKv) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int batch = 3, sq = 3, hq = 4, hkv = 2, d = 16;
  for (const int page_size : {1, 16, 64}) {
    SCOPED_TRACE("page_size=" + std::to_string(page_size));
    const int pages_per_seq = (page_size == 1) ? 37 : 3;
    const int sk = pages_per_seq * page_size;
    std::vector<int> used = {sk, 1 + static_cast<int>(rng() % sk), 1 + static_cast<int>(rng() % sk)};
    const HostTensor q = random_tensor({batch, sq, hq, d}, rng());
    const HostTensor k = random_tensor({batch, sk, hkv, d}, rng());
    const HostTensor v = random_tensor({batch, sk, hkv, d}, rng());

    // Shuffled pages plus spare ones; every slot starts as random garbage that must never be read.
    const int num_pages = batch * pages_per_seq + 2;
    std::vector<int> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int> table(static_cast<std::size_t>(batch) * pages_per_seq);
    std::copy(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(table.size()), table.begin());
    HostTensor k_paged = random_tensor({num_pages, page_size, hkv, d}, rng());
    HostTensor v_paged = random_tensor({num_pages, page_size, hkv, d}, rng());
    for (int b = 0; b < batch; ++b)
      for (int j = 0; j < sk; ++j)
        for (int e = 0; e < hkv * d; ++e) {
          const std::int64_t to = (static_cast<std::int64_t>(table[b * pages_per_seq + j / page_size]) * page_size +
                                   j % page_size) * hkv * d + e;
          const std::int64_t from = (static_cast<std::int64_t>(b) * sk + j) * hkv * d + e;
          k_paged.set(to, k.get(from));
          v_paged.set(to, v.get(from));
        }

    FwdArgs contiguous;
    contiguous.causal = true;
    contiguous.seqused_k = int_tensor(used);
    const Output want = call_dense(q, k, v, contiguous);
    FwdArgs paged = contiguous;
    paged.page_table = make_tensor(table.data(), Dtype::kInt32, {batch, pages_per_seq});
    const Output got = call_dense(q, k_paged, v_paged, paged);
    EXPECT_EQ(got.out, want.out);
    EXPECT_EQ(got.lse, want.lse);
  }
}

TEST(ReferenceLayouts, StridedViewsEqualContiguousTensors) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const std::int64_t batch = 2, s = 13, h = 3, d = 20, pad = 5;
  // q, k, v are slices of one packed (batch, s, 3, h, d) buffer, as a fused QKV projection makes them.
  HostTensor qkv(Dtype::kFloat32, {batch, s, 3, h, d});
  qkv.fill_random(seed, -2.0, 2.0);
  auto slice = [&](int which) { return qkv.view({batch, s, h, d}, {s * 3 * h * d, 3 * h * d, d, 1}, which * h * d); };
  // out rows padded; lse (batch, h, s) inside a wider buffer.
  HostTensor out_buffer(Dtype::kFloat32, {batch, s, h, d + pad}), lse_buffer(Dtype::kFloat32, {batch, h, s + pad});
  out_buffer.poison();
  lse_buffer.poison();
  FwdArgs args;
  args.q = slice(0);
  args.k = slice(1);
  args.v = slice(2);
  args.out = out_buffer.view({batch, s, h, d}, {s * h * (d + pad), h * (d + pad), d + pad, 1});
  args.lse = lse_buffer.view({batch, h, s}, {h * (s + pad), s + pad, 1});
  args.causal = true;
  args.window_left = 4;
  const Status status = hopattn::forward(args);
  ASSERT_TRUE(status.ok()) << status.message();

  HostTensor q(Dtype::kFloat32, {batch, s, h, d}), k(Dtype::kFloat32, {batch, s, h, d}), v(Dtype::kFloat32, {batch, s, h, d});
  q.from_double(read_tensor(slice(0)));
  k.from_double(read_tensor(slice(1)));
  v.from_double(read_tensor(slice(2)));
  FwdArgs contiguous;
  contiguous.causal = true;
  contiguous.window_left = 4;
  const Output want = call_dense(q, k, v, contiguous);
  EXPECT_EQ(read_tensor(args.out), want.out);
  EXPECT_EQ(dense_lse_to_packed(read_tensor(*args.lse), batch, h, s), want.lse);
  // The padding stays untouched.
  for (std::int64_t e = 0; e < out_buffer.numel(); ++e)
    if (e % (d + pad) >= d) EXPECT_TRUE(std::isnan(out_buffer.get(e))) << "padding element " << e << " written";
}

}  // namespace
}  // namespace hopattn::test
