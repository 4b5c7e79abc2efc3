// hopattn-tma-stream: how fast TMA streams a decoding step's K and V from HBM, by CTA layout.
//
// A decoding step reads each (batch, K/V head)'s keys once; the kernel is bound by HBM, and cuDNN's
// decode kernel (two 128-thread CTAs per SM, one per (batch, K/V head) or key split) read 4.5-4.6
// TB/s on the H200 where ours (one CTA per SM, 128-key blocks of two 64-column boxes) read 4.1
// (perf-notes, session 21). This probe streams the same bytes with nothing but the loads: one thread
// issues K and V boxes into a ring of `stages` stages and one consumer lane releases each stage as it
// lands (after an optional busy wait that stands for the GEMMs and softmax), so the CTA shape, ring
// depth, box shape and key order can be varied apart from the attention code.
//
//   hopattn-tma-stream [--batch 32] [--heads-kv 8] [--seqlen 16384] [--ctas-per-sm 1] [--rows 128]
//                      [--chunks 1] [--stages 2] [--descending] [--consume-ns 0] [--cp-async-warps 0]
//
// --rows: keys per stage; --chunks n: each stage loaded as n chunks of rows / n keys, both 64-column
// halves of a chunk back to back (a 256-byte key row requested together rather than 128 bytes at a
// time); --ctas-per-sm: CTAs resident per SM (the grid), tiles (batch, head) handed out round-robin;
// --cp-async-warps n: n producer warps load each stage with 16-byte cp.async copies into the same
// 128B-swizzled layout instead of TMA boxes (each lane arrives on the stage's barrier when its copies
// land: cp.async.mbarrier.arrive.noinc).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sm90/arch/cp_async.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/tma.cuh"
#include "probe_check.hpp"
#include "sm90/host/tensor_map.hpp"

