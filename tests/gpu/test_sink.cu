// Learnable sinks (FwdArgs / BwdArgs::learnable_sink, BwdArgs::dsink) on the sm_90a kernels. The
// kernels join a row's sink where the row is finished (fwd/sink.cuh), so each finishing path has a case:
// the dense epilogue with and without split pieces merged in the kernel, rows that see no key, the
// variable-length epilogue, GQA-packed decoding rows and their combine kernel, FP8's epilogue and split
// combine. Each forward case checks two things on fresh random inputs:
//   - the identity a sink must satisfy against the same kernel without it, to a few output roundings:
//     lse_sink = log(exp(lse) + exp(sink)), out_sink = out * exp(lse - lse_sink);
//   - (16-bit inputs) out and lse against the CPU reference backend (float64) with the sink.
// The sinks are drawn around each head's mean LSE, and each case checks that they take a real share
// of the rows (so a kernel that ignored them fails). The backward cases check dq, dk, dv and dsink
// (bwd/sink_grad.cuh) against the CPU reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/host_tensor.hpp"
#include "gpu/gpu_test_util.cuh"
#include "gpu/sequence_checks.cuh"

namespace hopattn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct SinkCase {
  const char* name;
  Dtype dtype;
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  bool causal = false;
  int window_left = -1;
  float softcap = 0.0f;
  int num_splits = 0;
  std::vector<int> q_lens = {}, k_lens = {};  // variable-length sequences when given (batch = their count)
  bool deterministic = false;                 // backward cases
};

bool is_varlen(const SinkCase& c) { return !c.q_lens.empty(); }

std::vector<std::int64_t> q_shape(const SinkCase& c) {
  if (is_varlen(c)) return {prefix_sums(c.q_lens).back(), c.heads_q, c.head_dim};
  return {c.batch, c.seqlen_q, c.heads_q, c.head_dim};
}
std::vector<std::int64_t> k_shape(const SinkCase& c) {
  if (is_varlen(c)) return {prefix_sums(c.k_lens).back(), c.heads_kv, c.head_dim};
  return {c.batch, c.seqlen_k, c.heads_kv, c.head_dim};
}
std::vector<std::int64_t> lse_shape(const SinkCase& c) {
  if (is_varlen(c)) return {c.heads_q, prefix_sums(c.q_lens).back()};
  return {c.batch, c.heads_q, c.seqlen_q};
}
Dtype out_dtype(const SinkCase& c) { return c.dtype == Dtype::kFloat8E4M3 ? Dtype::kBFloat16 : c.dtype; }

// A host tensor's copy on the device, and the CUDA view of it.
struct DeviceCopy {
  DeviceBuffer buffer;
  Tensor tensor;
};

DeviceCopy upload(const HostTensor& h) {
  DeviceCopy d{DeviceBuffer(h.numel() * dtype_size(h.dtype())), h.tensor()};
  HOPATTN_CUDA_CHECK(cudaMemcpy(d.buffer.data(), h.data(), d.buffer.bytes(), cudaMemcpyHostToDevice));
  d.tensor.data = d.buffer.data();
  d.tensor.device = DeviceType::kCuda;
  return d;
}

std::vector<double> download(const DeviceCopy& d) {
  const Tensor& t = d.tensor;
  HostTensor h(t.dtype, std::vector<std::int64_t>(t.shape, t.shape + t.rank));
  HOPATTN_CUDA_CHECK(cudaMemcpy(h.data(), d.buffer.data(), d.buffer.bytes(), cudaMemcpyDeviceToHost));
  return h.to_double();
}

// float32 widening of a host tensor (exact for every input dtype), for the CPU reference.
HostTensor widened(const HostTensor& h) {
  HostTensor w(Dtype::kFloat32, h.shape());
  for (std::int64_t i = 0; i < h.numel(); ++i) w.set(i, h.get(i));
  return w;
}

struct Inputs {
  HostTensor q, k, v, dout, cu_q, cu_k;
};

