// Online softmax of the FP8 kernel. Unlike the 16-bit path (sm90/fwd/softmax.cuh) the score scale can
// change from one K block to the next (per-block k scales), so the running max is kept in scaled
// log2 units, t = s * scale (scale = softmax_scale * log2(e) * descales, > 0), not in raw scores.
// P comes out multiplied by 2^8 (exp2(t - max + 8), folded into the one FFMA before MUFU.EX2): P lies
// in [0, 256], e4m3's normal range, so small probabilities do not fall onto e4m3's subnormal grid when
// P is rounded for the P V GEMM (docs/fp8-accuracy.md). The row sum carries the same 2^8 and it
// cancels in O / l.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert_fp8.cuh"
#include "sm90/fwd/softmax.cuh"

namespace hopattn::sm90 {

constexpr float kFp8POffsetLog2 = 8.0f;

// 2^x on the FMA pipe, for x <= 8 (P's argument): x = j + f with j = round(x) (the 1.5 * 2^23 add
// leaves j in the low mantissa bits), 2^f for |f| <= 1/2 by its degree-3 Taylor polynomial (relative
// error below 6e-4, far under e4m3's 2^-4 step that P is rounded to), then j added to the exponent
// field. x is clamped at -127, where f = 0 and the exponent add gives exactly +0 (so -inf, a masked
// score, still gives 0, and an empty row's sum stays 0).
__device__ __forceinline__ float exp2_on_fma_pipe(float x) {
  const float clamped = fmaxf(x, -127.0f);
  const float shifted = clamped + 12582912.0f;
  const float f = clamped - (shifted - 12582912.0f);
  const float p = fmaf(fmaf(fmaf(0.0555041f, f, 0.2402265f), f, 0.6931472f), f, 1.0f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));
}

__device__ __forceinline__ std::uint32_t add_f16x2(std::uint32_t a, std::uint32_t b) {
  std::uint32_t sum;
  asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(sum) : "r"(a), "r"(b));
  return sum;
}

__device__ __forceinline__ float f16x2_halves_sum(std::uint32_t pair) {
  float lo, hi;
  asm("{\n.reg .f16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(pair));
  return lo + hi;
}

// Per row half, the sum of a thread's P pairs (p16[j] holds S-fragment entries 2j, 2j+1, both of
// row half j % 2), in kRowChains independent HADD2 chains as fragment_row_reduce. In f16 (P <= 256,
// at most 64 pairs per row: no overflow), each add rounds to 11 bits: the sum's relative error stays
// near 1e-3 at worst, against e4m3's 2^-4 steps that P itself is rounded to for the P V GEMM. (Its
// chains repeat fragment_row_reduce's shape rather than share it: a shared template moved ptxas's
// schedule of the V^T 192-key kernel's first block, 2026-12-01, and the kernels stay as measured.)
template <int kPairs>
__device__ __forceinline__ void packed_row_sum(const std::uint32_t (&p16)[kPairs], float (&out)[2]) {
  static_assert(kPairs / 2 >= kRowChains);
  std::uint32_t chain[2][kRowChains];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int r = j & 1, e = j >> 1, c = e % kRowChains;
    chain[r][c] = e < kRowChains ? p16[j] : add_f16x2(chain[r][c], p16[j]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int w = kRowChains / 2; w > 0; w /= 2) {
#pragma unroll
      for (int c = 0; c < w; ++c) chain[r][c] = add_f16x2(chain[r][c], chain[r][c + w]);
    }
    out[r] = f16x2_halves_sum(chain[r][0]);
  }
}

// The softmax's factors for a K block whose keys fall in kGroups descale groups
// (Fp8FwdTraits::kDescaleGroups > 1: k and v block scales that change inside the block): per group,
// the logit factor (what `scale` is for a block of one group), P's log2 offset and the row-sum weight
// that undoes it. The offset is log2 of the group's v scale over the block's largest (<= 0): the
// P V GEMM then adds every group's V in the units of that largest scale, and P stays within
// [0, 256], e4m3's normal range.
template <int kGroups>
struct DescaleGroups {
  float logit[kGroups];
  float p_log2[kGroups];
  float sum_weight[kGroups];
};

// kFmaExp2Every > 0: every kFmaExp2Every-th exponential goes to exp2_on_fma_pipe, the rest to MUFU.EX2
// (Fp8FwdTraits::kFmaExp2Every says where that pays). kPackedSums: row sums over f16 pairs of P
// (Fp8FwdTraits::kPackedRowSums says where that pays).
template <int kSRegisters, int kFmaExp2Every, bool kPackedSums>
struct Fp8OnlineSoftmax {
  float row_max[2];  // running max of t (log2 units), -inf until a key is seen
  float row_sum[2];  // this thread's partial sum of P (with the 2^8)

