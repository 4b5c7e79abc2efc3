// What both GPU quantizer kernels share: the launch parameters, how a CTA finds its chunk of rows, and
// the arithmetic of one row (the Walsh-Hadamard transform, amax, e4m3 codes). Every float operation is
// an explicitly rounded intrinsic applied in the CPU quantizer's order (src/reference/fp8_quantize.cpp),
// so codes and scales match it bit for bit whichever kernel runs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "api/quantize_plan.hpp"
#include "sm90/arch/convert.cuh"

namespace hopattn::sm90::quant {

enum class Pass : int {
  kFused,     // a chunk is a whole scale group: amax of the chunk, scale, codes
  kAmax,      // atomicMax of the chunk's amax into its group's descale slot
  kQuantize,  // codes with the scale already in the descale slot
};

// Work decomposition. A scale group is block_rows rows of one (batch, head) for kPerBlock and all its
// rows otherwise (kPerTensor treats the tensor as one (batch, head) for its slot). Each CTA takes one
// chunk of chunk_rows rows of a group; a group of several chunks needs the kAmax and kQuantize passes.
// Chunks are numbered (batch, head, group, chunk) row-major, `chunks` in all.
struct Params {
  Tensor in, out, descale;  // plain views; only data and strides are read on the device
  int batch, seqlen, heads, head_dim;
  int group_rows, groups_per_head, chunk_rows, chunks_per_group, chunks;
  QuantGranularity granularity;
  detail::HadamardSigns signs;
  float norm;
  bool out_keys_contiguous;
  bool power_of_two_scales;  // QuantizeJob::power_of_two_scales
};

// CTA `index`'s rows [row_begin, row_end) of (b, h), empty past the sequence, and its group's slot.
struct Chunk {
  int b, h, row_begin, row_end;
  float* slot;
};

__device__ inline Chunk chunk_of(const Params& p, int index) {
  const int chunk = index % p.chunks_per_group;
  const int group = index / p.chunks_per_group % p.groups_per_head;
  const int h = index / p.chunks_per_group / p.groups_per_head % p.heads;
  const int b = index / p.chunks_per_group / p.groups_per_head / p.heads;
  // 64-bit: a group or chunk may end past 2^31 - 1 rows where the sequence does not.
  const long long row_begin = static_cast<long long>(group) * p.group_rows + static_cast<long long>(chunk) * p.chunk_rows;
  const long long group_end = min(static_cast<long long>(p.seqlen), (group + 1LL) * p.group_rows);
  const long long row_end = min(group_end, row_begin + p.chunk_rows);
  float* slot = static_cast<float*>(p.descale.data) + detail::descale_offset(p.descale, p.granularity, b, h, group);
  if (row_begin >= row_end) return {b, h, 0, 0, slot};
  return {b, h, static_cast<int>(row_begin), static_cast<int>(row_end), slot};
}

__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ inline std::uint8_t to_e4m3(float x, float inverse_scale) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(x, inverse_scale), __NV_SATFINITE, __NV_E4M3));
}

template <typename T>
__device__ const T* row_in(const Params& p, int b, int s, int h) {
  return static_cast<const T*>(p.in.data) + b * p.in.stride[0] + s * p.in.stride[1] + h * p.in.stride[2];
}

__device__ inline std::uint8_t* row_out(const Params& p, int b, int s, int h) {
  return static_cast<std::uint8_t*>(p.out.data) + b * p.out.stride[0] + s * p.out.stride[1] + h * p.out.stride[2];
}

// The last step of M = H diag(s) / sqrt(d) for a lane's E columns: s_j / sqrt(d) as one factor.
// (s_j x) / sqrt(d) rounded equals x (s_j / sqrt(d)) rounded: negation is exact and rounding symmetric.
template <int E>
struct LaneFactors {
  float signed_norm[E];
  __device__ LaneFactors(const Params& p, int lane) {
#pragma unroll
    for (int i = 0; i < E; ++i) signed_norm[i] = p.signs.negated(lane * E + i) ? -p.norm : p.norm;
  }
};

// v (a lane's E columns [lane * E, lane * E + E) of a row of d = 32 * E) times M = H diag(s) / sqrt(d).
// The butterflies of stride < E stay in a lane, those of stride >= E pair lane l with lane
// l ^ (stride / E) through shuffles: the CPU's stage order and pairs. A shuffled butterfly is one fma:
// x_j + x_{j+stride} and x_j - x_{j+stride} are fma(+-mine, 1, partner), the same rounding as the add.
template <int E>
__device__ void transform(const LaneFactors<E>& factors, int lane, float (&v)[E]) {
#pragma unroll
  for (int stride = 1; stride < E; stride *= 2) {
#pragma unroll
    for (int base = 0; base < E; base += 2 * stride) {
#pragma unroll
      for (int j = base; j < base + stride; ++j) {
        const float lo = v[j], hi = v[j + stride];
        v[j] = __fadd_rn(lo, hi);
        v[j + stride] = __fsub_rn(lo, hi);
      }
    }
  }
#pragma unroll
  for (int lanes = 1; lanes < 32; lanes *= 2) {
    const float mine_sign = lane & lanes ? -1.0f : 1.0f;  // -1: this lane holds the x_{j+stride} halves
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const float partner = __shfl_xor_sync(0xffffffffu, v[i], lanes);
      v[i] = __fmaf_rn(v[i], mine_sign, partner);
    }
  }
#pragma unroll
  for (int i = 0; i < E; ++i) v[i] = __fmul_rn(v[i], factors.signed_norm[i]);
}

__device__ inline float warp_max(float m) {
#pragma unroll
  for (int lanes = 16; lanes > 0; lanes /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, lanes));
  return m;
}

// The CTA's amax from each warp's (every lane holding its warp's), in every thread. kWarps warps.
template <int kWarps>
__device__ float cta_max(float warp_amax) {
  __shared__ float amax[kWarps];
  if (threadIdx.x % 32 == 0) amax[threadIdx.x / 32] = warp_amax;
  __syncthreads();
  float m = amax[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, amax[w]);
  return m;
}

// kAmax: folds the chunk's amax into its group's slot (amax >= 0, and non-negative floats order like
// their bit patterns). kFused: writes and returns the scale. kQuantize: never calls this.
__device__ inline float publish_amax(Pass pass, float amax, float* slot, bool power_of_two) {
  if (pass == Pass::kAmax) {
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(slot), __float_as_int(amax));
    return 0.0f;
  }
  const float scale = detail::scale_from_amax(amax, power_of_two);
  if (threadIdx.x == 0) *slot = scale;
  return scale;
}

}  // namespace hopattn::sm90::quant
