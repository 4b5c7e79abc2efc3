// Host buffers for one quantize_fp8 call, filled with fresh outlier-laden random inputs and poisoned
// outputs (e4m3 NaN codes, NaN scales). Shared by the CPU and GPU quantization tests.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hopattn/quantize.hpp"

namespace fp8_test {

struct QuantShape {
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, d = 64;
  int d_v = 0;  // v's head dim; 0: d
};

constexpr std::uint8_t kPoisonCode = 0x7F;  // e4m3 NaN

// Owns the memory behind args. `pad` extra elements per row (in inputs and codes) make every tensor
// non-contiguous across rows while keeping the last dimension contiguous.
struct QuantCase {
  QuantShape shape;
  hopattn::Dtype dtype = hopattn::Dtype::kBFloat16;
  int pad = 0;
  std::vector<std::uint16_t> in[3];
  std::vector<std::uint8_t> codes[3];
  std::vector<float> scales[3];
  hopattn::QuantizeArgs args;

  int seqlen(int t) const { return t == 0 ? shape.seqlen_q : shape.seqlen_k; }
  int heads(int t) const { return t == 0 ? shape.heads_q : shape.heads_kv; }
  int dim(int t) const { return t == 2 && shape.d_v > 0 ? shape.d_v : shape.d; }
  int block_rows(int t) const { return t == 0 ? args.block_rows_q : args.block_rows_kv; }
  hopattn::Tensor& input(int t) { return t == 0 ? args.q : t == 1 ? args.k : args.v; }
  hopattn::Tensor& output(int t) { return t == 0 ? args.q8 : t == 1 ? args.k8 : args.v8; }
  const hopattn::Tensor& output(int t) const { return t == 0 ? args.q8 : t == 1 ? args.k8 : args.v8; }
  hopattn::Tensor& descale(int t) { return t == 0 ? args.q_descale : t == 1 ? args.k_descale : args.v_descale; }
  std::int64_t scale_count(int t) const {
    switch (args.granularity) {
      case hopattn::QuantGranularity::kPerTensor: return 1;
      case hopattn::QuantGranularity::kPerHead: return static_cast<std::int64_t>(shape.batch) * heads(t);
      case hopattn::QuantGranularity::kPerBlock:
        return static_cast<std::int64_t>(shape.batch) * heads(t) *
               hopattn::scale_blocks(args.granularity, seqlen(t), block_rows(t));
    }
    return 0;
  }
  // Element offset of (b, s, h, j) in tensor t's input and code buffers.
  std::int64_t offset(int t, int b, int s, int h, int j) const {
    const std::int64_t row = dim(t) + pad;
    return ((static_cast<std::int64_t>(b) * seqlen(t) + s) * heads(t) + h) * row + j;
  }
  // Element offset of (b, s, h, j) in tensor t's code buffer, through the output view's strides
  // (which store_v8_keys_contiguous changes for v8).
  std::int64_t code_offset(int t, int b, int s, int h, int j) const {
    const hopattn::Tensor& o = output(t);
    return b * o.stride[0] + s * o.stride[1] + h * o.stride[2] + j * o.stride[3];
  }
  float input_value(int t, std::int64_t i) const {
    if (dtype == hopattn::Dtype::kBFloat16) {
      __nv_bfloat16_raw raw;
      raw.x = in[t][i];
      return __bfloat162float(__nv_bfloat16(raw));
    }
    __half_raw raw;
    raw.x = in[t][i];
    return __half2float(__half(raw));
  }
};

inline std::uint16_t to_bits(float x, hopattn::Dtype dtype) {
  if (dtype == hopattn::Dtype::kBFloat16) return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
  return __half_raw(__float2half_rn(x)).x;
}

// N(0, sigma^2) entries, one in `outlier_every` getting an extra N(0, 100) term.
inline QuantCase make_case(const QuantShape& shape, hopattn::Dtype dtype, hopattn::QuantGranularity granularity,
                           bool hadamard, std::mt19937_64& rng, int block_rows_q = 128, int block_rows_kv = 128,
                           int pad = 0, float sigma = 1.0f) {
  QuantCase c;
  c.shape = shape;
  c.dtype = dtype;
  c.pad = pad;
  c.args.granularity = granularity;
  c.args.hadamard = hadamard;
  c.args.seed = rng();
  c.args.block_rows_q = block_rows_q;
  c.args.block_rows_kv = block_rows_kv;
  std::normal_distribution<float> normal(0.0f, sigma);
  std::bernoulli_distribution outlier(0.01);
  for (int t = 0; t < 3; ++t) {
    const std::int64_t b = shape.batch, s = c.seqlen(t), h = c.heads(t), d = c.dim(t), row = d + pad;
    c.in[t].resize(static_cast<std::size_t>(b * s * h * row));
    for (std::uint16_t& e : c.in[t]) e = to_bits(normal(rng) + (outlier(rng) ? 10.0f * normal(rng) : 0.0f), dtype);
    c.codes[t].assign(c.in[t].size(), kPoisonCode);
    c.scales[t].assign(static_cast<std::size_t>(c.scale_count(t)), std::numeric_limits<float>::quiet_NaN());
    hopattn::Tensor in = hopattn::make_tensor(c.in[t].data(), dtype, {b, s, h, d});
    hopattn::Tensor out = hopattn::make_tensor(c.codes[t].data(), hopattn::Dtype::kFloat8E4M3, {b, s, h, d});
    for (hopattn::Tensor* x : {&in, &out}) {
      x->stride[2] = row;
      x->stride[1] = h * row;
      x->stride[0] = s * h * row;
    }
    c.input(t) = in;
    c.output(t) = out;
    switch (granularity) {
      case hopattn::QuantGranularity::kPerTensor:
        c.descale(t) = hopattn::make_tensor(c.scales[t].data(), hopattn::Dtype::kFloat32, {1});
        break;
      case hopattn::QuantGranularity::kPerHead:
        c.descale(t) = hopattn::make_tensor(c.scales[t].data(), hopattn::Dtype::kFloat32, {b, h});
        break;
      case hopattn::QuantGranularity::kPerBlock:
        c.descale(t) = hopattn::make_tensor(c.scales[t].data(), hopattn::Dtype::kFloat32,
                                            {b, h, hopattn::scale_blocks(granularity, s, c.block_rows(t))});
        break;
    }
  }
  return c;
}

// Makes the case write v8 with its keys contiguous: codes[2] becomes a poisoned (batch, heads_kv, d,
// padded_keys) buffer, viewed as (batch, seqlen_k, heads_kv, d) with stride[1] == 1 (V^T in memory).
// Keys seqlen_k .. padded_keys - 1 of each column are padding that must stay poisoned.
inline void store_v8_keys_contiguous(QuantCase& c, std::int64_t padded_keys) {
  const std::int64_t b = c.shape.batch, h = c.shape.heads_kv, d = c.dim(2);
  c.codes[2].assign(static_cast<std::size_t>(b * h * d * padded_keys), kPoisonCode);
  hopattn::Tensor& v8 = c.args.v8;
  v8.data = c.codes[2].data();
  v8.stride[0] = h * d * padded_keys;
  v8.stride[1] = 1;
  v8.stride[2] = d * padded_keys;
  v8.stride[3] = padded_keys;
}

}  // namespace fp8_test
