// Host scalar conversions between the library's dtypes and double. The 16-bit and fp8 conversions use
// CUDA's host-callable types so that host rounding is bit-identical to the GPU's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hopattn/hopattn.hpp"

namespace hopattn::reference {

constexpr double kE4M3Max = 448.0;

// Value of an fp8 e4m3 (OCP "fn" variant) code: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
// infinities, S.1111.111 is NaN. Written out from the format definition, independent of CUDA.
inline double decode_e4m3(std::uint8_t code) {
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa / 8.0, -6);  // subnormal
  return sign * std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
}

// Rounds x to the nearest e4m3 value (ties to even), saturating at +-448 (infinities included) and
// keeping NaN: the behaviour of the GPU's satfinite conversion, written out so it can be checked.
inline double round_to_e4m3(double x) {
  if (std::isnan(x)) return x;
  const double magnitude = std::fabs(x);
  double rounded;
  if (magnitude >= kE4M3Max) {
    rounded = kE4M3Max;
  } else if (magnitude == 0.0) {
    rounded = 0.0;
  } else {
    int binade;
    std::frexp(magnitude, &binade);                 // magnitude = f * 2^binade, f in [0.5, 1)
    const int exponent = std::max(binade - 1, -6);  // below 2^-6 the spacing stays subnormal
    const double quantum = std::ldexp(1.0, exponent - 3);
    const double scaled = magnitude / quantum;      // exact: quantum is a power of two
    double whole = std::floor(scaled);
    const double fraction = scaled - whole;
    if (fraction > 0.5 || (fraction == 0.5 && std::fmod(whole, 2.0) != 0.0)) whole += 1.0;
    rounded = whole * quantum;
  }
  return std::copysign(rounded, x);
}

// Reads one element of `dtype` at p.
inline double load_scalar(const void* p, Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case Dtype::kFloat16: {
      __half v;
      std::memcpy(&v, p, sizeof v);
      return static_cast<double>(__half2float(v));
    }
    case Dtype::kBFloat16: {
      __nv_bfloat16 v;
      std::memcpy(&v, p, sizeof v);
      return static_cast<double>(__bfloat162float(v));
    }
    case Dtype::kFloat8E4M3: {
      __nv_fp8_e4m3 v;
      std::memcpy(&v, p, sizeof v);
      return static_cast<double>(static_cast<float>(v));
    }
    case Dtype::kInt32: {
      std::int32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Writes x to p as `dtype`, rounding once (to nearest even; fp8 saturates to +-448; int32 truncates).
inline void store_scalar(void* p, Dtype dtype, double x) {
  switch (dtype) {
    case Dtype::kFloat32: {
      const float v = static_cast<float>(x);
      std::memcpy(p, &v, sizeof v);
      return;
    }
    case Dtype::kFloat16: {
      const __half v = __double2half(x);
      std::memcpy(p, &v, sizeof v);
      return;
    }
    case Dtype::kBFloat16: {
      const __nv_bfloat16 v = __double2bfloat16(x);
      std::memcpy(p, &v, sizeof v);
      return;
    }
    case Dtype::kFloat8E4M3: {
      const __nv_fp8_e4m3 v(x);  // satfinite, round to nearest even
      std::memcpy(p, &v, sizeof v);
      return;
    }
    case Dtype::kInt32: {
      const std::int32_t v = static_cast<std::int32_t>(x);
      std::memcpy(p, &v, sizeof v);
      return;
    }
  }
}

// x rounded to the nearest value of `dtype` (what a store then a load would give).
inline double round_to_dtype(double x, Dtype dtype) {
  unsigned char bytes[sizeof(double)];
  store_scalar(bytes, dtype, x);
  return load_scalar(bytes, dtype);
}

}  // namespace hopattn::reference
