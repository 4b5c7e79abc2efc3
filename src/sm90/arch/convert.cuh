// Float -> 16-bit conversions packed two per 32-bit register (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32),
// the form both the wgmma A fragment and 4-byte global stores want. `lo` lands in the low half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace hopattn::sm90 {

template <bool kBf16>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&pair);
  } else {
    __half2 pair = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&pair);
  }
}

}  // namespace hopattn::sm90
