// Reference backward vs central finite differences of the scalar loss sum(out * dout), where out is
// the independent materialized-softmax attention evaluated in float64 on the same (float32) inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "test_reference_support.hpp"

namespace hopattn::test {
namespace {

struct BwdCase {
  const char* name;
  int hq, hkv, d;
  // Dense when cu lengths are empty: batch x (sq, sk); else varlen with these per-sequence lengths.
  int batch, sq, sk;
  std::vector<int> varlen_q, varlen_k;
  std::vector<int> seqused_k;  // dense only; empty = all keys
  std::vector<int> seqused_q;  // dense only; empty = all rows (past them: q, out, lse, dout hold NaN)
  bool causal = false;
  int window_left = -1, window_right = -1;
  int attention_chunk = 0;
  float softcap = 0.0f;
  std::optional<float> scale;
  int dv = 0;  // v's head dim (FA3's headdim_v; out, dout and dv have it too); 0: d
  bool deterministic = false;  // accepted by the CPU backend, deterministic either way
  bool sinks = false;          // random learnable sinks (the last head's -inf), and dsink checked
};

bool is_varlen(const BwdCase& c) { return !c.varlen_q.empty(); }

Packing packing_of(const BwdCase& c) {
  if (is_varlen(c)) return Packing::varlen(c.varlen_q, c.varlen_k);
  Packing p = Packing::dense(c.batch, c.sq, c.sk);
  if (!c.seqused_k.empty()) p.k_len = c.seqused_k;
  if (!c.seqused_q.empty()) p.q_len = c.seqused_q;
  return p;
}

MaskSpec mask_of(const BwdCase& c, const std::vector<double>& sinks) {
  MaskSpec m;
  m.sinks = sinks;
  m.scale = c.scale ? *c.scale : default_scale(c.d);
  m.causal = c.causal;
  m.window_left = c.window_left;
  m.window_right = c.window_right;
  m.attention_chunk = c.attention_chunk;
  m.softcap = c.softcap;
  return m;
}

// The inputs of the loss: q, k, v, dout and the sinks (empty: none), as float64.
struct LossInputs {
  std::vector<double> q, k, v, dout, sinks;
};

// sum(out * dout) of the float64 materialized attention.
double loss(const BwdCase& c, const Packing& pack, const LossInputs& in) {
  std::vector<double> out, lse;
  naive_batch(pack, in.q, in.k, in.v, c.hq, c.hkv, c.d, mask_of(c, in.sinks), &out, &lse, c.dv);
  double total = 0;
  for (std::size_t i = 0; i < out.size(); ++i) total += out[i] * in.dout[i];
  return total;
}

// Central differences of the loss with respect to each element of `wrt` (one of q, k, v, s: sinks).
std::vector<double> finite_differences(const BwdCase& c, const Packing& pack, LossInputs in, char wrt) {
  std::vector<double>& x = wrt == 'q' ? in.q : wrt == 'k' ? in.k : wrt == 'v' ? in.v : in.sinks;
  std::vector<double> grad(x.size());
  const double step = 1e-5;
  for (std::size_t e = 0; e < x.size(); ++e) {
    const double saved = x[e];
    x[e] = saved + step;
    const double up = loss(c, pack, in);
    x[e] = saved - step;
    const double down = loss(c, pack, in);
    x[e] = saved;
    grad[e] = (up - down) / (2 * step);
  }
  return grad;
}

// max |got - want| / max |want| < 1e-6; any NaN fails. want must not be all zero.
void expect_gradient(const std::vector<double>& got, const std::vector<double>& want, const char* name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  double scale = 0, error = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << name << " element " << i << " is NaN (never written?)";
    scale = std::max(scale, std::fabs(want[i]));
    error = std::max(error, std::fabs(got[i] - want[i]));
  }
  ASSERT_GT(scale, 0.0) << name << ": the finite differences are all zero; the case tests nothing";
  EXPECT_LT(error / scale, 1e-6) << name << ": max abs error " << error << " vs max abs gradient " << scale;
}

void check_against_finite_differences(const BwdCase& c, std::uint64_t seed) {
  SCOPED_TRACE(c.name);
  const bool varlen = is_varlen(c);
  std::vector<int> cu_q = prefix_sums(c.varlen_q), cu_k = prefix_sums(c.varlen_k), seqused = c.seqused_k;
  const std::int64_t total_q = varlen ? cu_q.back() : c.batch * c.sq, total_k = varlen ? cu_k.back() : c.batch * c.sk;
  const int dv_dim = c.dv > 0 ? c.dv : c.d;
  auto q_side = [&](int dim) {
    return varlen ? HostTensor(Dtype::kFloat32, {total_q, c.hq, dim})
                  : HostTensor(Dtype::kFloat32, {c.batch, c.sq, c.hq, dim});
  };
  auto k_side = [&](int dim) {
    return varlen ? HostTensor(Dtype::kFloat32, {total_k, c.hkv, dim})
                  : HostTensor(Dtype::kFloat32, {c.batch, c.sk, c.hkv, dim});
  };
  HostTensor q = q_side(c.d), k = k_side(c.d), v = k_side(dv_dim), dout = q_side(dv_dim);
  q.fill_random(seed, -1.5, 1.5);
  k.fill_random(seed + 1, -1.5, 1.5);
  v.fill_random(seed + 2);
  dout.fill_random(seed + 3);
  // Rows past seqused_q may hold anything: NaN in q, out, lse and (the backward's copy of) dout.
  std::vector<int> seqused_q = c.seqused_q;
  auto for_unused_rows = [&](auto&& visit) {
    for (int b = 0; b < static_cast<int>(seqused_q.size()); ++b)
      for (int i = seqused_q[b]; i < c.sq; ++i) visit(b, i);
  };
  auto poison_row = [&](HostTensor& t, int b, int i) {
    const std::int64_t row = std::int64_t{c.hq} * t.shape().back();
    for (std::int64_t e = 0; e < row; ++e) t.set((static_cast<std::int64_t>(b) * c.sq + i) * row + e, NAN);
  };
  HostTensor dout_given = dout;
  for_unused_rows([&](int b, int i) {
    poison_row(q, b, i);
    poison_row(dout_given, b, i);
  });
  HostTensor out = q_side(dv_dim);
  HostTensor lse = varlen ? HostTensor(Dtype::kFloat32, {c.hq, total_q}) : HostTensor(Dtype::kFloat32, {c.batch, c.hq, c.sq});

  FwdArgs fwd = forward_args(q, k, v, out, lse);
  fwd.softmax_scale = c.scale;
  fwd.causal = c.causal;
  fwd.window_left = c.window_left;
  fwd.window_right = c.window_right;
  fwd.attention_chunk = c.attention_chunk;
  fwd.softcap = c.softcap;
  HostTensor sinks(Dtype::kFloat32, {c.hq}), dsink(Dtype::kFloat32, {c.hq});
  if (c.sinks) {
    sinks.fill_random(seed + 4, -2.0, 2.0);
    if (c.hq > 1) static_cast<float*>(sinks.data())[c.hq - 1] = -std::numeric_limits<float>::infinity();
    fwd.learnable_sink = sinks.tensor();
  }
  if (varlen) {
    fwd.cu_seqlens_q = int_tensor(cu_q);
    fwd.cu_seqlens_k = int_tensor(cu_k);
    fwd.max_seqlen_q = *std::max_element(c.varlen_q.begin(), c.varlen_q.end());
    fwd.max_seqlen_k = *std::max_element(c.varlen_k.begin(), c.varlen_k.end());
  }
  if (!seqused.empty()) fwd.seqused_k = int_tensor(seqused);
  if (!seqused_q.empty()) fwd.seqused_q = int_tensor(seqused_q);
  const Status forward_status = hopattn::forward(fwd);
  ASSERT_TRUE(forward_status.ok()) << forward_status.message();
  for_unused_rows([&](int b, int i) {
    poison_row(out, b, i);
    for (int h = 0; h < c.hq; ++h) lse.set((static_cast<std::int64_t>(b) * c.hq + h) * c.sq + i, NAN);
  });

  HostTensor dq = q_side(c.d), dk = k_side(c.d), dv = k_side(dv_dim);
  dq.poison();
  dk.poison();
  dv.poison();
  BwdArgs bwd;
  bwd.q = fwd.q;
  bwd.k = fwd.k;
  bwd.v = fwd.v;
  bwd.out = fwd.out;
  bwd.lse = *fwd.lse;
  bwd.dout = dout_given.tensor();
  bwd.dq = dq.tensor();
  bwd.dk = dk.tensor();
  bwd.dv = dv.tensor();
  bwd.softmax_scale = c.scale;
  bwd.causal = c.causal;
  bwd.window_left = c.window_left;
  bwd.window_right = c.window_right;
  bwd.attention_chunk = c.attention_chunk;
  bwd.softcap = c.softcap;
  bwd.cu_seqlens_q = fwd.cu_seqlens_q;
  bwd.cu_seqlens_k = fwd.cu_seqlens_k;
  bwd.max_seqlen_q = fwd.max_seqlen_q;
  bwd.max_seqlen_k = fwd.max_seqlen_k;
  bwd.seqused_k = fwd.seqused_k;
  bwd.seqused_q = fwd.seqused_q;
  bwd.deterministic = c.deterministic;
  if (c.sinks) {
    dsink.poison();
    bwd.learnable_sink = sinks.tensor();
    bwd.dsink = dsink.tensor();
  }
  const Status backward_status = hopattn::backward(bwd);
  ASSERT_TRUE(backward_status.ok()) << backward_status.message();

  const Packing pack = packing_of(c);
  const LossInputs in{q.to_double(), k.to_double(), v.to_double(), dout.to_double(),
                      c.sinks ? sinks.to_double() : std::vector<double>{}};
  expect_gradient(dq.to_double(), finite_differences(c, pack, in, 'q'), "dq");
  expect_gradient(dk.to_double(), finite_differences(c, pack, in, 'k'), "dk");
  expect_gradient(dv.to_double(), finite_differences(c, pack, in, 'v'), "dv");
  if (c.sinks) {
    // A -inf sink has gradient 0 (its probability is 0); finite differences of -inf give NaN.
    std::vector<double> want = finite_differences(c, pack, in, 's'), got = dsink.to_double();
    ASSERT_EQ(got.back(), 0.0) << "the -inf sink's gradient";
    if (c.hq > 1) want.pop_back(), got.pop_back();
    expect_gradient(got, want, "dsink");
  }
}

TEST(ReferenceBackward, MatchesFiniteDifferences) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::vector<BwdCase> cases;
  cases.push_back({"no mask, odd sizes", 2, 2, 7, 2, 5, 7, {}, {}, {}});
  cases.push_back({"seqlen_q 1, head_dim 1, batch 1", 1, 1, 1, 1, 1, 3, {}, {}, {}});
  BwdCase causal_empty_rows{"causal sq>sk: empty rows get zero dq", 2, 1, 5, 1, 7, 4, {}, {}, {}};
  causal_empty_rows.causal = true;
  cases.push_back(causal_empty_rows);
  BwdCase window{"window (2, 1)", 3, 3, 4, 2, 6, 9, {}, {}, {}};
  window.window_left = 2;
  window.window_right = 1;
  cases.push_back(window);
  BwdCase softcap{"softcap + causal + GQA + explicit scale", 4, 2, 8, 1, 6, 6, {}, {}, {}};
  softcap.softcap = 0.8f;
  softcap.causal = true;
  softcap.scale = 0.7f;
  cases.push_back(softcap);
  softcap.name = "softcap + causal + GQA + explicit scale, deterministic";
  softcap.deterministic = true;
  cases.push_back(softcap);
  BwdCase varlen{"varlen (an empty sequence, a keyless one) + causal + window left + MQA", 3, 1, 4, 0, 0, 0,
                 {3, 0, 5, 2}, {4, 2, 6, 0}};
  varlen.causal = true;
  varlen.window_left = 3;
  cases.push_back(varlen);
  cases.push_back({"seqused_k: unused keys get zero dk, dv", 2, 2, 3, 2, 4, 6, {}, {}, {6, 3}});
  BwdCase sinks{"learnable sinks + GQA + causal sq>sk (rows that see only the sink)", 3, 1, 5, 2, 7, 4, {}, {}, {}};
  sinks.causal = true;
  sinks.sinks = true;
  cases.push_back(sinks);
  BwdCase varlen_sinks = varlen;
  varlen_sinks.name = "varlen + learnable sinks + softcap";
  varlen_sinks.sinks = true;
  varlen_sinks.softcap = 0.9f;
  cases.push_back(varlen_sinks);
  BwdCase chunks{"chunks of 3 + causal + GQA, sq>sk (rows before key 0)", 2, 2, 4, 1, 9, 7, {}, {}, {}};
  chunks.causal = true;
  chunks.attention_chunk = 3;
  cases.push_back(chunks);
  BwdCase varlen_chunks = varlen;
  varlen_chunks.name = "varlen + chunks of 2 + window left";
  varlen_chunks.attention_chunk = 2;
  cases.push_back(varlen_chunks);
  BwdCase rows_used{"seqused_q + causal + GQA: unused rows get zero dq, read nothing", 4, 2, 5, 3, 7, 5, {}, {}, {}};
  rows_used.seqused_q = {7, 0, 3};
  rows_used.causal = true;
  cases.push_back(rows_used);
  BwdCase rows_and_keys_used{"seqused_q + seqused_k + window", 2, 1, 4, 2, 6, 8, {}, {}, {5, 8}};
  rows_and_keys_used.seqused_q = {2, 6};
  rows_and_keys_used.window_left = 2;
  rows_and_keys_used.window_right = 1;
  cases.push_back(rows_and_keys_used);
  BwdCase narrow_v{"v's head dim of its own, narrower (FA3's headdim_v) + causal + GQA", 4, 2, 7, 2, 6, 8, {}, {}, {}};
  narrow_v.dv = 3;
  narrow_v.causal = true;
  cases.push_back(narrow_v);
  BwdCase wide_v{"v's head dim of its own, wider + varlen + softcap", 2, 1, 3, 0, 0, 0, {4, 1, 6}, {5, 3, 6}};
  wide_v.dv = 9;
  wide_v.softcap = 0.9f;
  cases.push_back(wide_v);
  for (std::size_t i = 0; i < cases.size(); ++i) check_against_finite_differences(cases[i], seed + 10 * i);
}

}  // namespace
}  // namespace hopattn::test
