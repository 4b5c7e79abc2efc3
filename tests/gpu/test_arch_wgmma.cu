// One warpgroup, one tile: SS-wgmma with both operands K-major in 128B-swizzled smem (the S = Q K^T
// form, stepping the descriptors through a 64-wide column block) and RS-wgmma with A from registers
// and B MN-major (the O = P V form, spanning two column blocks through the leading byte offset).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gpu_test_util.cuh"
#include "sm90/arch/convert.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {
namespace {

constexpr int kM = 64;
constexpr int kK = 64;  // one column block of 16-bit elements: four k16 steps
constexpr int kN = 128;

using ATile = SwizzledTile<kM, kK, 2>;
using BKMajorTile = SwizzledTile<kN, kK, 2>;  // B stored (N rows, K contiguous)
using BMNMajorTile = SwizzledTile<kK, kN, 2>;  // B stored (K rows, N contiguous): two column blocks

// a: (kM, kK) row-major; b: (kN, kK) row-major (B^T); d: (kM, kN).
__global__ void ss_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
  __shared__ alignas(1024) std::uint8_t smem_a[ATile::kBytes];
  __shared__ alignas(1024) std::uint8_t smem_b[BKMajorTile::kBytes];
  for (int i = threadIdx.x; i < kM * kK; i += blockDim.x)
    *reinterpret_cast<__nv_bfloat16*>(smem_a + ATile::offset(i / kK, i % kK)) = a[i];
  for (int i = threadIdx.x; i < kN * kK; i += blockDim.x)
    *reinterpret_cast<__nv_bfloat16*>(smem_b + BKMajorTile::offset(i / kK, i % kK)) = b[i];
  fence_proxy_async_shared();  // generic-proxy stores -> async-proxy (wgmma) reads
  __syncthreads();
  float acc[kN / 2];
  wgmma_fence();
  for (int step = 0; step < kK / 16; ++step) {
    wgmma_ss<kN, true>(acc, kmajor_descriptor(smem_address(smem_a) + step * 32),
                       kmajor_descriptor(smem_address(smem_b) + step * 32), step > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  pin_registers(acc);
  for (int i = 0; i < kN / 2; ++i)
    d[accumulator_row(threadIdx.x, i) * kN + accumulator_col(threadIdx.x, i)] = acc[i];
}

// a: (kM, kK) row-major, given to wgmma from registers; b: (kK, kN) row-major; d: (kM, kN).
__global__ void rs_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
  __shared__ alignas(1024) std::uint8_t smem_b[BMNMajorTile::kBytes];
  for (int i = threadIdx.x; i < kK * kN; i += blockDim.x)
    *reinterpret_cast<__nv_bfloat16*>(smem_b + BMNMajorTile::offset(i / kN, i % kN)) = b[i];
  fence_proxy_async_shared();
  __syncthreads();
  std::uint32_t frag[kK / 16][4];
  for (int step = 0; step < kK / 16; ++step) {
    for (int j = 0; j < 4; ++j) {
      const int i = 8 * step + 2 * j;  // accumulator index whose (row, col) this A register holds
      const int row = accumulator_row(threadIdx.x, i), col = accumulator_col(threadIdx.x, i);
      frag[step][j] = pack_pair<true>(__bfloat162float(a[row * kK + col]), __bfloat162float(a[row * kK + col + 1]));
    }
  }
  float acc[kN / 2];
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.5f;  // checks accumulate = 1 adds onto D
  wgmma_fence();
  for (int step = 0; step < kK / 16; ++step) {
    wgmma_rs<kN, true>(acc, frag[step], mnmajor_descriptor(smem_address(smem_b) + step * 16 * 128,
                                                          BMNMajorTile::kColumnBlockBytes), 1);
  }
  wgmma_commit();
  wgmma_wait<0>();
  pin_registers(acc);
  for (int i = 0; i < kN / 2; ++i)
    d[accumulator_row(threadIdx.x, i) * kN + accumulator_col(threadIdx.x, i)] = acc[i];
}

std::vector<__nv_bfloat16> random_bf16(std::size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> v(n);
  for (auto& x : v) x = __float2bfloat16(dist(gen));
  return v;
}

class ArchWgmma : public test::HopperTest {};

TEST_F(ArchWgmma, SsKMajorTimesKMajorMatchesCpu) {
  std::mt19937 gen(std::random_device{}());
  auto a = random_bf16(kM * kK, gen), b = random_bf16(kN * kK, gen);
  test::DeviceBuffer da(a.size() * 2), db(b.size() * 2), dd(kM * kN * 4);
  HOPATTN_CUDA_CHECK(cudaMemcpy(da.data(), a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  HOPATTN_CUDA_CHECK(cudaMemcpy(db.data(), b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  HOPATTN_CUDA_CHECK(cudaMemset(dd.data(), 0xFF, kM * kN * 4));  // NaN poison
  ss_kernel<<<1, 128>>>(da.as<__nv_bfloat16>(), db.as<__nv_bfloat16>(), dd.as<float>());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> d(kM * kN);
  HOPATTN_CUDA_CHECK(cudaMemcpy(d.data(), dd.data(), d.size() * 4, cudaMemcpyDeviceToHost));
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      double ref = 0;
      for (int k = 0; k < kK; ++k) ref += double(__bfloat162float(a[m * kK + k])) * __bfloat162float(b[n * kK + k]);
      ASSERT_NEAR(d[m * kN + n], ref, 1e-3) << "m " << m << " n " << n;
    }
  }
}

TEST_F(ArchWgmma, RsRegistersTimesMNMajorMatchesCpu) {
  std::mt19937 gen(std::random_device{}());
  auto a = random_bf16(kM * kK, gen), b = random_bf16(kK * kN, gen);
  test::DeviceBuffer da(a.size() * 2), db(b.size() * 2), dd(kM * kN * 4);
  HOPATTN_CUDA_CHECK(cudaMemcpy(da.data(), a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  HOPATTN_CUDA_CHECK(cudaMemcpy(db.data(), b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  HOPATTN_CUDA_CHECK(cudaMemset(dd.data(), 0xFF, kM * kN * 4));
  rs_kernel<<<1, 128>>>(da.as<__nv_bfloat16>(), db.as<__nv_bfloat16>(), dd.as<float>());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> d(kM * kN);
  HOPATTN_CUDA_CHECK(cudaMemcpy(d.data(), dd.data(), d.size() * 4, cudaMemcpyDeviceToHost));
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      double ref = 0.5;
      for (int k = 0; k < kK; ++k) ref += double(__bfloat162float(a[m * kK + k])) * __bfloat162float(b[k * kN + n]);
      ASSERT_NEAR(d[m * kN + n], ref, 1e-3) << "m " << m << " n " << n;
    }
  }
}

}  // namespace
}  // namespace hopattn::sm90
