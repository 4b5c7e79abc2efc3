// FP8 (e4m3) warpgroup MMAs, m64nNk32 with f32 accumulation. For 8-bit inputs PTX has no transpose
// flags: A and B are both K-major (the reduction axis contiguous), from shared memory or, for A,
// from registers (four 32-bit registers of four e4m3 values; see fwd_fp8/fp8_layout.hpp).
#pragma once

#include <cstdint>

namespace hopattn::sm90 {

#include "sm90/arch/wgmma_fp8_instructions.inc"

template <int kN>
__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                              int accumulate) {
  static_assert(kN == 8 || kN == 64 || kN == 96 || kN == 128 || kN == 192 || kN == 256,
                "no fp8 wgmma wrapper for this N: add it to tools/gen_wgmma.py");
  if constexpr (kN == 8) wgmma_m64n8k32_ss_e4m3(d, desc_a, desc_b, accumulate);
  if constexpr (kN == 64) wgmma_m64n64k32_ss_e4m3(d, desc_a, desc_b, accumulate);
  if constexpr (kN == 96) wgmma_m64n96k32_ss_e4m3(d, desc_a, desc_b, accumulate);
  if constexpr (kN == 128) wgmma_m64n128k32_ss_e4m3(d, desc_a, desc_b, accumulate);
  if constexpr (kN == 192) wgmma_m64n192k32_ss_e4m3(d, desc_a, desc_b, accumulate);
  if constexpr (kN == 256) wgmma_m64n256k32_ss_e4m3(d, desc_a, desc_b, accumulate);
}

template <int kN>
__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[kN / 2], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                              int accumulate) {
  static_assert(kN == 8 || kN == 64 || kN == 96 || kN == 128 || kN == 192 || kN == 256,
                "no fp8 wgmma wrapper for this N: add it to tools/gen_wgmma.py");
  if constexpr (kN == 8) wgmma_m64n8k32_rs_e4m3(d, a, desc_b, accumulate);
  if constexpr (kN == 64) wgmma_m64n64k32_rs_e4m3(d, a, desc_b, accumulate);
  if constexpr (kN == 96) wgmma_m64n96k32_rs_e4m3(d, a, desc_b, accumulate);
  if constexpr (kN == 128) wgmma_m64n128k32_rs_e4m3(d, a, desc_b, accumulate);
  if constexpr (kN == 192) wgmma_m64n192k32_rs_e4m3(d, a, desc_b, accumulate);
  if constexpr (kN == 256) wgmma_m64n256k32_rs_e4m3(d, a, desc_b, accumulate);
}

}  // namespace hopattn::sm90
