// Float -> e4m3 conversion, four values per 32-bit register (the wgmma 8-bit A fragment packing):
// `b0` lands in the lowest byte. cvt.rn.satfinite.e4m3x2.f32 d, hi, lo rounds to nearest even and
// saturates to +-448, as cuda_fp8.h's __NV_SATFINITE conversion (and the CPU emulation) does.
#pragma once

#include <cstdint>

namespace hopattn::sm90 {

__device__ __forceinline__ std::uint32_t pack_e4m3x4(float b0, float b1, float b2, float b3) {
  std::uint32_t packed;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(packed)
      : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
  return packed;
}

// Two floats -> one f16x2 register, `lo` in the low half (round to nearest even).
__device__ __forceinline__ std::uint32_t pack_f16x2(float lo, float hi) {
  std::uint32_t packed;
  asm("cvt.rn.f16x2.f32 %0, %2, %1;\n" : "=r"(packed) : "f"(lo), "f"(hi));
  return packed;
}

// Two f16x2 registers -> four e4m3 bytes, `b01`'s low half in the lowest byte (same rounding and
// saturation as pack_e4m3x4).
__device__ __forceinline__ std::uint32_t pack_e4m3x4_from_f16x2(std::uint32_t b01, std::uint32_t b23) {
  std::uint32_t packed;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f16x2 lo, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f16x2 hi, %2;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(packed)
      : "r"(b01), "r"(b23));
  return packed;
}

// Two floats, or one f16x2 register, -> two e4m3 bytes in the low half of the result (`lo` lowest).
__device__ __forceinline__ std::uint32_t pack_e4m3x2(float lo, float hi) {
  std::uint16_t packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;\n" : "=h"(packed) : "f"(lo), "f"(hi));
  return packed;
}
__device__ __forceinline__ std::uint32_t pack_e4m3x2_from_f16x2(std::uint32_t pair) {
  std::uint16_t packed;
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;\n" : "=h"(packed) : "r"(pair));
  return packed;
}

}  // namespace hopattn::sm90
