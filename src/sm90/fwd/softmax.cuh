// Online softmax over the S accumulator of one warpgroup (64 rows x kBlockN keys). Each thread holds
// two rows (r = 0: row l/4, r = 1: row l/4 + 8 of its warp's 16) and kBlockN/4 entries of each; the
// four threads of a quad hold the rest of the row, so row reductions are two xor-shuffles.
// Scores stay raw (unscaled) until the exponent, where softmax_scale * log2(e) is folded into one
// FFMA feeding the hardware exp2 (MUFU.EX2).
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"

namespace hopattn::sm90 {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
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

// Whether some row of the warp moved its max this block (a factor other than 1): where none did, the
// O rescale can be skipped (the consumers' rescale).
__device__ __forceinline__ bool warp_rescales(const float (&factor)[2]) {
  return __any_sync(0xffffffffu, factor[0] != 1.0f || factor[1] != 1.0f);
}

// Accumulator index i of an m64nN fragment belongs to the thread's row (i / 2) % 2, where it is entry
// number fragment_row_entry(i) of that row's kSRegisters / 2.
__device__ __forceinline__ constexpr int fragment_row_half(int i) { return (i >> 1) & 1; }
__device__ __forceinline__ constexpr int fragment_row_entry(int i) { return (i >> 2) * 2 + (i & 1); }

// O's accumulators times their row's factor (the online softmax's rescale), skipped where no row of the
// warp changed its max (factor 1 everywhere).
template <int kORegisters>
__device__ __forceinline__ void rescale_rows(float (&o)[kORegisters], const float (&factor)[2]) {
  if (!warp_rescales(factor)) return;
#pragma unroll
  for (int i = 0; i < kORegisters; ++i) o[i] *= factor[fragment_row_half(i)];
}

// P in 16 bits as the A operand of O += P V: the accumulators of S columns [16k, 16k+16) are, in order,
// the A fragment of P V step k.
template <bool kBf16, int kSRegisters>
__device__ __forceinline__ void pack_probabilities(const float (&s)[kSRegisters],
                                                   std::uint32_t (&p)[kSRegisters / 8][4]) {
#pragma unroll
  for (int step = 0; step < kSRegisters / 8; ++step) {
#pragma unroll
    for (int j = 0; j < 4; ++j) p[step][j] = pack_pair<kBf16>(s[8 * step + 2 * j], s[8 * step + 2 * j + 1]);
  }
}

// Reduces each row half of a fragment with op into out[2] as kRowChains independent chains, then a
// pairwise combine. Why: one chain is kSRegisters/2 dependent FMNMX/FADD (~4+ cycles each) between the
// S GEMM and MUFU.EX2.
constexpr int kRowChains = 4;

template <int kSRegisters, typename Op>
__device__ __forceinline__ void fragment_row_reduce(const float (&s)[kSRegisters], float (&out)[2], Op op) {
  static_assert(kSRegisters / 2 >= kRowChains && (kRowChains & (kRowChains - 1)) == 0);
  float chain[2][kRowChains];
#pragma unroll
  for (int i = 0; i < kSRegisters; ++i) {
    const int r = fragment_row_half(i), e = fragment_row_entry(i), c = e % kRowChains;
    chain[r][c] = e < kRowChains ? s[i] : op(chain[r][c], s[i]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int w = kRowChains / 2; w > 0; w /= 2) {
#pragma unroll
      for (int c = 0; c < w; ++c) chain[r][c] = op(chain[r][c], chain[r][c + w]);
    }
    out[r] = chain[r][0];
  }
}

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

template <int kSRegisters>
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
    update_max(s, o_rescale);
    exponentiate(s, o_rescale);
  }

  // The two halves of update, for a caller with work to put between them.
  __device__ __forceinline__ void update_max(const float (&s)[kSRegisters], float (&o_rescale)[2]) {
    float block_max[2];
    fragment_row_reduce(s, block_max, MaxOp{});
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float new_max = fmaxf(row_max[r], quad_max(block_max[r]));
      // A row that has seen no key yet keeps max -inf; exponentiate against 0 so -inf - -inf never
      // makes a NaN (all its probabilities are exp2(-inf) = 0).
      max_scaled[r] = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
      o_rescale[r] = fast_exp2(row_max[r] * scale_log2 - max_scaled[r]);
      row_max[r] = new_max;
    }
  }
  __device__ __forceinline__ void exponentiate(float (&s)[kSRegisters], const float (&o_rescale)[2]) {
#pragma unroll
    for (int i = 0; i < kSRegisters; ++i) s[i] = fast_exp2(fmaf(s[i], scale_log2, -max_scaled[fragment_row_half(i)]));
    float block_sum[2];
    fragment_row_reduce(s, block_sum, SumOp{});
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * o_rescale[r] + block_sum[r];
  }

 private:
  float max_scaled[2];  // update_max -> exponentiate: the exponent's reference, max * scale_log2
};

}  // namespace hopattn::sm90
