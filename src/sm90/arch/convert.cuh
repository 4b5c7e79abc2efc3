// Float <-> 16-bit conversions of two elements packed in a 32-bit register: pack_pair (cvt.rn.bf16x2.f32
// / cvt.rn.f16x2.f32), the form both the wgmma A fragment and 4-byte global stores want, `lo` landing in
// the low half; unpack_pair, the exact way back, for kernels that load 16-bit rows in vectors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

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

// The two elements (Element: __nv_bfloat16 or __half) of `word`, low half first, as floats.
template <typename Element>
__device__ __forceinline__ float2 unpack_pair(std::uint32_t word) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    __nv_bfloat162 pair;
    std::memcpy(&pair, &word, sizeof(word));
    return __bfloat1622float2(pair);
  } else {
    __half2 pair;
    std::memcpy(&pair, &word, sizeof(word));
    return __half22float2(pair);
  }
}

}  // namespace hopattn::sm90
