#include "reference/fp8_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "api/quantize_plan.hpp"
#include "reference/fp8_rounding.hpp"

namespace hopattn::reference {
namespace {

// 2^8: P is scaled into [0, 256] before the e4m3 rounding (see the header).
constexpr float kPOffset = 256.0f;

// Decoded row (b, s, h) of an e4m3 tensor (stepping by stride[3]: v8 may have its keys contiguous).
void decode_row(const Tensor& t, int b, int s, int h, float* row) {
  const auto* codes = static_cast<const std::uint8_t*>(t.data) + b * t.stride[0] + s * t.stride[1] + h * t.stride[2];
  for (int j = 0; j < t.shape[3]; ++j) row[j] = decode_e4m3_code(codes[j * t.stride[3]]);
}

float scale_of(const Tensor& descale, QuantGranularity g, int b, int h, int row, int block_rows) {
  const int block = g == QuantGranularity::kPerBlock ? row / block_rows : 0;
  return static_cast<const float*>(descale.data)[detail::descale_offset(descale, g, b, h, block)];
}

struct Shape {
  int batch, seqlen_q, heads_q, d, seqlen_k, heads_kv;
  float softmax_scale;
};

Shape shape_of(const Fp8AttentionArgs& a) {
  Shape s{static_cast<int>(a.q8.shape[0]), static_cast<int>(a.q8.shape[1]), static_cast<int>(a.q8.shape[2]),
          static_cast<int>(a.q8.shape[3]), static_cast<int>(a.k8.shape[1]), static_cast<int>(a.k8.shape[2]), 0.0f};
  s.softmax_scale = a.softmax_scale > 0.0f ? a.softmax_scale : 1.0f / std::sqrt(static_cast<float>(s.d));
  return s;
}

// Decoded k and v of one (batch, kv head), with the scale of every key row.
struct KvHead {
  std::vector<float> k, v, k_scale, v_scale;
  void load(const Fp8AttentionArgs& a, const Shape& s, int b, int hk) {
    k.resize(static_cast<std::size_t>(s.seqlen_k) * s.d);
    v.resize(k.size());
    k_scale.resize(s.seqlen_k);
    v_scale.resize(s.seqlen_k);
    for (int j = 0; j < s.seqlen_k; ++j) {
      decode_row(a.k8, b, j, hk, &k[static_cast<std::size_t>(j) * s.d]);
      decode_row(a.v8, b, j, hk, &v[static_cast<std::size_t>(j) * s.d]);
      k_scale[j] = scale_of(a.k_descale, a.granularity, b, hk, j, a.block_rows_kv);
      v_scale[j] = scale_of(a.v_descale, a.granularity, b, hk, j, a.block_rows_kv);
    }
  }
  float dot(const float* q, int j, int d) const {
    float acc = 0.0f;
    for (int c = 0; c < d; ++c) acc += q[c] * k[static_cast<std::size_t>(j) * d + c];
    return acc;
  }
};

}  // namespace

std::vector<float> fp8_attention(const Fp8AttentionArgs& a) {
  const Shape sh = shape_of(a);
  const int d = sh.d, seqlen_k = sh.seqlen_k;
  std::vector<float> out(static_cast<std::size_t>(sh.batch) * sh.seqlen_q * sh.heads_q * d);
  KvHead kv;
  const std::vector<float>& v = kv.v;
  const std::vector<float>& v_scale = kv.v_scale;
  std::vector<float> q(d), acc(d), run(d), s(a.tile_k);
  for (int b = 0; b < sh.batch; ++b) {
    for (int h = 0; h < sh.heads_q; ++h) {
      kv.load(a, sh, b, h / (sh.heads_q / sh.heads_kv));
      for (int i = 0; i < sh.seqlen_q; ++i) {
        decode_row(a.q8, b, i, h, q.data());
        const float q_scale = scale_of(a.q_descale, a.granularity, b, h, i, a.block_rows_q);
        float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int t0 = 0; t0 < seqlen_k; t0 += a.tile_k) {
          const int t1 = std::min(seqlen_k, t0 + a.tile_k);
          float tile_max = -std::numeric_limits<float>::infinity();
          for (int j = t0; j < t1; ++j) {
            s[j - t0] = kv.dot(q.data(), j, d) * (q_scale * kv.k_scale[j] * sh.softmax_scale);
            tile_max = std::max(tile_max, s[j - t0]);
          }
          const float m_new = std::max(m, tile_max);
          const float alpha = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
          l *= alpha;
          for (float& o : acc) o *= alpha;
          std::fill(run.begin(), run.end(), 0.0f);
          float tile_v = 0.0f;  // p_carries_v_ratio: the tile's largest v scale
          if (a.p_carries_v_ratio) {
            for (int j = t0; j < t1; ++j) tile_v = std::max(tile_v, v_scale[j]);
          }
          for (int j = t0; j < t1; ++j) {
            const float p = std::exp(s[j - t0] - m_new) * kPOffset;
            l += p;
            const float p8 = to_e4m3_rn(a.p_carries_v_ratio ? p * (v_scale[j] / tile_v) : p);
            for (int c = 0; c < d; ++c) run[c] += p8 * v[static_cast<std::size_t>(j) * d + c];
            const bool run_ends = j + 1 == t1 || (!a.p_carries_v_ratio && v_scale[j + 1] != v_scale[j]);
            if (run_ends) {  // the tile's end, or the end of a run of keys sharing a v scale
              const float run_scale = a.p_carries_v_ratio ? tile_v : v_scale[j];
              for (int c = 0; c < d; ++c) acc[c] += run[c] * run_scale;
              std::fill(run.begin(), run.end(), 0.0f);
            }
          }
          m = m_new;
        }
        float* o = &out[((static_cast<std::size_t>(b) * sh.seqlen_q + i) * sh.heads_q + h) * d];
        for (int c = 0; c < d; ++c) o[c] = acc[c] / l;
      }
    }
  }
  return out;
}

