// The float32 GPU reference backward, checked before anything is measured against it: against the CPU
// reference backend (float64) on small shapes, together with what its naive and magnitude outputs
// claim to be.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/host_tensor.hpp"
#include "gpu/backward_case.cuh"
#include "gpu/gpu_reference_backward.cuh"
#include "gpu/gpu_test_util.cuh"
#include "gpu/small_case.cuh"

namespace hopattn::test {
namespace {

// A float32 host copy of a dense device tensor of `dtype` (exact: every input dtype widens to float32),
// so that the CPU backend computes in float64 and rounds only its result, to float32.
HostTensor host_float32(const DeviceBuffer& buffer, Dtype dtype, std::vector<std::int64_t> shape) {
  HostTensor raw(dtype, shape), wide(Dtype::kFloat32, shape);
  HOPATTN_CUDA_CHECK(cudaMemcpy(raw.data(), buffer.data(), raw.numel() * dtype_size(dtype), cudaMemcpyDeviceToHost));
  for (std::int64_t i = 0; i < raw.numel(); ++i) wide.set(i, raw.get(i));
  return wide;
}

class GpuReferenceBackwardVsCpu : public HopperTest, public ::testing::WithParamInterface<SmallCase> {};

// Per element of each gradient, with floor = 2^-16 max magnitude (check_gradient's floor):
//   |exact - cpu| <= floor                      the float32 reference is within the floor of float64;
//   naive is representable in the input dtype, and
//   |naive - cpu| <= u (|cpu| + 4 magnitude) + floor, the rounding it claims: its out is within
//                                                2u sum_j P_ij |v_j| of the exact one, so D_i within
//                                                2u |D|_i, dS within u |dS| + 2u P |D| slope <= 3u |dS|_abs,
//                                                and the rounded gradient within u |g| + 3u (1 + u)^2
//                                                magnitude;
//   magnitude + floor >= |cpu|                   a sum of |terms| is at least the sum's size.
TEST_P(GpuReferenceBackwardVsCpu, MatchesFloat64) {
  const SmallCase& sc = GetParam();
  const std::uint64_t seed = run_seed();
  const std::vector<std::int64_t> q_shape = {sc.batch, sc.seqlen_q, sc.heads_q, sc.head_dim};
  const std::vector<std::int64_t> kv_shape = {sc.batch, sc.seqlen_k, sc.heads_kv, sc.head_dim};
  const std::int64_t nq = sc.q_numel(), nkv = sc.kv_numel();
  const std::size_t e = dtype_size(sc.dtype);
  DeviceBuffer q(nq * e), k(nkv * e), v(nkv * e), dout(nq * e);
  fill_normal(q.data(), sc.dtype, nq, splitmix64(seed ^ 1), sc.amplitude);
  fill_normal(k.data(), sc.dtype, nkv, splitmix64(seed ^ 2));
  fill_normal(v.data(), sc.dtype, nkv, splitmix64(seed ^ 3));
  fill_normal(dout.data(), sc.dtype, nq, splitmix64(seed ^ 4));
  const float scale = sc.resolved_scale();

  ReferenceGradient dq(nq), dk(nkv), dv(nkv);
  GpuReferenceBackwardArgs a;
  set_inputs(a, sc, q.data(), k.data(), v.data());
  a.dout = make_tensor(dout.data(), sc.dtype, {sc.batch, sc.seqlen_q, sc.heads_q, sc.head_dim}, DeviceType::kCuda);
  a.dq = dq.buffers(), a.dk = dk.buffers(), a.dv = dv.buffers();
  const Status gpu = gpu_reference_backward(a);
  ASSERT_TRUE(gpu.ok()) << gpu.message();
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());

