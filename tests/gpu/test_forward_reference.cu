// The float32 GPU reference, checked before anything is measured against it: on cases whose answer is
// known exactly, and against the CPU reference backend (float64) on small shapes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/host_tensor.hpp"
#include "gpu/gpu_reference.cuh"
#include "gpu/gpu_test_util.cuh"
#include "gpu/small_case.cuh"

namespace hopattn::test {
namespace {

// A host copy of a dense device tensor.
HostTensor to_host(const DeviceBuffer& buffer, Dtype dtype, std::vector<std::int64_t> shape) {
  HostTensor host(dtype, std::move(shape));
  HOPATTN_CUDA_CHECK(cudaMemcpy(host.data(), buffer.data(), host.numel() * dtype_size(dtype), cudaMemcpyDeviceToHost));
  return host;
}

// A case's inputs on the device (contiguous), and the reference's outputs.
struct SmallRun {
  SmallCase c;
  DeviceBuffer q, k, v, out, naive, lse;

  explicit SmallRun(const SmallCase& sc, std::uint64_t seed) : c(sc) {
    const std::size_t e = dtype_size(c.dtype);
    q = DeviceBuffer(c.q_numel() * e);
    k = DeviceBuffer(c.kv_numel() * e);
    v = DeviceBuffer(c.kv_numel() * e);
    out = DeviceBuffer(c.q_numel() * sizeof(float));
    naive = DeviceBuffer(c.q_numel() * sizeof(float));
    lse = DeviceBuffer(c.lse_numel() * sizeof(float));
    fill_normal(q.data(), c.dtype, c.q_numel(), splitmix64(seed ^ 1), c.amplitude);
    fill_normal(k.data(), c.dtype, c.kv_numel(), splitmix64(seed ^ 2));
    fill_normal(v.data(), c.dtype, c.kv_numel(), splitmix64(seed ^ 3));
    poison_nan(out.data(), Dtype::kFloat32, c.q_numel());
    poison_nan(naive.data(), Dtype::kFloat32, c.q_numel());
    poison_nan(lse.data(), Dtype::kFloat32, c.lse_numel());

    GpuReferenceArgs a;
    set_inputs(a, c, q.data(), k.data(), v.data());
    a.out = out.as<float>(), a.out_naive = naive.as<float>(), a.lse = lse.as<float>();
    const Status s = gpu_reference_forward(a);
    if (!s.ok()) throw std::runtime_error(s.message());
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

class GpuReference : public HopperTest {};

// With one key the softmax is exactly 1 on it: out is that key's value row bit for bit (naive too),
// and the LSE is the scaled score itself. Causal with seqlen_q 5 > seqlen_k 1 leaves rows 0-3 empty.
TEST_F(GpuReference, SingleKeyGivesItsValueRow) {
  for (bool causal : {false, true}) {
    SmallCase sc{Dtype::kBFloat16, 2, 4, 2, 5, 1, 64};
    sc.causal = causal;
    SmallRun run(sc, run_seed());
    const HostTensor q = to_host(run.q, sc.dtype, {sc.batch, sc.seqlen_q, sc.heads_q, sc.head_dim});
    const HostTensor k = to_host(run.k, sc.dtype, {sc.batch, sc.seqlen_k, sc.heads_kv, sc.head_dim});
    const HostTensor v = to_host(run.v, sc.dtype, {sc.batch, sc.seqlen_k, sc.heads_kv, sc.head_dim});
    const auto out = run.out.to_host<float>(), naive = run.naive.to_host<float>(), lse = run.lse.to_host<float>();
    const int d = sc.head_dim;
    for (int b = 0; b < sc.batch; ++b)
      for (int i = 0; i < sc.seqlen_q; ++i)
        for (int h = 0; h < sc.heads_q; ++h) {
          const int hk = h / (sc.heads_q / sc.heads_kv);
          const bool empty = causal && i < sc.seqlen_q - 1;
          const std::int64_t row = ((std::int64_t(b) * sc.seqlen_q + i) * sc.heads_q + h) * d;
          const std::int64_t kv_row = (std::int64_t(b) * sc.heads_kv + hk) * d;
          double dot = 0.0;
          for (int c = 0; c < d; ++c) {
            const float expected = empty ? 0.0f : static_cast<float>(v.get(kv_row + c));
            ASSERT_EQ(out[row + c], expected) << "b " << b << " i " << i << " h " << h << " c " << c;
            ASSERT_EQ(naive[row + c], expected) << "b " << b << " i " << i << " h " << h << " c " << c;
            dot += q.get(row + c) * k.get(kv_row + c);
          }
          const float l = lse[(std::int64_t(b) * sc.heads_q + h) * sc.seqlen_q + i];
          if (empty) {
            EXPECT_TRUE(std::isinf(l) && l < 0) << "lse " << l << " at b " << b << " i " << i << " h " << h;
          } else {
            const double s = dot * sc.resolved_scale();
            EXPECT_NEAR(l, s, 1e-5 * (1.0 + std::fabs(s))) << "b " << b << " i " << i << " h " << h;
          }
        }
  }
}

class GpuReferenceVsCpu : public HopperTest, public ::testing::WithParamInterface<SmallCase> {};

// The float32 GPU reference matches the CPU float64 backend (whose output is rounded once to the input
// dtype), and its naive output is representable in the input dtype and within the P and output
// rounding of the exact one.
TEST_P(GpuReferenceVsCpu, MatchesFloat64) {
  const SmallCase& sc = GetParam();
  const std::uint64_t seed = run_seed();
  SmallRun run(sc, seed);
  const HostTensor q = to_host(run.q, sc.dtype, {sc.batch, sc.seqlen_q, sc.heads_q, sc.head_dim});
  const HostTensor k = to_host(run.k, sc.dtype, {sc.batch, sc.seqlen_k, sc.heads_kv, sc.head_dim});
  const HostTensor v = to_host(run.v, sc.dtype, {sc.batch, sc.seqlen_k, sc.heads_kv, sc.head_dim});
  HostTensor cpu_out(sc.dtype, {sc.batch, sc.seqlen_q, sc.heads_q, sc.head_dim});
  HostTensor cpu_lse(Dtype::kFloat32, {sc.batch, sc.heads_q, sc.seqlen_q});
  cpu_out.poison();
  cpu_lse.poison();
  FwdArgs args;
  args.q = q.tensor(), args.k = k.tensor(), args.v = v.tensor(), args.out = cpu_out.tensor();
  args.lse = cpu_lse.tensor();
  if (sc.scale > 0.0f) args.softmax_scale = sc.scale;
  args.causal = sc.causal;
  args.window_left = sc.window_left;
  args.window_right = sc.window_right;
  args.softcap = sc.softcap;
  const Status status = forward(args);
  if (status.code() == StatusCode::kUnsupported) GTEST_SKIP() << "CPU reference backend: " << status.message();
  ASSERT_TRUE(status.ok()) << status.message();

  const auto out = run.out.to_host<float>(), naive = run.naive.to_host<float>(), lse = run.lse.to_host<float>();
  float max_abs_v = 0.0f;
  for (std::int64_t i = 0; i < sc.kv_numel(); ++i) max_abs_v = std::fmax(max_abs_v, std::fabs(float(v.get(i))));
  const double u = unit_roundoff(sc.dtype);
  int reported = 0;
  for (std::int64_t i = 0; i < sc.q_numel() && reported < 10; ++i) {
    const float cpu = static_cast<float>(cpu_out.get(i));
    const bool bad_exact = !(std::fabs(cpu - out[i]) <= u * std::fabs(out[i]) + 2e-5);
    const bool bad_naive = !(reference::round_to_dtype(naive[i], sc.dtype) == naive[i]) ||
                           !(std::fabs(naive[i] - out[i]) <= (2 * u + u * u) * max_abs_v + 2e-5);
    if (bad_exact || bad_naive) {
      ADD_FAILURE() << "element " << i << ": cpu " << cpu << " gpu " << out[i] << " naive " << naive[i]
                    << " (seed " << seed << ")";
      ++reported;
    }
  }
  for (std::int64_t i = 0; i < sc.lse_numel() && reported < 10; ++i) {
    const double cpu = cpu_lse.get(i);
    const bool both_empty = std::isinf(cpu) && cpu < 0 && cpu == lse[i];
    if (!both_empty && !(std::fabs(cpu - lse[i]) <= 5e-5 + 2e-6 * std::fabs(cpu))) {
      ADD_FAILURE() << "lse row " << i << ": cpu " << cpu << " gpu " << lse[i] << " (seed " << seed << ")";
      ++reported;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    SmallShapes, GpuReferenceVsCpu,
    ::testing::Values(
        SmallCase{Dtype::kBFloat16, 2, 4, 2, 37, 53, 64},
        with({Dtype::kFloat16, 1, 3, 1, 53, 37, 128}, true, -1, -1, 0.0f, 0.0f, 1.0f),   // empty rows
        with({Dtype::kBFloat16, 1, 2, 2, 1, 300, 256}, true, -1, -1, 0.0f, 0.0f, 2.0f),  // decode row
        with({Dtype::kFloat16, 2, 2, 1, 40, 40, 64}, false, 8, 3, 0.0f, 0.0f, 1.0f),     // local window
        with({Dtype::kBFloat16, 1, 4, 4, 30, 70, 128}, false, -1, -1, 5.0f, 0.3f, 3.0f), // softcap
        with({Dtype::kBFloat16, 1, 8, 1, 65, 129, 64}, true, 20, -1, 0.0f, 0.0f, 1.0f),  // MQA, causal window
        with({Dtype::kFloat16, 3, 2, 2, 17, 5, 64}, false, 1, 0, 0.0f, 0.05f, 1.0f),     // window, sq > sk
        with({Dtype::kFloat32, 2, 6, 3, 45, 90, 128}, true, -1, -1, 0.0f, 0.0f, 2.0f),   // tight: no rounding
        with({Dtype::kFloat32, 1, 2, 1, 33, 33, 64}, false, 5, 7, 20.0f, 0.0f, 3.0f)));

}  // namespace
}  // namespace hopattn::test