namespace hopattn::probe {
namespace {

using sm90::mbarrier_arrive;
using sm90::mbarrier_arrive_expect_tx;
using sm90::mbarrier_init;
using sm90::mbarrier_wait;
using sm90::tma_load_4d;

constexpr int kHeadDim = 128;
constexpr int kHalfCols = 64;       // one 128-byte box column block (the 128B swizzle's limit)
constexpr int kRowBytes = kHeadDim * 2;
constexpr int kMaxStages = 8;

struct StreamParams {
  const std::uint8_t *k, *v;
  int batch, heads, seqlen, rows, chunks, stages, tiles, cp_async_warps;
  bool descending;
  long long consume_ns;
};

__device__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// 16-byte chunk `chunk` (0-15) of key row `row` of a stage's tile, in the 128B-swizzled layout TMA
// writes: two 64-column blocks of rows x 128 bytes, chunk c of row r at c ^ (r % 8) within its row.
__device__ int swizzled_offset(int row, int chunk, int rows) {
  const int block = chunk / 8;
  return block * rows * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
}

// The producer warps' share of one stage: rows x 16 chunks of K and of V, lane-contiguous chunks (a
// warp reads two whole 256-byte key rows per instruction).
__device__ void cp_async_stage(const StreamParams& p, std::uint8_t* k, std::uint8_t* v, int batch, int head,
                               int row0, int thread, int threads) {
  const std::size_t row_stride = std::size_t(p.heads) * kRowBytes;
  const std::size_t base = (std::size_t(batch) * p.seqlen + row0) * row_stride + std::size_t(head) * kRowBytes;
  for (int i = thread; i < p.rows * 16; i += threads) {
    const int row = i / 16, chunk = i % 16;
    const std::size_t src = base + row * row_stride + chunk * 16;
    sm90::cp_async_16_or_zero(sm90::smem_address(k + swizzled_offset(row, chunk, p.rows)), p.k + src, true);
    sm90::cp_async_16_or_zero(sm90::smem_address(v + swizzled_offset(row, chunk, p.rows)), p.v + src, true);
  }
}

// This CTA's blocks in the probe's order (tiles round-robin, keys ascending or descending): waits until
// each one's stage is free, then calls load(stage, block, head, batch).
template <class Load>
__device__ void walk_free_stages(const StreamParams& p, std::uint64_t* empty, Load load) {
  const int blocks = p.seqlen / p.rows;
  int stage = 0;
  std::uint32_t phase = 0;
  for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    for (int i = 0; i < blocks; ++i) {
      mbarrier_wait(&empty[stage], phase ^ 1);
      load(stage, p.descending ? blocks - 1 - i : i, tile % p.heads, tile / p.heads);
      if (++stage == p.stages) stage = 0, phase ^= 1;
    }
  }
}

__global__ void __launch_bounds__(160) stream_kernel(const __grid_constant__ CUtensorMap tm_k,
                                                     const __grid_constant__ CUtensorMap tm_v, StreamParams p) {
  extern __shared__ __align__(1024) std::uint8_t smem[];
  __shared__ std::uint64_t full[kMaxStages], empty[kMaxStages];
  const int stage_bytes = 2 * p.rows * kRowBytes;  // K and V
  const int chunk_rows = p.rows / p.chunks;
  const int half_bytes = chunk_rows * kHalfCols * 2;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      mbarrier_init(&full[s], p.cp_async_warps > 0 ? 32 * p.cp_async_warps : 1);
      mbarrier_init(&empty[s], 1);
    }
    sm90::fence_barrier_init();
  }
  __syncthreads();
  const int consumer_thread = 32 * max(1, p.cp_async_warps);
  if (p.cp_async_warps > 0 && threadIdx.x < consumer_thread) {  // cp.async producer warps
    walk_free_stages(p, empty, [&](int stage, int n, int head, int batch) {
      std::uint8_t* k = smem + stage * stage_bytes;
      cp_async_stage(p, k, k + p.rows * kRowBytes, batch, head, n * p.rows, threadIdx.x, consumer_thread);
      sm90::cp_async_arrive_when_landed(&full[stage]);
    });
  } else if (p.cp_async_warps == 0 && threadIdx.x == 0) {  // TMA producer
    walk_free_stages(p, empty, [&](int stage, int n, int head, int batch) {
      mbarrier_arrive_expect_tx(&full[stage], stage_bytes);
      std::uint8_t* k = smem + stage * stage_bytes;
      std::uint8_t* v = k + p.rows * kRowBytes;
      for (int c = 0; c < p.chunks; ++c) {
        const int row = n * p.rows + c * chunk_rows;
        for (int h = 0; h < 2; ++h)
          tma_load_4d(k + (h * p.chunks + c) * half_bytes, &tm_k, &full[stage], h * kHalfCols, row, head, batch);
        for (int h = 0; h < 2; ++h)
          tma_load_4d(v + (h * p.chunks + c) * half_bytes, &tm_v, &full[stage], h * kHalfCols, row, head, batch);
      }
    });
  } else if (threadIdx.x == consumer_thread) {  // consumer: releases each stage once it landed (and it "computed")
    const int blocks = p.seqlen / p.rows;
    int stage = 0;
    std::uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      for (int i = 0; i < blocks; ++i) {
        mbarrier_wait(&full[stage], phase);
        if (p.consume_ns > 0) {
          const long long until = global_ns() + p.consume_ns;
          while (global_ns() < until) {
          }
        }
        mbarrier_arrive(&empty[stage]);
        if (++stage == p.stages) stage = 0, phase ^= 1;
      }
    }
  }
}

