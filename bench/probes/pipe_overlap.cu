// hopattn-pipe-overlap: which SM pipes run at the same time as warpgroup MMAs on this GPU.
//
// One CTA per SM with three warpgroups: warpgroup 0 issues chains of four m64n192 wgmmas (FP8 SS or
// RS, or BF16 SS) into one accumulator; warpgroups 1 and 2 run a loop of one other instruction on 32
// independent registers per thread (no dependency chain longer than the loop). Each pair is timed
// three ways (wgmma alone, the other instruction alone, both) with CUDA events; "both / sum" near 1
// means the two never overlap, "both / max" near 1 means they overlap fully. The SM cycles each side
// took (CTA 0's warps, alone and together) say which side yields: FMA-pipe streams stall the wgmma,
// ALU instructions (FMNMX, F2FP) slow down beside it. Why it matters: the attention softmax runs
// beside the other warpgroup's GEMMs, so its instruction mix decides how much of it hides
// (docs/perf-notes.md, sessions 6 and 7).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/arch/wgmma_fp8.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::probe {
namespace {

using sm90::advance_descriptor;
using sm90::kmajor_descriptor;
using sm90::smem_address;

constexpr int kN = 192;
constexpr int kSmemBytes = 64 * 1024;
__device__ float g_sink;  // keeps results live; never equal in practice

enum class Gemm { kFp8Ss, kFp8Rs, kBf16Ss };
enum class Other { kEx2, kFfma, kFmul, kFadd, kFmnmx, kHfma2, kImad, kEx2ThreeFfmaOne, kEx2OneFfmaOne, kSoftmaxMix, kF2fp, kFmnmx8Chains };

template <Gemm kGemm>
__device__ void gemm_loop(const std::uint8_t* smem, int iters) {
  float d[kN / 2];
  for (float& x : d) x = 0.0f;
  const std::uint32_t a[4] = {0x38383838u, 0x38383838u, 0x38383838u, 0x38383838u};  // e4m3 1.0
  const std::uint32_t base = smem_address(smem);
  const std::uint64_t desc_a = kmajor_descriptor(base), desc_b = kmajor_descriptor(base + 16384);
  for (int it = 0; it < iters; ++it) {
    sm90::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // 32 bytes further along K per step
      const std::uint64_t a_k = advance_descriptor(desc_a, 32 * k), b_k = advance_descriptor(desc_b, 32 * k);
      if constexpr (kGemm == Gemm::kFp8Ss) sm90::wgmma_ss_e4m3<kN>(d, a_k, b_k, 1);
      if constexpr (kGemm == Gemm::kFp8Rs) sm90::wgmma_rs_e4m3<kN>(d, a, b_k, 1);
      if constexpr (kGemm == Gemm::kBf16Ss) sm90::wgmma_m64n192k16_ss_bf16(d, a_k, b_k, 1);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
  }
  float sum = 0.0f;
  for (float x : d) sum += x;
  if (sum == 12345.0f) g_sink = sum;
}

template <Other kOther>
__device__ void other_loop(int iters) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = -0.001f * static_cast<float>(threadIdx.x + i);
  const float y = -0.5f + 0.001f * static_cast<float>(threadIdx.x);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      std::uint32_t& bits = reinterpret_cast<std::uint32_t&>(x[i]);
      if constexpr (kOther == Other::kEx2) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
      if constexpr (kOther == Other::kFfma) asm volatile("fma.rn.f32 %0, %0, %1, %1;" : "+f"(x[i]) : "f"(y));
      if constexpr (kOther == Other::kFmul) asm volatile("mul.f32 %0, %0, %1;" : "+f"(x[i]) : "f"(y));
      if constexpr (kOther == Other::kFadd) asm volatile("add.f32 %0, %0, %1;" : "+f"(x[i]) : "f"(y));
      if constexpr (kOther == Other::kFmnmx) asm volatile("max.f32 %0, %0, %1;" : "+f"(x[i]) : "f"(y));
      if constexpr (kOther == Other::kHfma2) asm volatile("fma.rn.f16x2 %0, %0, %1, %1;" : "+r"(bits) : "r"(0x3c003c00u));
      if constexpr (kOther == Other::kImad) asm volatile("mad.lo.u32 %0, %0, %1, %1;" : "+r"(bits) : "r"(12345u));
      if constexpr (kOther == Other::kEx2OneFfmaOne) {
        if (i % 2 == 0) asm volatile("fma.rn.f32 %0, %0, %1, %1;" : "+f"(x[i]) : "f"(y));
        else asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
      }
      // The softmax's per-score chain: FFMA (scale, bias), MUFU.EX2, FADD into a row sum.
      if constexpr (kOther == Other::kSoftmaxMix) {
        asm volatile("fma.rn.f32 %0, %0, %1, %1;" : "+f"(x[i]) : "f"(y));
        asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
        asm volatile("add.f32 %0, %0, %1;" : "+f"(x[(i + 16) % 32]) : "f"(x[i]));
      }
      // The max reduction's shape: 8 dependent chains (4 per row, 2 rows), not 32.
      if constexpr (kOther == Other::kFmnmx8Chains) asm volatile("max.f32 %0, %0, %1;" : "+f"(x[i % 8]) : "f"(x[i]));
      if constexpr (kOther == Other::kF2fp) {
        std::uint16_t packed;
        asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(x[i]), "f"(x[(i + 1) % 32]));
        bits ^= packed;
      }
      if constexpr (kOther == Other::kEx2ThreeFfmaOne) {
        if (i % 4 == 0) asm volatile("fma.rn.f32 %0, %0, %1, %1;" : "+f"(x[i]) : "f"(y));
        else asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
      }
    }
  }
  float sum = 0.0f;
  for (float v : x) sum += v;
  if (sum == 12345.0f) g_sink = sum;
}

