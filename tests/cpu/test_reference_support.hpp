// Shared pieces of the reference-backend tests: fresh seeds, an independent materialized-softmax
// attention in float64, a description of where each sequence's rows live, and the public-API calls.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/host_tensor.hpp"
#include "cpu/sequence_arrays.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {

inline std::uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

struct MaskSpec {
  double scale = 0.0;  // the resolved softmax scale
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  int attention_chunk = 0;  // 0 = off
  double softcap = 0.0;
  std::vector<double> sinks;  // learnable sinks, one per q head (empty: none)
};

// softmax_scale is a float32 argument: its default is 1/sqrt(d) rounded to float32, the value the
// kernels multiply by. (Using the double 1/sqrt(d) moves outputs by ~1e-8 relative, enough to flip
// a correctly rounded 16-bit output.)
inline double default_scale(int head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// Where each sequence's rows sit in the packed (rows, heads, d) buffers used by the tests: dense
// tensors (batch, seqlen, heads, d) are the same memory as packed (batch * seqlen, heads, d).
struct Packing {
  std::vector<int> q_start, q_len, k_start, k_len;
  int batch() const { return static_cast<int>(q_len.size()); }

  static Packing dense(int batch, int seqlen_q, int seqlen_k) {
    Packing p;
    for (int b = 0; b < batch; ++b) {
      p.q_start.push_back(b * seqlen_q);
      p.q_len.push_back(seqlen_q);
      p.k_start.push_back(b * seqlen_k);
      p.k_len.push_back(seqlen_k);
    }
    return p;
  }
  static Packing varlen(const std::vector<int>& len_q, const std::vector<int>& len_k) {
    Packing p;
    p.q_len = len_q;
    p.k_len = len_k;
    int q = 0, k = 0;
    for (std::size_t b = 0; b < len_q.size(); ++b) {
      p.q_start.push_back(q);
      p.k_start.push_back(k);
      q += len_q[b];
      k += len_k[b];
    }
    return p;
  }
};

// Attention of one sequence, straight from the definition: build the full score matrix, set masked
// entries to -inf, softmax each row. q, k (s, heads, d), v (sk, hkv, dv), out (sq, hq, dv), lse (hq, sq);
// dv 0: d.
inline void naive_attention(const double* q, const double* k, const double* v, int sq, int sk, int hq, int hkv,
                            int d, const MaskSpec& mask, double* out, double* lse, int dv = 0) {
  const double inf = std::numeric_limits<double>::infinity();
  if (dv == 0) dv = d;
  for (int h = 0; h < hq; ++h) {
    const int hk = h / (hq / hkv);
    for (int i = 0; i < sq; ++i) {
      std::vector<double> s(sk);
      for (int j = 0; j < sk; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += q[(i * hq + h) * d + c] * k[(j * hkv + hk) * d + c];
        s[j] = mask.scale * dot;
        if (mask.softcap > 0) s[j] = mask.softcap * std::tanh(s[j] / mask.softcap);
        const long shift = static_cast<long>(sk) - sq;
        bool masked = false;
        if (mask.causal && j > i + shift) masked = true;
        if (mask.window_left >= 0 && j < i + shift - mask.window_left) masked = true;
        if (mask.window_right >= 0 && j > i + shift + mask.window_right) masked = true;
        // Chunks: key j's chunk must hold the diagonal (floor division; j >= 0).
        if (mask.attention_chunk > 0 &&
            std::floor(static_cast<double>(i + shift) / mask.attention_chunk) != j / mask.attention_chunk)
          masked = true;
        if (masked) s[j] = -inf;
      }
      // As gpt-oss materializes a sink: one more logit in the softmax, dropped before P V.
      if (!mask.sinks.empty()) s.push_back(mask.sinks[h]);
      double m = -inf;
      for (double x : s) m = std::max(m, x);
      double* o = out + (i * hq + h) * dv;
      for (int c = 0; c < dv; ++c) o[c] = 0;
      if (m == -inf) {
        lse[h * sq + i] = -inf;
        continue;
      }
      double z = 0;
      for (double x : s) z += std::exp(x - m);
      for (int j = 0; j < sk; ++j)
        for (int c = 0; c < dv; ++c) o[c] += std::exp(s[j] - m) / z * v[(j * hkv + hk) * dv + c];
      lse[h * sq + i] = m + std::log(z);
    }
  }
}

// naive_attention over every sequence of a packed batch. out (total_q, hq, dv); lse (hq, total_q); dv 0: d.
inline void naive_batch(const Packing& pack, const std::vector<double>& q, const std::vector<double>& k,
                        const std::vector<double>& v, int hq, int hkv, int d, const MaskSpec& mask,
                        std::vector<double>* out, std::vector<double>* lse, int dv = 0) {
  if (dv == 0) dv = d;
  const int total_q = static_cast<int>(q.size() / (static_cast<std::size_t>(hq) * d));
  out->assign(static_cast<std::size_t>(total_q) * hq * dv, 0.0);
  lse->assign(static_cast<std::size_t>(hq) * total_q, 0.0);
  for (int b = 0; b < pack.batch(); ++b) {
    const int sq = pack.q_len[b], sk = pack.k_len[b];
    std::vector<double> o(static_cast<std::size_t>(sq) * hq * dv), l(static_cast<std::size_t>(hq) * sq);
    naive_attention(q.data() + static_cast<std::size_t>(pack.q_start[b]) * hq * d,
                    k.data() + static_cast<std::size_t>(pack.k_start[b]) * hkv * d,
                    v.data() + static_cast<std::size_t>(pack.k_start[b]) * hkv * dv, sq, sk, hq, hkv, d, mask,
                    o.data(), l.data(), dv);
    std::copy(o.begin(), o.end(), out->begin() + static_cast<std::ptrdiff_t>(pack.q_start[b]) * hq * dv);
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < sq; ++i) (*lse)[static_cast<std::size_t>(h) * total_q + pack.q_start[b] + i] = l[h * sq + i];
  }
}