  const HostTensor qh = host_float32(q, sc.dtype, q_shape), kh = host_float32(k, sc.dtype, kv_shape),
                   vh = host_float32(v, sc.dtype, kv_shape), douth = host_float32(dout, sc.dtype, q_shape);
  HostTensor out(Dtype::kFloat32, q_shape), lse(Dtype::kFloat32, {sc.batch, sc.heads_q, sc.seqlen_q});
  HostTensor dq_cpu(Dtype::kFloat32, q_shape), dk_cpu(Dtype::kFloat32, kv_shape), dv_cpu(Dtype::kFloat32, kv_shape);
  for (HostTensor* t : {&dq_cpu, &dk_cpu, &dv_cpu}) t->poison();
  BwdArgs args;  // out and lse are validated but not read: the CPU backend recomputes P from q and k
  args.q = qh.tensor(), args.k = kh.tensor(), args.v = vh.tensor(), args.out = out.tensor();
  args.dout = douth.tensor(), args.lse = lse.tensor();
  args.dq = dq_cpu.tensor(), args.dk = dk_cpu.tensor(), args.dv = dv_cpu.tensor();
  args.softmax_scale = scale;
  args.causal = sc.causal;
  args.window_left = sc.window_left;
  args.window_right = sc.window_right;
  args.softcap = sc.softcap;
  const Status cpu = backward(args);
  ASSERT_TRUE(cpu.ok()) << cpu.message();

  const double u = unit_roundoff(sc.dtype);
  const auto compare = [&](const char* name, const ReferenceGradient& g, const HostTensor& want) {
    const std::vector<float> exact = g.exact.to_host<float>(), naive = g.naive.to_host<float>(),
                             magnitude = g.magnitude.to_host<float>();
    float max_magnitude = 0.0f;
    for (float m : magnitude) max_magnitude = std::fmax(max_magnitude, m);
    const double floor = std::ldexp(max_magnitude, -16);
    int reported = 0;
    for (std::int64_t i = 0; i < want.numel() && reported < 10; ++i) {
      const double c = want.get(i);
      const bool bad_exact = !(std::fabs(exact[i] - c) <= floor);
      const bool bad_naive = !(reference::round_to_dtype(naive[i], sc.dtype) == naive[i]) ||
                             !(std::fabs(naive[i] - c) <= u * (std::fabs(c) + 4.0 * magnitude[i]) + floor);
      const bool bad_magnitude = !(magnitude[i] + floor >= std::fabs(c));
      if (bad_exact || bad_naive || bad_magnitude) {
        ADD_FAILURE() << name << " element " << i << ": cpu " << c << " exact " << exact[i] << " naive " << naive[i]
                      << " magnitude " << magnitude[i] << " floor " << floor << " (HOPATTN_TEST_SEED=" << seed << ")";
        ++reported;
      }
    }
  };
  compare("dq", dq, dq_cpu);
  compare("dk", dk, dk_cpu);
  compare("dv", dv, dv_cpu);
}

INSTANTIATE_TEST_SUITE_P(
    SmallShapes, GpuReferenceBackwardVsCpu,
    ::testing::Values(
        SmallCase{Dtype::kBFloat16, 2, 4, 2, 37, 53, 64},
        with({Dtype::kFloat16, 1, 3, 1, 53, 37, 128}, true, -1, -1, 0.0f, 0.0f, 1.0f),    // empty rows
        with({Dtype::kBFloat16, 1, 2, 2, 1, 300, 64}, true, -1, -1, 0.0f, 0.0f, 2.0f),    // decode row
        with({Dtype::kFloat16, 2, 2, 1, 40, 40, 64}, false, 8, 3, 0.0f, 0.0f, 1.0f),      // local window
        with({Dtype::kBFloat16, 1, 4, 4, 30, 70, 128}, false, -1, -1, 5.0f, 0.3f, 3.0f),  // tight softcap
        with({Dtype::kBFloat16, 1, 2, 2, 20, 40, 64}, false, -1, -1, 30.0f, 0.0f, 8.0f),  // tanh bends +-20
        with({Dtype::kBFloat16, 1, 8, 1, 65, 129, 64}, true, 20, -1, 0.0f, 0.0f, 1.0f),   // MQA, causal window
        with({Dtype::kFloat16, 3, 2, 2, 17, 5, 64}, false, 1, 0, 0.0f, 0.05f, 1.0f),      // window, sq > sk
        with({Dtype::kFloat16, 1, 2, 1, 30, 60, 64}, false, 10, -1, 0.0f, 0.0f, 1.0f),    // keys nobody sees
        SmallCase{Dtype::kBFloat16, 2, 4, 2, 17, 1, 64},                                  // one key: dq = dk = 0
        with({Dtype::kFloat32, 2, 6, 3, 45, 90, 128}, true, -1, -1, 0.0f, 0.0f, 2.0f),    // tight: no rounding
        with({Dtype::kFloat32, 1, 2, 1, 33, 33, 64}, false, 5, 7, 20.0f, 0.0f, 3.0f)));

}  // namespace
}  // namespace hopattn::test
