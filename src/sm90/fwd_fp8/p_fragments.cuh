// P (the FP8 softmax's output, one warpgroup's m64 x kBlockN S accumulator) -> the e4m3 A fragments of
// the P V GEMM, kS / 8 k32 steps of four registers. fp8_layout.hpp derives the maps.
// kPacked: P comes as the softmax's f16 pairs p16 (Fp8FwdTraits::kPackedRowSums), else as the
// accumulator's floats s; the other array is not read.
#pragma once

#include <cstdint>

#include "sm90/arch/convert_fp8.cuh"
#include "sm90/fwd_fp8/fp8_layout.hpp"

namespace hopattn::sm90 {

// Each thread packs only its own values; A column a of a k32 step then carries key pi(a), which the
// V transpose (or K's permuted rows) matches.
template <bool kPacked, int kS, int kPSteps>
__device__ __forceinline__ void pack_p_fragments(const float (&s)[kS], const std::uint32_t (&p16)[kS / 2],
                                                 std::uint32_t (&p)[kPSteps][4]) {
#pragma unroll
  for (int step = 0; step < kPSteps; ++step) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int first = fp8::p_accumulator_index(step, reg, 0), third = fp8::p_accumulator_index(step, reg, 2);
      if constexpr (kPacked) {
        p[step][reg] = pack_e4m3x4_from_f16x2(p16[first / 2], p16[third / 2]);
      } else {
        p[step][reg] = pack_e4m3x4(s[first], s[first + 1], s[third], s[third + 1]);
      }
    }
  }
}

// Accumulators i, i + 1 (one row, adjacent keys) as two e4m3 bytes.
template <bool kPacked, int kS>
__device__ __forceinline__ std::uint32_t e4m3_pair(const float (&s)[kS], const std::uint32_t (&p16)[kS / 2], int i) {
  if constexpr (kPacked) {
    return pack_e4m3x2_from_f16x2(p16[i / 2]);
  } else {
    return pack_e4m3x2(s[i], s[i + 1]);
  }
}

// The same with A column a carrying key a, for V^T in key order where K's rows were too (the block
// that reaches the end of the keys, fp8::k_block_in_key_order): a thread's own P values are keys
// {2c, 2c+1, 8+2c, 9+2c} of each 16-key group (c its quad lane), and A register (step, reg) wants
// keys 4c .. 4c+3. Lanes c < 2 take the low pairs (keys 2c', 2c'+1) of quad lanes 2c and 2c+1, lanes
// c >= 2 the high pairs (keys 8+2c', 9+2c') of quad lanes 2c-4 and 2c-3. Two shuffles per two A
// registers: each lane sends the low pairs of registers (reg, reg+1) to one of its readers and the
// high pairs to the other, each reader taking its lane's pairs in the order (even lane, odd lane) of
// the quad. All 32 lanes must take part.
template <bool kPacked, int kS, int kPSteps>
__device__ __forceinline__ void pack_p_fragments_in_key_order(const float (&s)[kS],
                                                              const std::uint32_t (&p16)[kS / 2],
                                                              std::uint32_t (&p)[kPSteps][4]) {
  const int lane = threadIdx.x % 32, c = lane % 4;
  const bool odd = c & 1, high = c >= 2;
  const int first_source = (lane & ~3) + (2 * c + (high ? 1 : 0)) % 4;
  const std::uint32_t low_select = high ? 0x1054u : 0x5410u, high_select = high ? 0x3276u : 0x7632u;
#pragma unroll
  for (int step = 0; step < kPSteps; ++step) {
#pragma unroll
    for (int reg = 0; reg < 4; reg += 2) {
      const int i0 = fp8::p_accumulator_index(step, reg, 0), i1 = fp8::p_accumulator_index(step, reg + 1, 0);
      const std::uint32_t lows = e4m3_pair<kPacked>(s, p16, i0) | (e4m3_pair<kPacked>(s, p16, i1) << 16);
      const std::uint32_t highs = e4m3_pair<kPacked>(s, p16, i0 + 4) | (e4m3_pair<kPacked>(s, p16, i1 + 4) << 16);
      const std::uint32_t first = __shfl_sync(0xffffffffu, odd ? highs : lows, first_source);
      const std::uint32_t second = __shfl_sync(0xffffffffu, odd ? lows : highs, first_source ^ 1);
      p[step][reg] = __byte_perm(first, second, low_select);
      p[step][reg + 1] = __byte_perm(first, second, high_select);
    }
  }
}

}  // namespace hopattn::sm90
