// One key per sequence, bf16 and FP8: every tile is a single short K/V block, so the producer races
// through Q tiles and K/V stages as fast as the pipeline lets it, the strongest test of the buffer
// hand-overs.
// With one key the answer is exact and known on the host: out is v's row, and each row's LSE is
// its own score q.k * scale. A wrong LSE with a right out means a score was computed from the
// wrong data; the failure message says whose data it matches.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

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

// q, k or v drawn on the host from N(0, 1) in `dtype`: the bytes to upload and their values.
struct HostInput {
  std::vector<std::uint8_t> bytes;
  std::vector<float> values;
};

HostInput random_input(Dtype dtype, std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  HostInput h;
  h.bytes.resize(n * dtype_size(dtype));
  h.values.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == Dtype::kBFloat16) {
      const __nv_bfloat16 x = __float2bfloat16_rn(normal(rng));
      std::memcpy(&h.bytes[2 * i], &x, 2);
      h.values[i] = __bfloat162float(x);
    } else {
      const __nv_fp8_e4m3 x(normal(rng));
      h.bytes[i] = x.__x;
      h.values[i] = static_cast<float>(x);
    }
  }
  return h;
}

std::string describe_row(int b, int h, int i) {
  std::ostringstream s;
  s << "(batch " << b << ", head " << h << ", row " << i << ")";
  return s.str();
}