Inputs draw_inputs(const SinkCase& c, std::uint64_t seed) {
  Inputs in{HostTensor(c.dtype, q_shape(c)), HostTensor(c.dtype, k_shape(c)), HostTensor(c.dtype, k_shape(c)),
            HostTensor(out_dtype(c), q_shape(c)), HostTensor(), HostTensor()};
  in.q.fill_random(seed, -2.0, 2.0);  // a peaked softmax: rows weigh few keys, as in trained models
  in.k.fill_random(seed + 1, -2.0, 2.0);
  in.v.fill_random(seed + 2);
  in.dout.fill_random(seed + 3);
  if (is_varlen(c)) {
    const std::vector<int> cu_q = prefix_sums(c.q_lens), cu_k = prefix_sums(c.k_lens);
    in.cu_q = HostTensor(Dtype::kInt32, {std::int64_t(cu_q.size())});
    in.cu_k = HostTensor(Dtype::kInt32, {std::int64_t(cu_k.size())});
    for (std::size_t i = 0; i < cu_q.size(); ++i) in.cu_q.set(i, cu_q[i]), in.cu_k.set(i, cu_k[i]);
  }
  return in;
}

// FwdArgs of c on the given q, k, v, out, lse (host or CUDA views alike).
FwdArgs forward_args(const SinkCase& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     const Tensor& lse, const std::optional<Tensor>& cu_q, const std::optional<Tensor>& cu_k) {
  FwdArgs a;
  a.q = q, a.k = k, a.v = v, a.out = out, a.lse = lse;
  a.causal = c.causal;
  a.window_left = c.window_left;
  a.softcap = c.softcap;
  a.num_splits = c.num_splits;
  if (is_varlen(c)) {
    a.cu_seqlens_q = cu_q, a.cu_seqlens_k = cu_k;
    a.max_seqlen_q = *std::max_element(c.q_lens.begin(), c.q_lens.end());
    a.max_seqlen_k = *std::max_element(c.k_lens.begin(), c.k_lens.end());
  }
  return a;
}

struct Forward {
  std::vector<double> out, lse;
};

// The sm_90a forward of c on `in`, with sinks when given; outputs poisoned first.
Forward gpu_forward(const SinkCase& c, const Inputs& in, const HostTensor* sinks) {
  HostTensor out(out_dtype(c), q_shape(c)), lse(Dtype::kFloat32, lse_shape(c));
  out.poison();
  lse.poison();
  const DeviceCopy q = upload(in.q), k = upload(in.k), v = upload(in.v), d_out = upload(out), d_lse = upload(lse);
  std::optional<DeviceCopy> cu_q, cu_k, d_sinks;
  if (is_varlen(c)) cu_q = upload(in.cu_q), cu_k = upload(in.cu_k);
  FwdArgs a = forward_args(c, q.tensor, k.tensor, v.tensor, d_out.tensor, d_lse.tensor,
                           cu_q ? std::optional<Tensor>(cu_q->tensor) : std::nullopt,
                           cu_k ? std::optional<Tensor>(cu_k->tensor) : std::nullopt);
  if (sinks) d_sinks = upload(*sinks), a.learnable_sink = d_sinks->tensor;
  const Status s = hopattn::forward(a);
  EXPECT_TRUE(s.ok()) << s.message();
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  return {download(d_out), download(d_lse)};
}

// The CPU reference of c on `in` (widened to float32) with sinks.
Forward cpu_forward(const SinkCase& c, const Inputs& in, const HostTensor& sinks) {
  const HostTensor q = widened(in.q), k = widened(in.k), v = widened(in.v);
  HostTensor out(Dtype::kFloat32, q_shape(c)), lse(Dtype::kFloat32, lse_shape(c));
  FwdArgs a = forward_args(c, q.tensor(), k.tensor(), v.tensor(), out.tensor(), lse.tensor(),
                           is_varlen(c) ? std::optional<Tensor>(in.cu_q.tensor()) : std::nullopt,
                           is_varlen(c) ? std::optional<Tensor>(in.cu_k.tensor()) : std::nullopt);
  a.learnable_sink = sinks.tensor();
  const Status s = hopattn::forward(a);
  EXPECT_TRUE(s.ok()) << s.message();
  return {out.to_double(), lse.to_double()};
}