// Dense LSE (batch, hq, seqlen_q) -> the packed (hq, batch * seqlen_q) order naive_batch produces.
inline std::vector<double> dense_lse_to_packed(const std::vector<double>& lse, int batch, int hq, int sq) {
  std::vector<double> packed(lse.size());
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < sq; ++i) packed[(static_cast<std::size_t>(h) * batch + b) * sq + i] = lse[(static_cast<std::size_t>(b) * hq + h) * sq + i];
  return packed;
}

// Largest |a - b| / (atol + rtol * |b|) over the elements; NaN anywhere (either side) gives +inf.
// -inf == -inf counts as equal (empty rows' LSE).
inline double worst_ratio(const std::vector<double>& a, const std::vector<double>& b, double atol, double rtol) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (a[i] == b[i]) continue;  // also equal infinities
    if (std::isinf(a[i]) || std::isinf(b[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(a[i] - b[i]) / (atol + rtol * std::fabs(b[i])));
  }
  return worst;
}

#define EXPECT_ALL_CLOSE(actual, expected, atol, rtol) \
  EXPECT_LE(::hopattn::test::worst_ratio((actual), (expected), (atol), (rtol)), 1.0) << "tolerance atol=" << (atol) << " rtol=" << (rtol)

// Forward arguments over these host tensors; the caller sets the rest.
inline FwdArgs forward_args(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& out,
                            const HostTensor& lse) {
  FwdArgs args;
  args.q = q.tensor();
  args.k = k.tensor();
  args.v = v.tensor();
  args.out = out.tensor();
  args.lse = lse.tensor();
  return args;
}

inline Tensor int_tensor(std::vector<int>& values) {
  return make_tensor(values.data(), Dtype::kInt32, {static_cast<std::int64_t>(values.size())});
}

}  // namespace hopattn::test
