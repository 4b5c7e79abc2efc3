// The validated description of one quantize_fp8 call, shared by the CPU and GPU quantizers so both
// see the same signs and the same scale groups (the condition for bit-identical codes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "hopattn/quantize.hpp"

#ifdef __CUDACC__
#define HOPATTN_QUANT_HD __host__ __device__
#else
#define HOPATTN_QUANT_HD
#endif

namespace hopattn::detail {

constexpr float kE4M3MaxFloat = 448.0f;
constexpr int kMaxHadamardDim = 256;

// The Walsh-Hadamard transform's block at head dim d: the largest power of two dividing d (d itself for
// 16, 32, 64, 128 and 256). M is block-diagonal, one H diag(s) / sqrt(block) per block of columns: still
// orthogonal, so that (qM)(kM)^T = qk^T at d 96 or 192 too, each outlier spread over its block.
HOPATTN_QUANT_HD constexpr int hadamard_block(int d) { return d & -d; }

// The random signs s of M = H diag(s) / sqrt(d): bit j set means column j is negated.
struct HadamardSigns {
  std::uint64_t bits[kMaxHadamardDim / 64] = {};
  HOPATTN_QUANT_HD bool negated(int column) const { return (bits[column / 64] >> (column % 64)) & 1u; }
};

// Deterministic in the seed alone (splitmix64), identical on every platform.
HadamardSigns hadamard_signs(std::uint64_t seed);

// One tensor to quantize: in (batch, seqlen, heads, d) -> out, with scales into descale.
struct QuantizeJob {
  const Tensor* in = nullptr;
  const Tensor* out = nullptr;
  const Tensor* descale = nullptr;
  int batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  int block_rows = 0;   // rows per scale for kPerBlock, rows per work tile otherwise
  bool hadamard = false;
  float hadamard_norm = 1.0f;  // 1/sqrt(hadamard_block(d)) rounded to float once, here, for both quantizers
  bool out_keys_contiguous = false;  // v8 given as V^T in memory (out.stride[1] == 1)
  // v's block scales: rounded up to powers of two (hopattn/quantize.hpp says why)
  bool power_of_two_scales = false;
};

struct QuantizePlan {
  QuantizeJob jobs[3];  // q, k, v
  QuantGranularity granularity = QuantGranularity::kPerBlock;
  HadamardSigns signs;
  DeviceType device = DeviceType::kHost;
  int device_index = 0;
};

// Rows per work tile when the granularity does not fix one: the tile size of the attention kernels.
constexpr int kDefaultTileRows = 128;

// Descale element holding the scale of block `block` of (b, h).
HOPATTN_QUANT_HD inline std::int64_t descale_offset(const Tensor& descale, QuantGranularity granularity, int b, int h, int block) {
  switch (granularity) {
    case QuantGranularity::kPerTensor: return 0;
    case QuantGranularity::kPerHead: return b * descale.stride[0] + h * descale.stride[1];
    case QuantGranularity::kPerBlock:
      return b * descale.stride[0] + h * descale.stride[1] + block * descale.stride[2];
  }
  return 0;
}

// The least power of two >= x, for x > 0 and finite (a subnormal x gives 2^-126): x's exponent field,
// plus one where any mantissa bit is set. Integer operations only, so host and device agree.
HOPATTN_QUANT_HD inline float power_of_two_at_or_above(float x) {
  std::uint32_t bits;
#ifdef __CUDA_ARCH__
  bits = __float_as_uint(x);
#else
  std::memcpy(&bits, &x, sizeof bits);
#endif
  if (bits & 0x007fffffu) bits = (bits & 0x7f800000u) + 0x00800000u;
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  std::memcpy(&x, &bits, sizeof bits);
  return x;
#endif
}

// An all-zero v block's scale (any scale codes zeros): far below any block scale of real data, so that
// in a forward key block that it shares with ordinary keys it never becomes the v scale the others' P
// are scaled down to (quantize.hpp), yet high enough that O, which the one-scale kernels keep in the
// current block's v units, stays far from float's range when it changes units to it and back.
constexpr float kZeroVBlockScale = 0x1p-40f;

// The least scale: 2^-126, float's least normal. A smaller one (a bf16 group of amax below 448 * 2^-126
// = 5e-36) would have an infinite inverse, which codes every nonzero element as +-448.
constexpr float kMinScale = 0x1p-126f;

// scale = amax / 448, at least kMinScale; where power_of_two (v's block scales,
// QuantizeJob::power_of_two_scales), that quotient rounded up to a power of two. An all-zero group gets 1
// (dividing by it stays finite), an all-zero v block kZeroVBlockScale. Division rounds to nearest on
// both sides (no fast-math), so host and device agree bit for bit.
HOPATTN_QUANT_HD inline float scale_from_amax(float amax, bool power_of_two) {
  if (!(amax > 0.0f)) return power_of_two ? kZeroVBlockScale : 1.0f;
#ifdef __CUDA_ARCH__
  const float scale = fmaxf(__fdiv_rn(amax, kE4M3MaxFloat), kMinScale);
#else
  const float scale = std::fmax(amax / kE4M3MaxFloat, kMinScale);
#endif
  return power_of_two ? power_of_two_at_or_above(scale) : scale;
}

// What codes are scaled by: x -> e4m3(x * inverse_scale(scale)). One rounded reciprocal per group and a
// multiply per element, rather than a division per element: on the GPU each division is a reciprocal
// on the quarter-rate MUFU pipe plus a Newton step (perf-notes v120). Rounded to nearest on both sides.
HOPATTN_QUANT_HD inline float inverse_scale(float scale) {
#ifdef __CUDA_ARCH__
  return __frcp_rn(scale);
#else
  return 1.0f / scale;
#endif
}

}  // namespace hopattn::detail