// The q head of flat LSE entry i (dense (batch, heads, seqlen_q) or packed (heads, total_q)).
int lse_head(const SinkCase& c, std::size_t i) {
  if (is_varlen(c)) return int(i / prefix_sums(c.q_lens).back());
  return int(i / c.seqlen_q % c.heads_q);
}
// The LSE entry of flat out element i.
std::size_t lse_of_out(const SinkCase& c, std::size_t i) {
  const std::size_t row = i / c.head_dim / c.heads_q, head = i / c.head_dim % c.heads_q;
  if (is_varlen(c)) return head * prefix_sums(c.q_lens).back() + row;
  const std::size_t b = row / c.seqlen_q, s = row % c.seqlen_q;
  return (b * c.heads_q + head) * c.seqlen_q + s;
}

// Sinks around each head's mean LSE (the last head's -inf: no sink, where there are several heads).
HostTensor draw_sinks(const SinkCase& c, const std::vector<double>& lse, std::uint64_t seed) {
  std::vector<double> sum(c.heads_q, 0.0), count(c.heads_q, 0.0);
  for (std::size_t i = 0; i < lse.size(); ++i)
    if (std::isfinite(lse[i])) sum[lse_head(c, i)] += lse[i], count[lse_head(c, i)] += 1;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> offset(-1.0, 1.0);
  HostTensor sinks(Dtype::kFloat32, {c.heads_q});
  for (int h = 0; h < c.heads_q; ++h) sinks.set(h, (count[h] > 0 ? sum[h] / count[h] : 0.0) + offset(rng));
  if (c.heads_q > 1) sinks.set(c.heads_q - 1, -kInf);
  return sinks;
}

// A bound on the two runs' roundings to the output type (and a split tile's merge order, which may
// differ between them): 3 units in the last place of x.
double output_rounding(Dtype dtype, double x) {
  const int bits = dtype == Dtype::kFloat16 ? 10 : 7;
  return 3.0 * std::ldexp(1.0, std::ilogb(std::max(std::fabs(x), 0x1p-14)) - bits);
}

// Where the two runs' split pieces take different keys (the K/V copy kernels' pieces share their tile's
// blocks and claim them as they go: architecture.md), each P element is rounded to 16 bits against a
// different running max, and an output element moves by up to that rounding times the values it
// weighs: half a unit in the last place of the largest output, whatever the element's own size (an
// fp16 element of 4e-5 moved by 2e-6 in 7 of 20 fresh seeds at 16000 keys, H100, perf-notes session 64).
double split_rounding(Dtype dtype, double largest_out) {
  const int bits = dtype == Dtype::kFloat16 ? 10 : 7;
  return std::ldexp(largest_out, -bits - 1);
}

void check_forward_case(const SinkCase& c, std::uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed));
  const Inputs in = draw_inputs(c, seed);
  const Forward plain = gpu_forward(c, in, nullptr);
  const HostTensor sinks = draw_sinks(c, plain.lse, seed + 5);
  const Forward sunk = gpu_forward(c, in, &sinks);
  const std::vector<double> sink = sinks.to_double();

  // The identity against the kernel without sinks, and the share the sinks take.
  double largest_share = 0.0;
  int lse_misses = 0, out_misses = 0;
  std::string first_miss;
  std::vector<double> factor(plain.lse.size());
  for (std::size_t i = 0; i < plain.lse.size(); ++i) {
    const double s = sink[lse_head(c, i)], l = plain.lse[i];
    const double joined = std::max(l, s) == -kInf ? -kInf : std::max(l, s) + std::log1p(std::exp(std::min(l, s) - std::max(l, s)));
    factor[i] = l == -kInf ? 0.0 : std::exp(l - joined);
    if (l != -kInf) largest_share = std::max(largest_share, 1.0 - factor[i]);
    const bool ok = joined == -kInf ? sunk.lse[i] == -kInf : std::fabs(sunk.lse[i] - joined) <= 1e-5 * (1.0 + std::fabs(joined));
    if (!ok && lse_misses++ == 0) first_miss = "lse " + std::to_string(i) + ": " + std::to_string(sunk.lse[i]) + " vs " + std::to_string(joined);
  }
  double largest_plain = 0.0;
  for (const double x : plain.out) largest_plain = std::max(largest_plain, std::fabs(x));
  const double split_bound = split_rounding(out_dtype(c), largest_plain);
  for (std::size_t i = 0; i < plain.out.size(); ++i) {
    const double want = plain.out[i] * factor[lse_of_out(c, i)];
    const bool ok = std::fabs(sunk.out[i] - want) <= output_rounding(out_dtype(c), want) + split_bound + 1e-6;
    if (!ok && out_misses++ == 0) first_miss += " out " + std::to_string(i) + ": " + std::to_string(sunk.out[i]) + " vs " + std::to_string(want);
  }
  EXPECT_GT(largest_share, 0.2) << "the sinks take too small a share to test anything";
  EXPECT_EQ(lse_misses, 0) << first_miss;
  EXPECT_EQ(out_misses, 0) << first_miss;

  if (c.dtype == Dtype::kFloat8E4M3) return;  // FP8 rounds P to 3 mantissa bits: the identity above suffices
  const Forward want = cpu_forward(c, in, sinks);
  double worst_out = 0.0, largest = 0.0, worst_lse = 0.0;
  for (std::size_t i = 0; i < want.out.size(); ++i) {
    ASSERT_FALSE(std::isnan(sunk.out[i])) << "out " << i;
    worst_out = std::max(worst_out, std::fabs(sunk.out[i] - want.out[i]));
    largest = std::max(largest, std::fabs(want.out[i]));
  }
  for (std::size_t i = 0; i < want.lse.size(); ++i) {
    if (want.lse[i] == -kInf) {
      EXPECT_EQ(sunk.lse[i], -kInf) << "lse " << i;
      continue;
    }
    worst_lse = std::max(worst_lse, std::fabs(sunk.lse[i] - want.lse[i]));
  }
  const double tolerance = (c.dtype == Dtype::kBFloat16 ? 0x1p-6 : 0x1p-9) * largest;
  EXPECT_LE(worst_out, tolerance) << "max |out - reference| (max |reference| " << largest << ")";
  EXPECT_LE(worst_lse, 1e-3) << "max |lse - reference|";
}

