// One key per sequence, bf16 and FP8: every tile is a single short K/V block, so the producer races
// through Q tiles and K/V stages as fast as the pipeline lets it, the strongest test of the buffer
// hand-overs.
// With one key the answer is exact and known on the host: out is v's row, and each row's LSE is
// its own score q.k * scale. A wrong LSE with a right out means a score was computed from the
// wrong data; the failure message says whose data it matches.
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/host_tensor.hpp"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

struct OneKeyCase {
  const char* name;
  Dtype dtype;  // of q, k, v: bf16, or e4m3 for the FP8 kernel (out is bf16 either way)
  KernelOptions options;
  bool head_major;  // q and out stored (b, h, s, d) and viewed through strides
};

class ForwardOneKey : public HopperTest, public ::testing::WithParamInterface<OneKeyCase> {};

constexpr int kBatch = 3, kHeadsQ = 8, kHeadsKv = 2, kSeqlenQ = 4097, kHeadDim = 128;
constexpr int kLaunches = 20;

// n values drawn from N(0, 1), rounded to `dtype` (to nearest, as HostTensor stores them).
HostTensor random_normal(Dtype dtype, std::int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  HostTensor t(dtype, {n});
  for (std::int64_t i = 0; i < n; ++i) t.set(i, normal(rng));
  return t;
}

std::string describe_row(int b, int h, int i) {
  std::ostringstream s;
  s << "(batch " << b << ", head " << h << ", row " << i << ")";
  return s.str();
}

// The inputs of one case on the host, and what the kernel must return for them.
class OneKeyProblem {
 public:
  OneKeyProblem(Dtype dtype, bool head_major, std::mt19937_64& rng)
      : q_(random_normal(dtype, kQElements, rng)),
        k_(random_normal(dtype, kKvElements, rng)),
        v_(random_normal(dtype, kKvElements, rng)),
        q_values_(q_.to_double()),
        k_values_(k_.to_double()),
        v_values_(v_.to_double()),
        q_stride_{std::int64_t(kSeqlenQ) * kHeadsQ * kHeadDim,
                  head_major ? kHeadDim : std::int64_t(kHeadsQ) * kHeadDim,
                  head_major ? std::int64_t(kSeqlenQ) * kHeadDim : kHeadDim, 1} {
    for (int b = 0; b < kBatch; ++b)
      for (int h = 0; h < kHeadsQ; ++h)
        for (int i = 0; i < kSeqlenQ; ++i) {
          const std::size_t r = lse_index(b, h, i);
          double magnitude = 0.0;
          want_lse_[r] = score(b, h, i, b, kv_head(h), &magnitude);
          tolerance_[r] = dtype == Dtype::kBFloat16 ? 1e-3 : 2e-3 + magnitude / 512;
        }
  }

  static constexpr std::int64_t kQElements = std::int64_t(kBatch) * kSeqlenQ * kHeadsQ * kHeadDim;
  static constexpr std::int64_t kKvElements = std::int64_t(kBatch) * kHeadsKv * kHeadDim;
  static constexpr std::size_t kLseElements = std::size_t(kBatch) * kHeadsQ * kSeqlenQ;

  const HostTensor& q() const { return q_; }
  const HostTensor& k() const { return k_; }
  const HostTensor& v() const { return v_; }
  const std::int64_t (&q_stride() const)[4] { return q_stride_; }

  // out[b, i, h, :] must be v[b, 0, h / ratio, :] exactly: one key gets probability 1 (the FP8
  // kernel's P of 256 and its 1/256 are exact too), and v's values are exact in bf16. Returns how
  // many elements of `out` (bf16, stored with q's strides) are not.
  std::int64_t wrong_out_elements(const HostTensor& out) const {
    std::int64_t wrong = 0;
    for (int b = 0; b < kBatch; ++b)
      for (int i = 0; i < kSeqlenQ; ++i)
        for (int h = 0; h < kHeadsQ; ++h) {
          const double* want = v_values_.data() + (std::size_t(b) * kHeadsKv + kv_head(h)) * kHeadDim;
          for (int d = 0; d < kHeadDim; ++d) wrong += out.get(q_offset(b, i, h) + d) != want[d];
        }
    return wrong;
  }

  // How many rows of `lse` are off by more than their tolerance (NaN included); the first three are
  // described in `first`, with whose data their value matches: another row's score, or this row's q
  // with another key.
  std::int64_t wrong_lse_rows(const std::vector<float>& lse, std::ostringstream& first) const {
    std::int64_t wrong = 0;
    for (std::size_t r = 0; r < kLseElements; ++r) {
      if (std::fabs(lse[r] - want_lse_[r]) <= tolerance_[r]) continue;
      if (++wrong <= 3) explain(r, lse[r], first);
    }
    return wrong;
  }

 private:
  static int kv_head(int h) { return h / (kHeadsQ / kHeadsKv); }
  static std::size_t lse_index(int b, int h, int i) { return (std::size_t(b) * kHeadsQ + h) * kSeqlenQ + i; }
  std::int64_t q_offset(int b, int i, int h) const {
    return b * q_stride_[0] + i * q_stride_[1] + h * q_stride_[2];
  }

  // The score of q row (b, h, i) against the key of (kv_b, kv_h), and sum_d |q_d k_d| * scale: the
  // FP8 S GEMM (QGMMA) adds its products with ~14 mantissa bits, an error relative to that sum (the
  // rule of fp8_oracle.cuh: 2e-3 + sum / 512). bf16 scores are exact in float32: 1e-3.
  double score(int b, int h, int i, int kv_b, int kv_h, double* magnitude = nullptr) const {
    const double scale = 1.0 / std::sqrt(double(kHeadDim));
    double dot = 0.0, abs_dot = 0.0;
    for (int d = 0; d < kHeadDim; ++d) {
      const double product =
          q_values_[q_offset(b, i, h) + d] * k_values_[(std::size_t(kv_b) * kHeadsKv + kv_h) * kHeadDim + d];
      dot += product;
      abs_dot += std::fabs(product);
    }
    if (magnitude) *magnitude = abs_dot * scale;
    return dot * scale;
  }

