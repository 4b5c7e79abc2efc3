// What the float32 GPU references (gpu_reference.cu, gpu_reference_backward.cu) share: the problem as
// their kernels see it, strided loads, rounding to the input dtype, the mask and block reductions, and
// the shared-memory opt-in. Header-only (templates and inline functions), so both may include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "gpu/gpu_test_util.cuh"
#include "hopattn/hopattn.hpp"

namespace hopattn::test::gpu_reference_detail {

// Every reference kernel runs blocks of this many threads; block_reduce relies on it.
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// A (batch, seqlen, heads, d) tensor as a kernel reads it; the element type comes from the kernel.
struct View {
  const void* data;
  std::int64_t stride[4];
};

inline View view_of(const Tensor& t) {
  View v{t.data, {}};
  for (int d = 0; d < 4; ++d) v.stride[d] = t.stride[d];
  return v;
}

// Extents and scalars of a call, the base of each reference's kernel parameters.
struct Problem {
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  float scale, softcap;
  int window_left, window_right;  // causal already folded in
  int attention_chunk;             // 0 = off
};

// From validated arguments: q and k (batch, seqlen, heads, d) and the mask and softmax scalars, which
// GpuReferenceArgs and GpuReferenceBackwardArgs name alike.
template <typename Args>
Problem problem_of(const Args& args) {
  Problem p{};
  p.batch = static_cast<int>(args.q.shape[0]);
  p.seqlen_q = static_cast<int>(args.q.shape[1]);
  p.heads_q = static_cast<int>(args.q.shape[2]);
  p.head_dim = static_cast<int>(args.q.shape[3]);
  p.seqlen_k = static_cast<int>(args.k.shape[1]);
  p.heads_kv = static_cast<int>(args.k.shape[2]);
  p.scale = args.softmax_scale;
  p.softcap = args.softcap;
  p.window_left = args.window_left;
  p.window_right = args.causal ? 0 : args.window_right;
  p.attention_chunk = args.attention_chunk;
  return p;
}

template <typename T>
__device__ inline float load(const View& t, int b, int s, int h, int c) {
  const T* p = static_cast<const T*>(t.data);
  return to_float(p[b * t.stride[0] + s * t.stride[1] + h * t.stride[2] + c * t.stride[3]]);
}

template <typename T>
__device__ inline float round_to(float x) {
  return to_float(from_float<T>(x));
}

// Key j is visible from query i (bottom-right aligned window; with chunks, j in the chunk of i's
// diagonal, chunk indices by floor division).
__device__ inline bool visible(const Problem& p, int i, int j) {
  const int diagonal = i + p.seqlen_k - p.seqlen_q;
  if (p.window_left >= 0 && j < diagonal - p.window_left) return false;
  if (p.window_right >= 0 && j > diagonal + p.window_right) return false;
  if (p.attention_chunk > 0) {
    const int c = p.attention_chunk;
    const int diagonal_chunk = diagonal >= 0 ? diagonal / c : -((-diagonal + c - 1) / c);
    if (j / c != diagonal_chunk) return false;
  }
  return true;
}

__device__ inline float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Reduces `value` over the block with `op`; every thread gets the result.
template <typename Op>
__device__ inline float block_reduce(float value, Op op, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float result = scratch[0];
  for (int w = 1; w < kWarps; ++w) result = op(result, scratch[w]);
  return result;
}

__device__ inline float block_max(float value, float* scratch) {
  return block_reduce(value, [](float a, float c) { return fmaxf(a, c); }, scratch);
}

__device__ inline float block_sum(float value, float* scratch) {
  return block_reduce(value, [](float a, float c) { return a + c; }, scratch);
}

// Lets `kernel` use `smem` bytes of dynamic shared memory, where a row's keys live: above the default
// 48 KiB a kernel must opt in. Returns why it cannot (the device allows less), or an empty string.
template <typename Kernel>
std::string opt_in_shared_memory(Kernel* kernel, std::size_t smem, int seqlen_k) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) ==
      cudaSuccess)
    return "";
  cudaGetLastError();  // clear the error: the caller reports it as an invalid argument
  return "seqlen_k " + std::to_string(seqlen_k) + " needs " + std::to_string(smem) +
         " bytes of shared memory, more than the device allows";
}

}  // namespace hopattn::test::gpu_reference_detail