class ForwardSinks : public HopperTest {};

TEST_F(ForwardSinks, EveryFinishingPathJoinsTheSink) {
  const std::uint64_t seed = run_seed();
  const Dtype bf16 = Dtype::kBFloat16, fp16 = Dtype::kFloat16, fp8 = Dtype::kFloat8E4M3;
  const SinkCase cases[] = {
      {"dense d 64, no split", bf16, 2, 4, 2, 300, 300, 64, false, -1, 0.0f, 1},
      {"dense d 128, 3 pieces merged in the kernel", bf16, 1, 2, 1, 200, 700, 128, false, -1, 0.0f, 3},
      {"dense d 64 causal sq > sk: rows that see no key", fp16, 2, 3, 3, 257, 100, 64, true},
      {"dense d 256, window and softcap", bf16, 1, 2, 2, 190, 333, 256, true, 40, 5.0f},
      {"dense d 192 (padded d 176)", fp16, 1, 2, 1, 129, 129, 176},
      {"variable-length d 128", bf16, 3, 4, 2, 0, 0, 128, true, -1, 0.0f, 0, {100, 1, 257}, {300, 64, 257}},
      {"decoding: GQA-packed rows, split, combine", bf16, 3, 8, 2, 0, 0, 128, false, -1, 0.0f, 0, {1, 2, 1},
       {3000, 517, 4100}},
      {"decoding d 64: many pieces (shared combine)", fp16, 1, 8, 1, 0, 0, 64, false, -1, 0.0f, 0, {1}, {16000}},
      {"FP8 dense d 128", fp8, 2, 2, 1, 300, 400, 128, true},
      {"FP8 dense d 64, 3 pieces (split combine)", fp8, 1, 2, 2, 130, 900, 64, false, -1, 0.0f, 3},
      {"FP8 decoding d 128: GQA-packed, split", fp8, 2, 8, 2, 0, 0, 128, false, -1, 0.0f, 0, {1, 3}, {2000, 700}},
  };
  for (std::size_t i = 0; i < std::size(cases); ++i) check_forward_case(cases[i], splitmix64(seed + i));
}

