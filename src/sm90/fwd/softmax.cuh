// Online softmax over the S accumulator of one warpgroup (64 rows x kBlockN keys). Each thread holds
// two rows (r = 0: row l/4, r = 1: row l/4 + 8 of its warp's 16) and kBlockN/4 entries of each; the
// four threads of a quad hold the rest of the row, so row reductions are two xor-shuffles.
// Scores stay raw (unscaled) until the exponent, where softmax_scale * log2(e) is folded into one
// FFMA feeding the hardware exp2 (MUFU.EX2).
#pragma once

#include <cmath>

namespace hopattn::sm90 {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 2^x for x <= 0 on the FMA pipe instead of the exp unit (MUFU.EX2 does 16 per clock per SM against
// 128 FMAs): x = n + f with n an integer (rounded by the 1.5 * 2^23 trick) and f in [-0.5, 0.5];
// 2^f by a degree-3 polynomial (relative error 1.8e-4, far below the rounding of P to 16 bits), and
// 2^n added to the exponent bits. Below -126 (masked keys are -inf) it returns exactly 0.
__device__ __forceinline__ float poly_exp2(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float clamped = fmaxf(x, -127.0f);
  const float t = clamped + kRound;
  const float f = clamped - (t - kRound);
  const float p = fmaf(fmaf(fmaf(0.054602623f, f, 0.24192413f), f, 0.69331648f), f, 1.0f);
  const float scaled = __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
  return x < -126.0f ? 0.0f : scaled;
}

// Hardware tanh (MUFU.TANH), for the softcap.
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Accumulator index i of an m64nN fragment belongs to the thread's row (i / 2) % 2.
__device__ __forceinline__ constexpr int fragment_row_half(int i) { return (i >> 1) & 1; }

// kPolyExpPeriod: every kPolyExpPeriod-th probability is computed by poly_exp2 on the FMA pipe, the
// rest on the exp unit, to balance the two when the exp unit is the bottleneck (0 = never).
template <int kSRegisters, int kPolyExpPeriod = 0>
struct OnlineSoftmax {
  float row_max[2];  // running max of raw scores, -inf until a key is seen
  float row_sum[2];  // this thread's partial sum of exp2(...) relative to row_max
  float scale_log2;

  __device__ __forceinline__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.0f;
  }

  // Folds one block of raw scores (masked entries -inf) into the running max and sum, replaces the
  // scores by their unnormalized probabilities, and returns per row the factor the O accumulator must
  // be multiplied by (exp2 of old max minus new max).
  __device__ __forceinline__ void update(float (&s)[kSRegisters], float (&o_rescale)[2]) {
    float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kSRegisters; ++i) block_max[fragment_row_half(i)] = fmaxf(block_max[fragment_row_half(i)], s[i]);
    float max_scaled[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float new_max = fmaxf(row_max[r], quad_max(block_max[r]));
      // A row that has seen no key yet keeps max -inf; exponentiate against 0 so -inf - -inf never
      // makes a NaN (all its probabilities are exp2(-inf) = 0).
      max_scaled[r] = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
      o_rescale[r] = fast_exp2(row_max[r] * scale_log2 - max_scaled[r]);
      row_max[r] = new_max;
      row_sum[r] *= o_rescale[r];
    }
#pragma unroll
    for (int i = 0; i < kSRegisters; ++i) {
      const int r = fragment_row_half(i);
      const float x = fmaf(s[i], scale_log2, -max_scaled[r]);
      if constexpr (kPolyExpPeriod > 0) {
        s[i] = i % kPolyExpPeriod == kPolyExpPeriod - 1 ? poly_exp2(x) : fast_exp2(x);
      } else {
        s[i] = fast_exp2(x);
      }
      row_sum[r] += s[i];
    }
  }
};

}  // namespace hopattn::sm90