  void explain(std::size_t r, float got, std::ostringstream& out) const {
    const int i = int(r % kSeqlenQ), h = int(r / kSeqlenQ % kHeadsQ), b = int(r / kSeqlenQ / kHeadsQ);
    out << "\n  " << describe_row(b, h, i) << ": lse " << got << ", want " << want_lse_[r];
    for (std::size_t other = 0; other < kLseElements; ++other) {
      if (other != r && std::fabs(got - want_lse_[other]) <= tolerance_[other] / 4) {
        out << "; another row's: "
            << describe_row(int(other / kSeqlenQ / kHeadsQ), int(other / kSeqlenQ % kHeadsQ), int(other % kSeqlenQ));
        break;
      }
    }
    for (int kv_b = 0; kv_b < kBatch; ++kv_b)
      for (int kv_h = 0; kv_h < kHeadsKv; ++kv_h)
        if (std::fabs(got - score(b, h, i, kv_b, kv_h)) <= tolerance_[r] / 4)
          out << "; its q with the key of (batch " << kv_b << ", kv head " << kv_h << ")";
  }

  HostTensor q_, k_, v_;
  std::vector<double> q_values_, k_values_, v_values_;
  std::int64_t q_stride_[4];  // q and out: (b, s, h, d) viewed, stored (b, s, h, d) or (b, h, s, d)
  std::vector<double> want_lse_ = std::vector<double>(kLseElements);
  std::vector<double> tolerance_ = std::vector<double>(kLseElements);
};

TEST_P(ForwardOneKey, EveryRowGetsItsOwnScoreAndTheKeysValue) {
  const OneKeyCase& param = GetParam();
  const std::uint64_t seed = run_seed();
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  const OneKeyProblem problem(param.dtype, param.head_major, rng);

  const auto upload = [](const HostTensor& host) {
    const std::size_t bytes = std::size_t(host.numel()) * dtype_size(host.dtype());
    DeviceBuffer buffer(bytes);
    HOPATTN_CUDA_CHECK(cudaMemcpy(buffer.data(), host.data(), bytes, cudaMemcpyHostToDevice));
    return buffer;
  };
  DeviceBuffer q = upload(problem.q()), k = upload(problem.k()), v = upload(problem.v());
  DeviceBuffer out(std::size_t(OneKeyProblem::kQElements) * 2), lse(OneKeyProblem::kLseElements * 4);
  HostTensor out_host(Dtype::kBFloat16, {OneKeyProblem::kQElements});
  FwdArgs args = dense_cuda_args({kBatch, kHeadsQ, kHeadsKv, kSeqlenQ, 1, kHeadDim}, param.dtype, Dtype::kBFloat16,
                                 q.data(), k.data(), v.data(), out.data(), lse.data());
  args.q = strided_tensor(q.data(), param.dtype, {kBatch, kSeqlenQ, kHeadsQ, kHeadDim}, problem.q_stride());
  args.out = strided_tensor(out.data(), Dtype::kBFloat16, {kBatch, kSeqlenQ, kHeadsQ, kHeadDim}, problem.q_stride());
  args.options = param.options;

  for (int launch = 0; launch < kLaunches; ++launch) {
    poison_nan(out.data(), Dtype::kBFloat16, OneKeyProblem::kQElements);
    poison_nan(lse.data(), Dtype::kFloat32, std::int64_t(OneKeyProblem::kLseElements));
    const Status status = forward(args);
    ASSERT_TRUE(status.ok()) << status.message();
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    HOPATTN_CUDA_CHECK(cudaMemcpy(out_host.data(), out.data(), out.bytes(), cudaMemcpyDeviceToHost));
    const std::int64_t wrong_out = problem.wrong_out_elements(out_host);
    EXPECT_EQ(wrong_out, 0) << "launch " << launch << ": out elements that are not v's (seed " << seed << ")";
    std::ostringstream first;
    const std::int64_t wrong_lse = problem.wrong_lse_rows(lse.to_host<float>(), first);
    EXPECT_EQ(wrong_lse, 0) << "launch " << launch << " of " << kLaunches << ": rows with a wrong LSE (seed "
                            << seed << "), the first:" << first.str();
    if (wrong_out || wrong_lse) return;
  }
}

KernelOptions without_pingpong() {
  KernelOptions o;
  o.pingpong = false;
  return o;
}

INSTANTIATE_TEST_SUITE_P(Schedules, ForwardOneKey,
                         ::testing::Values(OneKeyCase{"bf16", Dtype::kBFloat16, KernelOptions{}, false},
                                           OneKeyCase{"bf16_head_major", Dtype::kBFloat16, KernelOptions{}, true},
                                           OneKeyCase{"bf16_no_pingpong", Dtype::kBFloat16, without_pingpong(), false},
                                           OneKeyCase{"bf16_no_pingpong_head_major", Dtype::kBFloat16,
                                                      without_pingpong(), true},
                                           OneKeyCase{"fp8", Dtype::kFloat8E4M3, KernelOptions{}, false},
                                           OneKeyCase{"fp8_no_pingpong", Dtype::kFloat8E4M3, without_pingpong(), false}),
                         [](const ::testing::TestParamInfo<OneKeyCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hopattn::test