int arg_int(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

bool arg_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

int run(int argc, char** argv) {
  StreamParams p{};
  p.batch = arg_int(argc, argv, "--batch", 32);
  p.heads = arg_int(argc, argv, "--heads-kv", 8);
  p.seqlen = arg_int(argc, argv, "--seqlen", 16384);
  p.rows = arg_int(argc, argv, "--rows", 128);
  p.chunks = arg_int(argc, argv, "--chunks", 1);
  p.stages = arg_int(argc, argv, "--stages", 2);
  p.descending = arg_flag(argc, argv, "--descending");
  p.consume_ns = arg_int(argc, argv, "--consume-ns", 0);
  const int ctas_per_sm = arg_int(argc, argv, "--ctas-per-sm", 1);
  p.cp_async_warps = arg_int(argc, argv, "--cp-async-warps", 0);
  p.tiles = p.batch * p.heads;
  if (p.stages < 1 || p.stages > kMaxStages || p.rows % (8 * p.chunks) != 0 || p.seqlen % p.rows != 0) {
    std::fprintf(stderr, "hopattn-tma-stream: stages 1-%d, rows a multiple of 8 x chunks, seqlen of rows\n",
                 kMaxStages);
    return 2;
  }
  int sms = 0;
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::size_t elements = std::size_t(p.batch) * p.seqlen * p.heads * kHeadDim;
  void *k = nullptr, *v = nullptr;
  PROBE_CHECK(cudaMalloc(&k, elements * 2));
  PROBE_CHECK(cudaMalloc(&v, elements * 2));
  PROBE_CHECK(cudaMemset(k, 0, elements * 2));
  PROBE_CHECK(cudaMemset(v, 0, elements * 2));
  p.k = static_cast<const std::uint8_t*>(k);
  p.v = static_cast<const std::uint8_t*>(v);
  CUtensorMap tm_k, tm_v;
  for (auto [map, data] : {std::pair{&tm_k, k}, std::pair{&tm_v, v}}) {
    const sm90::BshdView view{data, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.batch, p.seqlen, p.heads, kHeadDim,
                              std::int64_t(p.seqlen) * p.heads * kHeadDim, std::int64_t(p.heads) * kHeadDim,
                              kHeadDim};
    const Status st = sm90::make_tensor_map(map, view, kHalfCols, p.rows / p.chunks);
    if (!st.ok()) {
      std::fprintf(stderr, "tensor map: %s\n", st.message().c_str());
      return 1;
    }
  }
  const int smem = p.stages * 2 * p.rows * kRowBytes;
  PROBE_CHECK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int resident = 0;
  const int threads = 32 * (std::max(1, p.cp_async_warps) + 1);
  PROBE_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, stream_kernel, threads, smem));
  if (resident < ctas_per_sm) {
    std::fprintf(stderr, "hopattn-tma-stream: %d CTAs of %d bytes fit an SM, asked for %d\n", resident, smem,
                 ctas_per_sm);
    return 2;
  }
  const int grid = std::min(p.tiles, sms * ctas_per_sm);
  cudaEvent_t start, stop;
  PROBE_CHECK(cudaEventCreate(&start));
  PROBE_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    PROBE_CHECK(cudaEventRecord(start));
    stream_kernel<<<grid, threads, smem>>>(tm_k, tm_v, p);
    PROBE_CHECK(cudaEventRecord(stop));
    PROBE_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    PROBE_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (i >= 2) ms.push_back(t);
  }
  PROBE_CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  std::printf("b %d hkv %d sk %d | %s ctas/sm %d grid %d rows %d chunks %d stages %d %s consume %lld ns | "
              "%.1f us %.2f TB/s\n",
              p.batch, p.heads, p.seqlen,
              p.cp_async_warps > 0 ? ("cp.async x" + std::to_string(p.cp_async_warps)).c_str() : "tma",
              ctas_per_sm, grid, p.rows, p.chunks, p.stages,
              p.descending ? "desc" : "asc", p.consume_ns, median * 1e3, 2.0 * elements * 2 / (median * 1e9));
  cudaFree(k);
  cudaFree(v);
  return 0;
}

}  // namespace
}  // namespace hopattn::probe

int main(int argc, char** argv) { return hopattn::probe::run(argc, argv); }
