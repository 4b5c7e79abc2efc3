// hopattn-tune: times forward-kernel tile configurations that the library does not necessarily ship,
// side by side on the same inputs, to choose src/sm90/fwd/shipped_configs.cuh. A development tool:
//   hopattn-tune [HDIM]     every candidate on the FlashAttention-3 grid shapes at 512, 2k and 8k
// Prints one line per (shape, config, options): median ms over 30 calls after 5 warm-up calls.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "api/problem.hpp"
#include "sm90/fwd/launch.cuh"
#include "sm90/fwd/traits.cuh"

namespace hopattn::sm90 {
namespace {

#define TUNE_CHECK(expr)                                                              \
  do {                                                                                \
    cudaError_t e_ = (expr);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e_));                \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Buffers {
  __nv_bfloat16 *q, *k, *v, *out;
  float* lse;
  std::size_t out_elements;
  // Output of the first configuration timed on these inputs: every other one must agree with it,
  // or its time means nothing.
  std::vector<float> first_out;
};

Buffers make_buffers(int batch, int heads, int seqlen, int d) {
  const std::size_t n = std::size_t(batch) * seqlen * heads * d;
  std::vector<__nv_bfloat16> host(n);
  std::mt19937 gen(std::random_device{}());
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Buffers b{};
  for (__nv_bfloat16** p : {&b.q, &b.k, &b.v}) {
    for (auto& x : host) x = __float2bfloat16(dist(gen));
    TUNE_CHECK(cudaMalloc(p, n * 2));
    TUNE_CHECK(cudaMemcpy(*p, host.data(), n * 2, cudaMemcpyHostToDevice));
  }
  TUNE_CHECK(cudaMalloc(&b.out, n * 2));
  b.out_elements = n;
  TUNE_CHECK(cudaMalloc(&b.lse, std::size_t(batch) * heads * seqlen * 4));
  return b;
}

void free_buffers(Buffers& b) {
  cudaFree(b.q);
  cudaFree(b.k);
  cudaFree(b.v);
  cudaFree(b.out);
  cudaFree(b.lse);
}

template <class Traits>
void time_config(const char* name, Buffers& b, int batch, int heads, int seqlen, int d, bool causal,
                 KernelOptions options) {
  FwdArgs args;
  args.q = make_tensor(b.q, Dtype::kBFloat16, {batch, seqlen, heads, d}, DeviceType::kCuda);
  args.k = make_tensor(b.k, Dtype::kBFloat16, {batch, seqlen, heads, d}, DeviceType::kCuda);
  args.v = make_tensor(b.v, Dtype::kBFloat16, {batch, seqlen, heads, d}, DeviceType::kCuda);
  args.out = make_tensor(b.out, Dtype::kBFloat16, {batch, seqlen, heads, d}, DeviceType::kCuda);
  args.lse = make_tensor(b.lse, Dtype::kFloat32, {batch, heads, seqlen}, DeviceType::kCuda);
  args.causal = causal;
  args.options = options;
  detail::Problem pr;
  Status st = detail::validate_forward(args, &pr);
  if (st.ok()) st = launch_forward<Traits>(args, pr);
  if (!st.ok()) {
    std::printf("%-26s error: %s\n", name, st.message().c_str());
    return;
  }
  cudaEvent_t start, stop;
  TUNE_CHECK(cudaEventCreate(&start));
  TUNE_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 5; ++i) launch_forward<Traits>(args, pr);
  std::vector<float> ms;
  for (int i = 0; i < 30; ++i) {
    TUNE_CHECK(cudaEventRecord(start));
    launch_forward<Traits>(args, pr);
    TUNE_CHECK(cudaEventRecord(stop));
    TUNE_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    TUNE_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  TUNE_CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double flops = 4.0 * batch * heads * double(seqlen) * seqlen * d * (causal ? 0.5 : 1.0);
  std::vector<__nv_bfloat16> out(b.out_elements);
  TUNE_CHECK(cudaMemcpy(out.data(), b.out, out.size() * 2, cudaMemcpyDeviceToHost));
  double max_diff = 0.0;
  if (b.first_out.empty()) {
    for (const __nv_bfloat16& x : out) b.first_out.push_back(__bfloat162float(x));
  } else {
    for (std::size_t i = 0; i < out.size(); ++i)
      max_diff = std::max(max_diff, double(std::fabs(__bfloat162float(out[i]) - b.first_out[i])));
  }
  // Outputs are O(0.1) here; configurations differ only in rounding order, far below 0.05.
  std::printf("d=%3d s=%5d b=%2d causal=%d pp=%d ov=%d ps=%d %-26s %8.3f ms %6.1f TFLOP/s  maxdiff %.1e%s\n", d,
              seqlen, batch, causal, options.pingpong, options.intra_wg_overlap, options.persistent, name, median,
              flops / median / 1e9, max_diff, max_diff > 0.05 || std::isnan(max_diff) ? "  MISMATCH" : "");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

template <int kD, int kN, int kStages, int kWarpgroups = 2>
void time_tile(Buffers& b, int batch, int heads, int seqlen, bool causal, KernelOptions options) {
  const std::string name = "M" + std::to_string(64 * kWarpgroups) + "/N" + std::to_string(kN) + "/stages" +
                           std::to_string(kStages);
  time_config<FwdTraits<kD, __nv_bfloat16, kN, kStages, true, kWarpgroups>>(name.c_str(), b, batch, heads, seqlen, kD,
                                                                            causal, options);
}

template <int kD>
void sweep(int seqlen, bool causal) {
  const int batch = 16384 / seqlen, heads = 2048 / kD;
  Buffers b = make_buffers(batch, heads, seqlen, kD);
  for (int variant = 0; variant < 2; ++variant) {
    KernelOptions o;
    o.persistent = variant == 0;
    if constexpr (kD == 64) {
      time_tile<64, 128, 4>(b, batch, heads, seqlen, causal, o);
      time_tile<64, 192, 4>(b, batch, heads, seqlen, causal, o);
      // 192-row tiles (3 consumer warpgroups at 160 registers), not shipped: 128 keys spill (24 bytes).
      time_tile<64, 128, 4, 3>(b, batch, heads, seqlen, causal, o);
      time_tile<64, 96, 4, 3>(b, batch, heads, seqlen, causal, o);
    } else if constexpr (kD == 128) {
      time_tile<128, 128, 2>(b, batch, heads, seqlen, causal, o);
      time_tile<128, 128, 3>(b, batch, heads, seqlen, causal, o);
      time_tile<128, 176, 2>(b, batch, heads, seqlen, causal, o);  // spills 4 bytes (not shipped)
    } else {
      time_tile<256, 64, 2>(b, batch, heads, seqlen, causal, o);
      time_tile<256, 80, 2>(b, batch, heads, seqlen, causal, o);  // spills 48 bytes, no TMA-store epilogue: slower (not shipped)
    }
  }
  free_buffers(b);
}

}  // namespace
}  // namespace hopattn::sm90

// Optional argument: one head dim (64, 128 or 256) to sweep instead of all three.
int main(int argc, char** argv) {
  using namespace hopattn::sm90;
  const int only = argc > 1 ? std::atoi(argv[1]) : 0;
  for (int seqlen : {512, 2048, 8192}) {
    for (bool causal : {false, true}) {
      if (only == 0 || only == 64) sweep<64>(seqlen, causal);
      if (only == 0 || only == 128) sweep<128>(seqlen, causal);
      if (only == 0 || only == 256) sweep<256>(seqlen, causal);
    }
  }
  return 0;
}
