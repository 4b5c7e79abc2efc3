// The small cases on which the float32 GPU references, forward and backward, are checked against the
// CPU reference backend (float64), and the input dtypes' rounding those checks allow for.
#pragma once

#include <cmath>
#include <cstdint>

#include "hopattn/hopattn.hpp"

namespace hopattn::test {

// Unit roundoff of the input types: |round(x) - x| <= u |x|.
inline double unit_roundoff(Dtype dtype) {
  return dtype == Dtype::kBFloat16 ? 0x1p-8 : dtype == Dtype::kFloat16 ? 0x1p-11 : 0x1p-24;
}

struct SmallCase {
  Dtype dtype;
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  bool causal = false;
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;
  float scale = 0.0f;  // 0 = 1/sqrt(d)
  float amplitude = 1.0f;

  std::int64_t q_numel() const { return std::int64_t(batch) * seqlen_q * heads_q * head_dim; }
  std::int64_t kv_numel() const { return std::int64_t(batch) * seqlen_k * heads_kv * head_dim; }
  std::int64_t lse_numel() const { return std::int64_t(batch) * heads_q * seqlen_q; }
  float resolved_scale() const { return scale > 0.0f ? scale : 1.0f / std::sqrt(float(head_dim)); }
};

// `c` with a mask, a softcap, a scale and an amplitude: one line per case in a table of them.
inline SmallCase with(SmallCase c, bool causal, int left, int right, float softcap, float scale, float amplitude) {
  c.causal = causal, c.window_left = left, c.window_right = right, c.softcap = softcap, c.scale = scale;
  c.amplitude = amplitude;
  return c;
}

// Points a GPU reference's arguments (GpuReferenceArgs or GpuReferenceBackwardArgs, which name these
// alike) at dense q, k and v of c's dtype and shape on the device, with c's mask, softcap and scale.
template <typename Args>
void set_inputs(Args& a, const SmallCase& c, void* q, void* k, void* v) {
  a.q = make_tensor(q, c.dtype, {c.batch, c.seqlen_q, c.heads_q, c.head_dim}, DeviceType::kCuda);
  a.k = make_tensor(k, c.dtype, {c.batch, c.seqlen_k, c.heads_kv, c.head_dim}, DeviceType::kCuda);
  a.v = make_tensor(v, c.dtype, {c.batch, c.seqlen_k, c.heads_kv, c.head_dim}, DeviceType::kCuda);
  a.softmax_scale = c.resolved_scale();
  a.causal = c.causal;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.softcap = c.softcap;
}

}  // namespace hopattn::test