std::vector<float> standard_fp8_attention(const Fp8AttentionArgs& a) {
  const Shape sh = shape_of(a);
  const int d = sh.d;
  std::vector<float> out(static_cast<std::size_t>(sh.batch) * sh.seqlen_q * sh.heads_q * d);
  KvHead kv;
  std::vector<float> q(d), p(sh.seqlen_k), acc(d);
  for (int b = 0; b < sh.batch; ++b) {
    for (int h = 0; h < sh.heads_q; ++h) {
      kv.load(a, sh, b, h / (sh.heads_q / sh.heads_kv));
      for (int i = 0; i < sh.seqlen_q; ++i) {
        decode_row(a.q8, b, i, h, q.data());
        const float q_scale = scale_of(a.q_descale, a.granularity, b, h, i, a.block_rows_q);
        float m = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < sh.seqlen_k; ++j) {
          p[j] = to_fp16_rn(kv.dot(q.data(), j, d) * (q_scale * kv.k_scale[j] * sh.softmax_scale));
          m = std::max(m, p[j]);
        }
        float l = 0.0f;
        for (int j = 0; j < sh.seqlen_k; ++j) l += (p[j] = to_fp16_rn(std::exp(to_fp16_rn(p[j] - m))));
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int j = 0; j < sh.seqlen_k; ++j) {
          const float p8 = to_e4m3_rn(to_fp16_rn(p[j] / l)) * kv.v_scale[j];
          for (int c = 0; c < d; ++c) acc[c] += p8 * kv.v[static_cast<std::size_t>(j) * d + c];
        }
        float* o = &out[((static_cast<std::size_t>(b) * sh.seqlen_q + i) * sh.heads_q + h) * d];
        for (int c = 0; c < d; ++c) o[c] = acc[c];
      }
    }
  }
  return out;
}

}  // namespace hopattn::reference
