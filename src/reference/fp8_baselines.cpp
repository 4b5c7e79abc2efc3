#include "reference/fp8_baselines.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "reference/fp8_rounding.hpp"

namespace hopattn::reference {
namespace {

std::size_t at(const DenseInputs& in, int b, int s, int seqlen, int h, int heads) {
  return ((static_cast<std::size_t>(b) * seqlen + s) * heads + h) * in.head_dim;
}

float round_to(float x, Dtype dtype) { return dtype == Dtype::kBFloat16 ? to_bf16_rn(x) : to_fp16_rn(x); }

// Calls row(b, h, hk, i, q_row, out_row) for every query row: the loop every variant shares.
template <typename Out, typename RowFn>
std::vector<Out> for_each_row(const DenseInputs& in, RowFn row) {
  std::vector<Out> out(static_cast<std::size_t>(in.batch) * in.seqlen_q * in.heads_q * in.head_dim);
  for (int b = 0; b < in.batch; ++b) {
    for (int h = 0; h < in.heads_q; ++h) {
      const int hk = h / (in.heads_q / in.heads_kv);
      for (int i = 0; i < in.seqlen_q; ++i) {
        row(b, hk, &in.q[at(in, b, i, in.seqlen_q, h, in.heads_q)], &out[at(in, b, i, in.seqlen_q, h, in.heads_q)]);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<double> attention_f64(const DenseInputs& in) {
  const int d = in.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> s(in.seqlen_k);
  return for_each_row<double>(in, [&](int b, int hk, const float* q, double* o) {
    double m = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < in.seqlen_k; ++j) {
      const float* k = &in.k[at(in, b, j, in.seqlen_k, hk, in.heads_kv)];
      double dot = 0.0;
      for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
      s[j] = dot * scale;
      m = std::max(m, s[j]);
    }
    double l = 0.0;
    for (int j = 0; j < in.seqlen_k; ++j) l += (s[j] = std::exp(s[j] - m));
    for (int j = 0; j < in.seqlen_k; ++j) {
      const float* v = &in.v[at(in, b, j, in.seqlen_k, hk, in.heads_kv)];
      for (int c = 0; c < d; ++c) o[c] += s[j] / l * v[c];
    }
  });
}

std::vector<float> flash_attention_16bit(const DenseInputs& in, Dtype dtype, int tile_k) {
  const int d = in.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> s(tile_k), acc(d);
  return for_each_row<float>(in, [&](int b, int hk, const float* q, float* o) {
    float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int t0 = 0; t0 < in.seqlen_k; t0 += tile_k) {
      const int t1 = std::min(in.seqlen_k, t0 + tile_k);
      float m_new = m;
      for (int j = t0; j < t1; ++j) {
        const float* k = &in.k[at(in, b, j, in.seqlen_k, hk, in.heads_kv)];
        float dot = 0.0f;
        for (int c = 0; c < d; ++c) dot += q[c] * k[c];
        s[j - t0] = dot * scale;
        m_new = std::max(m_new, s[j - t0]);
      }
      const float alpha = std::exp(m - m_new);
      l *= alpha;
      for (float& x : acc) x *= alpha;
      for (int j = t0; j < t1; ++j) {
        const float p = std::exp(s[j - t0] - m_new);
        l += p;
        const float p16 = round_to(p, dtype);
        const float* v = &in.v[at(in, b, j, in.seqlen_k, hk, in.heads_kv)];
        for (int c = 0; c < d; ++c) acc[c] += p16 * v[c];
      }
      m = m_new;
    }
    for (int c = 0; c < d; ++c) o[c] = round_to(acc[c] / l, dtype);
  });
}

std::vector<float> standard_attention_fp16(const DenseInputs& in) {
  const int d = in.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> p(in.seqlen_k), acc(d);
  return for_each_row<float>(in, [&](int b, int hk, const float* q, float* o) {
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < in.seqlen_k; ++j) {
      const float* k = &in.k[at(in, b, j, in.seqlen_k, hk, in.heads_kv)];
      float dot = 0.0f;
      for (int c = 0; c < d; ++c) dot += q[c] * k[c];
      p[j] = to_fp16_rn(scale * dot);
      m = std::max(m, p[j]);
    }
    float l = 0.0f;
    for (int j = 0; j < in.seqlen_k; ++j) l += (p[j] = to_fp16_rn(std::exp(to_fp16_rn(p[j] - m))));
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int j = 0; j < in.seqlen_k; ++j) {
      const float pj = to_fp16_rn(p[j] / l);
      const float* v = &in.v[at(in, b, j, in.seqlen_k, hk, in.heads_kv)];
      for (int c = 0; c < d; ++c) acc[c] += pj * v[c];
    }
    for (int c = 0; c < d; ++c) o[c] = to_fp16_rn(acc[c]);
  });
}

double rmse(const std::vector<float>& x, const std::vector<double>& reference) {
  if (x.size() != reference.size() || x.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = x[i] - reference[i];
    sum += e * e;
  }
  return std::sqrt(sum / static_cast<double>(x.size()));
}

}  // namespace hopattn::reference
