// The softmax of one query row, shared by the forward and backward passes so both use exactly the
// same function: s_j = scale * q.k_j, optionally softcapped (s -> c * tanh(s / c)), masked to the
// visible keys, then P_j = exp(s_j - lse). A learnable sink (FwdArgs::learnable_sink) is one more
// logit in lse with no value (-inf: none).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "reference/mask.hpp"

namespace hopattn::reference {

// Row-major (rows x cols) doubles: the q, k, v, ... rows of one (sequence, head) gathered for reuse.
struct Matrix {
  int rows = 0, cols = 0;
  std::vector<double> values;
  Matrix(int rows_, int cols_) : rows(rows_), cols(cols_), values(static_cast<std::size_t>(rows_) * cols_, 0.0) {}
  double* row(int r) { return values.data() + static_cast<std::size_t>(r) * cols; }
  const double* row(int r) const { return values.data() + static_cast<std::size_t>(r) * cols; }
};

struct RowSoftmax {
  KeyRange keys;
  std::vector<double> probs;     // P_j for j in keys, stored at j - keys.begin
  std::vector<double> cap_slope; // d(capped score)/d(scaled score) = 1 - tanh^2; 1 without softcap
  double lse = -std::numeric_limits<double>::infinity();  // -inf when no key is visible (and no sink)
  double sink_prob = 0.0;        // exp(sink - lse)
};

// qv (FwdArgs::qv), when given: its row, whose dot products with v's rows join q's with k's.
inline RowSoftmax row_softmax(const double* q, const Matrix& k, KeyRange keys, double scale, double softcap,
                              double sink, const double* qv = nullptr, const Matrix* v = nullptr) {
  RowSoftmax row;
  row.keys = keys;
  row.probs.resize(keys.size());
  row.cap_slope.assign(keys.size(), 1.0);
  double max_score = sink;
  if (keys.size() == 0 && sink == -std::numeric_limits<double>::infinity()) return row;
  for (int j = keys.begin; j < keys.end; ++j) {
    const double* kj = k.row(j);
    double dot = 0.0;
    for (int c = 0; c < k.cols; ++c) dot += q[c] * kj[c];
    if (qv != nullptr) {
      const double* vj = v->row(j);
      for (int c = 0; c < v->cols; ++c) dot += qv[c] * vj[c];
    }
    double score = scale * dot;
    if (softcap > 0.0) {
      const double t = std::tanh(score / softcap);
      score = softcap * t;
      row.cap_slope[j - keys.begin] = 1.0 - t * t;
    }
    row.probs[j - keys.begin] = score;
    max_score = std::max(max_score, score);
  }
  double sum = std::exp(sink - max_score);
  for (double& p : row.probs) sum += (p = std::exp(p - max_score));
  for (double& p : row.probs) p /= sum;
  row.sink_prob = std::exp(sink - max_score) / sum;
  row.lse = max_score + std::log(sum);
  return row;
}

}  // namespace hopattn::reference