// The backward of c with sinks (from the GPU forward with them) against the CPU reference: dq, dk and
// dv within 2^-6 of their largest reference element; dsink within the first-order error of the stored
// out and lse, equal to what those give to float32 rounding, and bitwise equal across two calls.
void check_backward_case(const SinkCase& c, std::uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed));
  const Inputs in = draw_inputs(c, seed);
  const Forward plain = gpu_forward(c, in, nullptr);
  const HostTensor sinks = draw_sinks(c, plain.lse, seed + 5);

  // The GPU forward with sinks, kept on the device for the backward.
  HostTensor out(out_dtype(c), q_shape(c)), lse(Dtype::kFloat32, lse_shape(c));
  const DeviceCopy q = upload(in.q), k = upload(in.k), v = upload(in.v), dout = upload(in.dout),
                   d_out = upload(out), d_lse = upload(lse), d_sinks = upload(sinks);
  std::optional<DeviceCopy> cu_q, cu_k;
  if (is_varlen(c)) cu_q = upload(in.cu_q), cu_k = upload(in.cu_k);
  const std::optional<Tensor> cu_q_t = cu_q ? std::optional<Tensor>(cu_q->tensor) : std::nullopt;
  const std::optional<Tensor> cu_k_t = cu_k ? std::optional<Tensor>(cu_k->tensor) : std::nullopt;
  FwdArgs f = forward_args(c, q.tensor, k.tensor, v.tensor, d_out.tensor, d_lse.tensor, cu_q_t, cu_k_t);
  f.learnable_sink = d_sinks.tensor;
  ASSERT_TRUE(hopattn::forward(f).ok());

  HostTensor grad_q(c.dtype, q_shape(c)), grad_kv(c.dtype, k_shape(c)), grad_sink(Dtype::kFloat32, {c.heads_q});
  grad_q.poison(), grad_kv.poison(), grad_sink.poison();
  const DeviceCopy dq = upload(grad_q), dk = upload(grad_kv), dv = upload(grad_kv), dsink = upload(grad_sink);
  BwdArgs b;
  b.q = q.tensor, b.k = k.tensor, b.v = v.tensor, b.out = d_out.tensor, b.dout = dout.tensor, b.lse = d_lse.tensor;
  b.dq = dq.tensor, b.dk = dk.tensor, b.dv = dv.tensor;
  b.causal = c.causal, b.window_left = c.window_left, b.softcap = c.softcap;
  b.cu_seqlens_q = cu_q_t, b.cu_seqlens_k = cu_k_t, b.max_seqlen_q = f.max_seqlen_q, b.max_seqlen_k = f.max_seqlen_k;
  b.deterministic = c.deterministic;
  b.learnable_sink = d_sinks.tensor, b.dsink = dsink.tensor;
  const Status s = hopattn::backward(b);
  ASSERT_TRUE(s.ok()) << s.message();
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<double> got_dsink = download(dsink);
  ASSERT_TRUE(hopattn::backward(b).ok());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(download(dsink), got_dsink) << "dsink differs between two calls";

  // The CPU reference on the same (widened) inputs.
  const HostTensor qh = widened(in.q), kh = widened(in.k), vh = widened(in.v), douth = widened(in.dout);
  HostTensor out_h(Dtype::kFloat32, q_shape(c)), lse_h(Dtype::kFloat32, lse_shape(c));
  HostTensor dq_h(Dtype::kFloat32, q_shape(c)), dk_h(Dtype::kFloat32, k_shape(c)), dv_h(Dtype::kFloat32, k_shape(c)),
      dsink_h(Dtype::kFloat32, {c.heads_q});
  BwdArgs r = b;
  r.q = qh.tensor(), r.k = kh.tensor(), r.v = vh.tensor(), r.dout = douth.tensor(), r.out = out_h.tensor();
  r.lse = lse_h.tensor();  // the reference recomputes the softmax; lse and out are not read
  r.dq = dq_h.tensor(), r.dk = dk_h.tensor(), r.dv = dv_h.tensor();
  r.learnable_sink = sinks.tensor(), r.dsink = dsink_h.tensor();
  if (is_varlen(c)) r.cu_seqlens_q = in.cu_q.tensor(), r.cu_seqlens_k = in.cu_k.tensor();
  const Status rs = hopattn::backward(r);
  ASSERT_TRUE(rs.ok()) << rs.message();

  const auto expect_close = [&](const std::vector<double>& got, const std::vector<double>& want, const char* name) {
    double worst = 0.0, largest = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << name << " " << i;
      worst = std::max(worst, std::fabs(got[i] - want[i]));
      largest = std::max(largest, std::fabs(want[i]));
    }
    ASSERT_GT(largest, 0.0) << name << " is all zero: nothing tested";
    EXPECT_LE(worst, 0x1p-6 * largest) << name << ": max |got - reference| (max |reference| " << largest << ")";
  };
  expect_close(download(dq), dq_h.to_double(), "dq");
  expect_close(download(dk), dk_h.to_double(), "dk");
  expect_close(download(dv), dv_h.to_double(), "dv");

  // dsink = -sum_i exp(sink - lse_i) (dout_i . out_i) over a head's rows, from the stored out and lse:
  // its error is theirs, carried through a sum that may cancel to far below its terms, so it is bounded
  // by them to first order (twice, for the float32 sums), plus 1e-5 of sum_i p_i |D_i|, rather than by
  // its own size (2^-6 of it failed on a correct kernel: 0.0094 against a dsink of 0.0087, H200).
  const Forward want = cpu_forward(c, in, sinks);
  const std::vector<double> out_got = download(d_out), lse_got = download(d_lse), dout_h = douth.to_double();
  std::vector<double> d_error(want.lse.size(), 0.0), d_ref(want.lse.size(), 0.0), d_got(want.lse.size(), 0.0);
  for (std::size_t i = 0; i < want.out.size(); ++i) {
    d_error[lse_of_out(c, i)] += std::fabs(dout_h[i]) * std::fabs(out_got[i] - want.out[i]);
    d_ref[lse_of_out(c, i)] += dout_h[i] * want.out[i];
    d_got[lse_of_out(c, i)] += dout_h[i] * out_got[i];
  }
  const std::vector<double> sink = sinks.to_double();
  // Also exactly what the kernels must compute from the stored out and lse (float64 here; float32
  // terms and sums there): that catches a lost or repeated row however small the cancelled sum is.
  std::vector<double> bound(c.heads_q, 0.0), from_stored(c.heads_q, 0.0), magnitude(c.heads_q, 0.0);
  for (std::size_t i = 0; i < want.lse.size(); ++i) {
    const int h = lse_head(c, i);
    if (sink[h] == -kInf) continue;
    const double p = std::exp(sink[h] - want.lse[i]);
    bound[h] += 2.0 * p * (d_error[i] + std::fabs(lse_got[i] - want.lse[i]) * std::fabs(d_ref[i])) +
                1e-5 * p * std::fabs(d_ref[i]);
    const double p_stored = std::exp(sink[h] - lse_got[i]);
    from_stored[h] -= p_stored * d_got[i];
    magnitude[h] += p_stored * std::fabs(d_got[i]);
  }
  const std::vector<double> want_dsink = dsink_h.to_double();
  EXPECT_EQ(got_dsink.back(), 0.0) << "the -inf sink's gradient";
  for (int h = 0; h + 1 < c.heads_q; ++h) {
    ASSERT_FALSE(std::isnan(got_dsink[h])) << "dsink " << h;
    ASSERT_GT(magnitude[h], 0.0) << "dsink " << h << " sums nothing";
    EXPECT_LE(std::fabs(got_dsink[h] - want_dsink[h]), bound[h])
        << "dsink " << h << ": " << got_dsink[h] << " against " << want_dsink[h];
    EXPECT_LE(std::fabs(got_dsink[h] - from_stored[h]), 1e-5 * magnitude[h])
        << "dsink " << h << ": " << got_dsink[h] << " against " << from_stored[h] << " from the stored out and lse";
  }
}

class BackwardSinks : public HopperTest {};

TEST_F(BackwardSinks, GradientsAndDsinkMatchReference) {
  const std::uint64_t seed = run_seed();
  const Dtype bf16 = Dtype::kBFloat16, fp16 = Dtype::kFloat16;
  SinkCase deterministic{"d 128 causal GQA, deterministic", bf16, 2, 4, 2, 200, 300, 128, true};
  deterministic.deterministic = true;
  const SinkCase cases[] = {
      {"d 64", bf16, 2, 3, 3, 190, 190, 64},
      deterministic,
      {"d 256 softcap, sq > sk (rows that see only the sink)", fp16, 1, 2, 1, 150, 70, 256, true, -1, 4.0f},
      {"variable-length d 128", bf16, 3, 2, 1, 0, 0, 128, false, -1, 0.0f, 0, {100, 1, 130}, {60, 90, 130}},
  };
  for (std::size_t i = 0; i < std::size(cases); ++i) check_backward_case(cases[i], splitmix64(seed + 100 + i));
}

}  // namespace
}  // namespace hopattn::test
