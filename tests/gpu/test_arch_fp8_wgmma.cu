// One warpgroup, one tile, FP8: the SS e4m3 wgmma with both operands K-major (the S = Q K^T form,
// stepping descriptors 32 bytes through a 128-byte column block), and the O = P V form end to end: P
// from S-accumulator registers packed into the 8-bit A fragment in permuted key order, V transposed
// in shared memory by the kernel's own transposer (permuting keys identically), RS e4m3 wgmma.
// Tolerance: Hopper's FP8 MMA aligns the products of one instruction to the largest exponent and keeps
// only ~13-14 mantissa bits of the running sum (truncating; reported by DeepSeek-V3 and FlashAttention-3),
// and the k = 128 here takes four such instructions into the f32 accumulator. The first H200 run
// measured errors of 5.0e-4 of the sum of |products| (just over 2^-11), so results are checked to 2^-9
// of that sum (kQgmmaTolerance, 4x the measured error). A layout error still fails: it moves results by
// whole products, each about 1/k of the sum of |products| on average, i.e. ~4x this bound on its own
// and far more summed over a row of wrong pairings.
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "gpu_test_util.cuh"
#include "sm90/arch/convert_fp8.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/arch/wgmma_fp8.cuh"
#include "sm90/fwd_fp8/fp8_layout.hpp"
#include "sm90/fwd_fp8/producer.cuh"
#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {
namespace {

constexpr int kM = 64, kK = 128, kN = 128;
constexpr double kQgmmaTolerance = 0x1p-9;  // of the sum of |products|; see the header comment
using Tile128 = SwizzledTile<128, 128, 1>;  // A (64 rows used), B, V and V^T alike: 128 x 128 bytes

__device__ float decode(std::uint8_t code) {
  __nv_fp8_e4m3 x;
  x.__x = code;
  return static_cast<float>(x);
}

// a: (kM, kK) codes; b: (kN, kK) codes (B^T); d: (kM, kN).
__global__ void ss_e4m3_kernel(const std::uint8_t* a, const std::uint8_t* b, float* d) {
  __shared__ alignas(1024) std::uint8_t smem_a[Tile128::kBytes];
  __shared__ alignas(1024) std::uint8_t smem_b[Tile128::kBytes];
  for (int i = threadIdx.x; i < kM * kK; i += blockDim.x) smem_a[Tile128::offset(i / kK, i % kK)] = a[i];
  for (int i = threadIdx.x; i < kN * kK; i += blockDim.x) smem_b[Tile128::offset(i / kK, i % kK)] = b[i];
  fence_proxy_async_shared();
  __syncthreads();
  float acc[kN / 2];
  wgmma_fence();
  for (int step = 0; step < kK / 32; ++step) {
    wgmma_ss_e4m3<kN>(acc, kmajor_descriptor(smem_address(smem_a) + step * 32),
                      kmajor_descriptor(smem_address(smem_b) + step * 32), step > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  pin_registers(acc);
  for (int i = 0; i < kN / 2; ++i) d[accumulator_row(threadIdx.x, i) * kN + accumulator_col(threadIdx.x, i)] = acc[i];
}

// p: (kM, keys = kK) codes, read into the S-accumulator layout as floats; v: (keys, dims = kN) codes;
// d: (kM, kN) = P V.
__global__ void pv_e4m3_kernel(const std::uint8_t* p, const std::uint8_t* v, float* d) {
  __shared__ alignas(1024) std::uint8_t smem_v[Tile128::kBytes];
  __shared__ alignas(1024) std::uint8_t smem_vt[Tile128::kBytes];
  for (int i = threadIdx.x; i < kK * kN; i += blockDim.x) smem_v[Tile128::offset(i / kN, i % kN)] = v[i];
  __syncthreads();
  VTransposer<Tile128, Tile128, kN, kK, 4>::transpose(smem_address(smem_v), smem_address(smem_vt), threadIdx.x / 32);
  fence_proxy_async_shared();
  __syncthreads();
  float s[kK / 2];
  for (int i = 0; i < kK / 2; ++i) s[i] = decode(p[accumulator_row(threadIdx.x, i) * kK + accumulator_col(threadIdx.x, i)]);
  std::uint32_t frag[kK / 32][4];
  for (int step = 0; step < kK / 32; ++step)
    for (int reg = 0; reg < 4; ++reg)
      frag[step][reg] = pack_e4m3x4(s[fp8::p_accumulator_index(step, reg, 0)], s[fp8::p_accumulator_index(step, reg, 1)],
                                    s[fp8::p_accumulator_index(step, reg, 2)], s[fp8::p_accumulator_index(step, reg, 3)]);
  float acc[kN / 2];
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.25f;  // accumulate = 1 adds onto D
  wgmma_fence();
  for (int step = 0; step < kK / 32; ++step)
    wgmma_rs_e4m3<kN>(acc, frag[step], kmajor_descriptor(smem_address(smem_vt) + step * 32), 1);
  wgmma_commit();
  wgmma_wait<0>();
  pin_registers(acc);
  for (int i = 0; i < kN / 2; ++i) d[accumulator_row(threadIdx.x, i) * kN + accumulator_col(threadIdx.x, i)] = acc[i];
}

// Random finite e4m3 codes (no NaN code 0x7F/0xFF), magnitudes up to 448.
std::vector<std::uint8_t> random_codes(std::size_t n, std::mt19937& gen, bool non_negative) {
  std::vector<std::uint8_t> c(n);
  for (auto& x : c) {
    do x = static_cast<std::uint8_t>(gen()); while ((x & 0x7F) == 0x7F);
    if (non_negative) x &= 0x7F;
  }
  return c;
}

double host_value(std::uint8_t code) {
  __nv_fp8_e4m3 x;
  x.__x = code;
  return static_cast<double>(static_cast<float>(x));
}

std::vector<float> run(void (*kernel)(const std::uint8_t*, const std::uint8_t*, float*), const std::vector<std::uint8_t>& a,
                       const std::vector<std::uint8_t>& b) {
  test::DeviceBuffer da(a.size()), db(b.size()), dd(kM * kN * 4);
  HOPATTN_CUDA_CHECK(cudaMemcpy(da.data(), a.data(), a.size(), cudaMemcpyHostToDevice));
  HOPATTN_CUDA_CHECK(cudaMemcpy(db.data(), b.data(), b.size(), cudaMemcpyHostToDevice));
  HOPATTN_CUDA_CHECK(cudaMemset(dd.data(), 0xFF, kM * kN * 4));  // NaN poison
  kernel<<<1, 128>>>(da.as<std::uint8_t>(), db.as<std::uint8_t>(), dd.as<float>());
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  return dd.to_host<float>();
}

class ArchFp8Wgmma : public test::HopperTest {};

TEST_F(ArchFp8Wgmma, SsKMajorTimesKMajorMatchesCpu) {
  std::mt19937 gen(std::random_device{}());
  const auto a = random_codes(kM * kK, gen, false), b = random_codes(kN * kK, gen, false);
  const std::vector<float> d = run(ss_e4m3_kernel, a, b);
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < kK; ++k) {
        ref += host_value(a[m * kK + k]) * host_value(b[n * kK + k]);
        mag += std::fabs(host_value(a[m * kK + k]) * host_value(b[n * kK + k]));
      }
      ASSERT_NEAR(d[m * kN + n], ref, kQgmmaTolerance * mag) << "m " << m << " n " << n;
    }
  }
}

TEST_F(ArchFp8Wgmma, PermutedPTimesTransposedVMatchesCpu) {
  std::mt19937 gen(std::random_device{}());
  const auto p = random_codes(kM * kK, gen, true), v = random_codes(kK * kN, gen, false);
  const std::vector<float> d = run(pv_e4m3_kernel, p, v);
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      double ref = 0.25, mag = 0.25;
      for (int k = 0; k < kK; ++k) {
        ref += host_value(p[m * kK + k]) * host_value(v[k * kN + n]);
        mag += std::fabs(host_value(p[m * kK + k]) * host_value(v[k * kN + n]));
      }
      ASSERT_NEAR(d[m * kN + n], ref, kQgmmaTolerance * mag) << "m " << m << " n " << n;
    }
  }
}

}  // namespace
}  // namespace hopattn::sm90