// Per warp of CTA 0: SM clock cycles from the start to the end of its loop (0: no loop), which
// side an overlap slows down: the wgmma warpgroup (the other pipe took its cycles) or the others.
__device__ long long g_cycles[12];

// mode 1: the wgmma warpgroup only; 2: the other two only; 3: all three.
template <Gemm kGemm, Other kOther>
__global__ void __launch_bounds__(384, 1) pipe_overlap_kernel(int mode, int gemm_iters, int other_iters) {
  extern __shared__ __align__(1024) std::uint8_t smem[];
  // e4m3 0.5 / bf16 ~2.8e-10 everywhere: finite operands, so the MMAs do real (not NaN) work.
  for (int i = threadIdx.x; i < kSmemBytes / 4; i += blockDim.x) reinterpret_cast<std::uint32_t*>(smem)[i] = 0x30303030u;
  __syncthreads();
  const long long start = clock64();
  const bool is_gemm_warp = threadIdx.x < 128;
  const bool ran = is_gemm_warp ? (mode & 1) != 0 : (mode & 2) != 0;
  if (ran && is_gemm_warp) gemm_loop<kGemm>(smem, gemm_iters);
  if (ran && !is_gemm_warp) other_loop<kOther>(other_iters);
  if (blockIdx.x == 0 && threadIdx.x % 32 == 0) g_cycles[threadIdx.x / 32] = ran ? clock64() - start : 0;
}

template <Gemm kGemm, Other kOther>
bool run(const char* name, int gemm_iters, int other_iters, int sms) {
  auto kernel = pipe_overlap_kernel<kGemm, kOther>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess) return false;
  float ms[4] = {};
  double gemm_kcycles[4] = {}, other_kcycles[4] = {};  // per mode, averaged over the warps of CTA 0
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int mode = 1; mode <= 3; ++mode) {
    kernel<<<sms, 384, kSmemBytes>>>(mode, gemm_iters, other_iters);  // warm-up
    cudaEventRecord(start);
    constexpr int kRepeats = 5;
    for (int r = 0; r < kRepeats; ++r) kernel<<<sms, 384, kSmemBytes>>>(mode, gemm_iters, other_iters);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms[mode], start, stop);
    ms[mode] /= kRepeats;
    long long cycles[12];
    cudaMemcpyFromSymbol(cycles, g_cycles, sizeof(cycles));
    for (int w = 0; w < 12; ++w) (w < 4 ? gemm_kcycles[mode] : other_kcycles[mode]) += cycles[w] / (w < 4 ? 4e3 : 8e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", name, cudaGetErrorString(e));
    return false;
  }
  const float longer = ms[1] > ms[2] ? ms[1] : ms[2];
  std::printf("%-24s kcycles: wgmma alone %6.0f, together %6.0f; other alone %6.0f, together %6.0f\n", name,
              gemm_kcycles[1], gemm_kcycles[3], other_kcycles[2], other_kcycles[3]);
  std::printf("%-24s wgmma alone %7.3f ms  other alone %7.3f ms  both %7.3f ms  both/max %.2f  both/sum %.2f\n", name,
              ms[1], ms[2], ms[3], ms[3] / longer, ms[3] / (ms[1] + ms[2]));
  return true;
}

}  // namespace
}  // namespace hopattn::probe

int main() {
  using namespace hopattn::probe;
  int device = 0, major = 0, sms = 0;
  cudaGetDevice(&device);
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major != 9) {
    std::printf("hopattn-pipe-overlap needs a Hopper GPU (sm_90); none found.\n");
    return 0;
  }
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  // Loop counts give each side alone a few milliseconds: 4 x m64n192k32 FP8 = 1.6M MACs per warpgroup
  // per iteration, 64 (2 warpgroups x 32) instructions per thread pair per "other" iteration.
  bool ok = true;
  ok &= run<Gemm::kFp8Ss, Other::kEx2>("fp8 SS + ex2", 20000, 15000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kEx2>("fp8 RS + ex2", 20000, 15000, sms);
  ok &= run<Gemm::kBf16Ss, Other::kEx2>("bf16 SS + ex2", 10000, 15000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kFfma>("fp8 RS + ffma", 20000, 120000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kFmul>("fp8 RS + fmul", 20000, 120000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kFadd>("fp8 RS + fadd", 20000, 120000, sms);
  ok &= run<Gemm::kBf16Ss, Other::kFfma>("bf16 SS + ffma", 10000, 120000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kFmnmx>("fp8 RS + fmnmx", 20000, 120000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kHfma2>("fp8 RS + hfma2", 20000, 120000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kImad>("fp8 RS + imad", 20000, 60000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kEx2ThreeFfmaOne>("fp8 RS + 3 ex2 : 1 ffma", 20000, 15000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kEx2OneFfmaOne>("fp8 RS + 1 ex2 : 1 ffma", 20000, 15000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kSoftmaxMix>("fp8 RS + ffma,ex2,fadd", 20000, 15000, sms);
  ok &= run<Gemm::kFp8Ss, Other::kSoftmaxMix>("fp8 SS + ffma,ex2,fadd", 20000, 15000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kF2fp>("fp8 RS + f2fp e4m3x2", 20000, 60000, sms);
  ok &= run<Gemm::kFp8Rs, Other::kFmnmx8Chains>("fp8 RS + fmnmx 8 chains", 20000, 60000, sms);
  return ok ? 0 : 1;
}