  __device__ __forceinline__ Fp8OnlineSoftmax() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.0f;
  }

  // Raw scores s (masked entries -inf) with this block's scale (a float, or DescaleGroups) -> P; per
  // row the factor O must be multiplied by before this block's P V is added.
  __device__ __forceinline__ void update(float (&s)[kSRegisters], float scale, float (&o_rescale)[2],
                                         std::uint32_t (&p16)[kSRegisters / 2]) {
    update_max(s, scale, o_rescale);
    exponentiate(s, scale, p16);
  }
  template <int kGroups>
  __device__ __forceinline__ void update(float (&s)[kSRegisters], const DescaleGroups<kGroups>& groups,
                                         float (&o_rescale)[2], std::uint32_t (&p16)[kSRegisters / 2]) {
    update_max(s, groups, o_rescale);
    exponentiate(s, groups, p16);
  }

  // The two halves of update, for a caller that has work to put between them (the overlapped
  // mainloop waits there for its previous P V, so that converting P can interleave with the
  // exponentials). update_max folds the block's max into the running max, rescales the row sums
  // and returns the O factor.
  __device__ __forceinline__ void update_max(const float (&s)[kSRegisters], float scale, float (&o_rescale)[2]) {
    float block_max[2];
    fragment_row_reduce(s, block_max, MaxOp{});
#pragma unroll
    for (int r = 0; r < 2; ++r) fold_block_max(quad_max(block_max[r]) * scale, r, o_rescale);
  }
  // The same for a block of descale groups: each group's max is scaled by its logit factor before
  // the rows' maxima meet across the quad.
  template <int kGroups>
  __device__ __forceinline__ void update_max(const float (&s)[kSRegisters], const DescaleGroups<kGroups>& groups,
                                             float (&o_rescale)[2]) {
    float scaled_max[2];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      float group_max[2];
      fragment_row_reduce(group_part<kGroups>(s, g), group_max, MaxOp{});
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float t = group_max[r] * groups.logit[g];
        scaled_max[r] = g == 0 ? t : fmaxf(scaled_max[r], t);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) fold_block_max(quad_max(scaled_max[r]), r, o_rescale);
  }

  // Scores -> P against the max of the last update_max (same scale); adds P to the row sums. Where
  // kPackedSums, P also comes out as f16 pairs (entries 2j, 2j+1 of s, one row, in p16[j]) that
  // feed both the row sum (HADD2: half as many instructions as the FADDs, each of which would take
  // the other warpgroup's GEMM a tensor cycle) and P's e4m3 conversion (from f16x2, as cheap as from
  // two floats); otherwise p16 is left alone.
  __device__ __forceinline__ void exponentiate(float (&s)[kSRegisters], float scale,
                                               std::uint32_t (&p16)[kSRegisters / 2]) {
    float bias[2];  // the 2^8 offset minus the max
#pragma unroll
    for (int r = 0; r < 2; ++r) bias[r] = kFp8POffsetLog2 - exponent_reference(row_max[r]);
#pragma unroll
    for (int i = 0; i < kSRegisters; ++i) {
      const float x = fmaf(s[i], scale, bias[fragment_row_half(i)]);
      s[i] = kFmaExp2Every > 0 && i % (kFmaExp2Every > 0 ? kFmaExp2Every : 1) == 0 ? exp2_on_fma_pipe(x) : fast_exp2(x);
    }
    float block_sum[2];
    if constexpr (kPackedSums) {
#pragma unroll
      for (int j = 0; j < kSRegisters / 2; ++j) p16[j] = pack_f16x2(s[2 * j], s[2 * j + 1]);
      packed_row_sum(p16, block_sum);
    } else {
      fragment_row_reduce(s, block_sum, SumOp{});
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] += block_sum[r];
  }
  // The same for a block of descale groups: group g's exponents carry its P offset, and its row sum
  // is weighted back by sum_weight. The sums are taken over the floats: an offset may go down to the
  // plan's floor (2^-64), far under f16's range (Fp8FwdTraits::kPackedRowSums), so p16 is left alone.
  template <int kGroups>
  __device__ __forceinline__ void exponentiate(float (&s)[kSRegisters], const DescaleGroups<kGroups>& groups,
                                               std::uint32_t (&)[kSRegisters / 2]) {
    static_assert(!kPackedSums, "a group's P may lie under f16's normal range");
    constexpr int kPerGroup = kSRegisters / kGroups;
    float bias[kGroups][2];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
#pragma unroll
      for (int r = 0; r < 2; ++r) bias[g][r] = kFp8POffsetLog2 + groups.p_log2[g] - exponent_reference(row_max[r]);
    }
#pragma unroll
    for (int i = 0; i < kSRegisters; ++i) {
      const int g = i / kPerGroup;
      const float x = fmaf(s[i], groups.logit[g], bias[g][fragment_row_half(i)]);
      s[i] = kFmaExp2Every > 0 && i % (kFmaExp2Every > 0 ? kFmaExp2Every : 1) == 0 ? exp2_on_fma_pipe(x) : fast_exp2(x);
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      float group_sum[2];
      fragment_row_reduce(group_part<kGroups>(s, g), group_sum, SumOp{});
#pragma unroll
      for (int r = 0; r < 2; ++r) row_sum[r] = fmaf(group_sum[r], groups.sum_weight[g], row_sum[r]);
    }
  }

 private:
  // A block's max (scaled, in log2 units) of row half r into the running max; the row sum's rescale.
  __device__ __forceinline__ void fold_block_max(float block_max, int r, float (&o_rescale)[2]) {
    const float new_max = fmaxf(row_max[r], block_max);
    o_rescale[r] = fast_exp2(row_max[r] - exponent_reference(new_max));
    row_sum[r] *= o_rescale[r];
    row_max[r] = new_max;
  }
  // Descale group g's part of a fragment array (its keys are a contiguous run of the fragment's
  // columns, so a contiguous run of its registers with the same row halves).
  template <int kGroups, class T, int kN>
  __device__ __forceinline__ static const T (&group_part(const T (&a)[kN], int g))[kN / kGroups] {
    static_assert(kN % (4 * kGroups) == 0, "a group's registers must be whole column pairs of both row halves");
    return *reinterpret_cast<const T(*)[kN / kGroups]>(a + g * (kN / kGroups));
  }

  // What the exponents are taken against: the running max, or 0 for a row with no key yet (max
  // -inf), so that no -inf - -inf makes a NaN.
  __device__ __forceinline__ static float exponent_reference(float max) { return max == -INFINITY ? 0.0f : max; }
};

}  // namespace hopattn::sm90
