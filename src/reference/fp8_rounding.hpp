// float -> float roundings through the GPU's storage formats, for the CPU emulations of low-precision
// attention. They use cuda_fp16.h / cuda_bf16.h / cuda_fp8.h host conversions, which round like the
// device: to nearest even, e4m3 saturating to +-448. (numeric.hpp's round_to_e4m3 works on doubles; the
// emulations round float32 intermediates, hence these.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace hopattn::reference {

inline float to_fp16_rn(float x) { return __half2float(__float2half_rn(x)); }
inline float to_bf16_rn(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

inline float decode_e4m3_code(std::uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
}
inline float to_e4m3_rn(float x) {
  return decode_e4m3_code(static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)));
}

}  // namespace hopattn::reference