TEST_P(ForwardOneKey, EveryRowGetsItsOwnScoreAndTheKeysValue) {
  const OneKeyCase& param = GetParam();
  const std::uint64_t seed = run_seed();
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::size_t q_elems = std::size_t(kBatch) * kSeqlenQ * kHeadsQ * kHeadDim;
  const std::size_t kv_elems = std::size_t(kBatch) * kHeadsKv * kHeadDim;
  const Dtype in = param.dtype;
  const HostInput q = random_input(in, q_elems, rng), k = random_input(in, kv_elems, rng),
                  v = random_input(in, kv_elems, rng);

  // q[b, i, h, :] sits at q_offset(b, i, h) in either layout.
  const std::int64_t q_stride[4] = {std::int64_t(kSeqlenQ) * kHeadsQ * kHeadDim,
                                    param.head_major ? kHeadDim : std::int64_t(kHeadsQ) * kHeadDim,
                                    param.head_major ? std::int64_t(kSeqlenQ) * kHeadDim : kHeadDim, 1};
  const auto q_offset = [&](int b, int i, int h) { return b * q_stride[0] + i * q_stride[1] + h * q_stride[2]; };
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  std::vector<double> want_lse(std::size_t(kBatch) * kHeadsQ * kSeqlenQ);
  // The score of q row (b, h, i) against the key of (kv_b, kv_h), and sum_d |q_d k_d| * scale: the
  // FP8 S GEMM (QGMMA) adds its products with ~14 mantissa bits, an error relative to that sum (the
  // rule of test_fp8_forward.cu: 2e-3 + sum / 512). bf16 scores are exact in float32: 1e-3.
  const auto score = [&](int b, int h, int i, int kv_b, int kv_h, double* magnitude = nullptr) {
    double dot = 0.0, abs_dot = 0.0;
    for (int d = 0; d < kHeadDim; ++d) {
      const double product =
          double(q.values[q_offset(b, i, h) + d]) * k.values[(std::size_t(kv_b) * kHeadsKv + kv_h) * kHeadDim + d];
      dot += product;
      abs_dot += std::fabs(product);
    }
    if (magnitude) *magnitude = abs_dot * scale;
    return dot * scale;
  };
  std::vector<double> tolerance(want_lse.size());
  for (int b = 0; b < kBatch; ++b)
    for (int h = 0; h < kHeadsQ; ++h)
      for (int i = 0; i < kSeqlenQ; ++i) {
        const std::size_t r = (std::size_t(b) * kHeadsQ + h) * kSeqlenQ + i;
        double magnitude = 0.0;
        want_lse[r] = score(b, h, i, b, h / (kHeadsQ / kHeadsKv), &magnitude);
        tolerance[r] = in == Dtype::kBFloat16 ? 1e-3 : 2e-3 + magnitude / 512;
      }

  DeviceBuffer q_dev(q.bytes.size()), k_dev(k.bytes.size()), v_dev(v.bytes.size()), out_dev(q_elems * 2),
      lse_dev(want_lse.size() * 4);
  HOPATTN_CUDA_CHECK(cudaMemcpy(q_dev.data(), q.bytes.data(), q.bytes.size(), cudaMemcpyHostToDevice));
  HOPATTN_CUDA_CHECK(cudaMemcpy(k_dev.data(), k.bytes.data(), k.bytes.size(), cudaMemcpyHostToDevice));
  HOPATTN_CUDA_CHECK(cudaMemcpy(v_dev.data(), v.bytes.data(), v.bytes.size(), cudaMemcpyHostToDevice));
  FwdArgs args = dense_cuda_args({kBatch, kHeadsQ, kHeadsKv, kSeqlenQ, 1, kHeadDim}, in, Dtype::kBFloat16,
                                 q_dev.data(), k_dev.data(), v_dev.data(), out_dev.data(), lse_dev.data());
  args.q = strided_tensor(q_dev.data(), in, {kBatch, kSeqlenQ, kHeadsQ, kHeadDim}, q_stride);
  args.out = strided_tensor(out_dev.data(), Dtype::kBFloat16, {kBatch, kSeqlenQ, kHeadsQ, kHeadDim}, q_stride);
  args.options = param.options;

  for (int launch = 0; launch < kLaunches; ++launch) {
    poison_nan(out_dev.data(), Dtype::kBFloat16, std::int64_t(q_elems));
    poison_nan(lse_dev.data(), Dtype::kFloat32, std::int64_t(want_lse.size()));
    const Status status = forward(args);
    ASSERT_TRUE(status.ok()) << status.message();
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> lse = lse_dev.to_host<float>();
    const std::vector<std::uint16_t> out = out_dev.to_host<std::uint16_t>();

    // out[b, i, h, :] must be v[b, 0, h / ratio, :] exactly: one key gets probability 1 (the FP8
    // kernel's P of 256 and its 1/256 are exact too), and v's values are exact in bf16.
    std::int64_t wrong_out = 0;
    for (int b = 0; b < kBatch; ++b)
      for (int i = 0; i < kSeqlenQ; ++i)
        for (int h = 0; h < kHeadsQ; ++h) {
          const float* want = v.values.data() + (std::size_t(b) * kHeadsKv + h / (kHeadsQ / kHeadsKv)) * kHeadDim;
          for (int d = 0; d < kHeadDim; ++d) {
            const std::uint32_t bits = std::uint32_t(out[q_offset(b, i, h) + d]) << 16;
            float got;
            std::memcpy(&got, &bits, 4);
            wrong_out += got != want[d];
          }
        }
    EXPECT_EQ(wrong_out, 0) << "launch " << launch << ": out elements that are not v's (seed " << seed << ")";

    std::int64_t wrong_lse = 0;
    std::ostringstream first;
    for (std::size_t r = 0; r < want_lse.size(); ++r) {
      if (std::fabs(lse[r] - want_lse[r]) <= tolerance[r]) continue;  // NaN fails here too
      if (++wrong_lse > 3) continue;
      const int i = int(r % kSeqlenQ), h = int(r / kSeqlenQ % kHeadsQ), b = int(r / kSeqlenQ / kHeadsQ);
      first << "\n  " << describe_row(b, h, i) << ": lse " << lse[r] << ", want " << want_lse[r];
      for (std::size_t other = 0; other < want_lse.size(); ++other) {
        if (other != r && std::fabs(lse[r] - want_lse[other]) <= tolerance[other] / 4) {
          first << "; another row's: " << describe_row(int(other / kSeqlenQ / kHeadsQ),
                                                       int(other / kSeqlenQ % kHeadsQ), int(other % kSeqlenQ));
          break;
        }
      }
      for (int kv_b = 0; kv_b < kBatch; ++kv_b)
        for (int kv_h = 0; kv_h < kHeadsKv; ++kv_h)
          if (std::fabs(lse[r] - score(b, h, i, kv_b, kv_h)) <= tolerance[r] / 4)
            first << "; its q with the key of (batch " << kv_b << ", kv head " << kv_h << ")";
    }
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
