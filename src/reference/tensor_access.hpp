// Strided element access for host tensors, and the row addressing of every layout the library accepts:
// dense, varlen (cu_seqlens), seqused_k / seqused_q, and paged K/V. Rows are the head_dim vectors:
// contiguous, except in an fp8 v given with its keys contiguous (V^T in memory), hence the loads'
// element step.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "api/problem.hpp"
#include "reference/numeric.hpp"

namespace hopattn::reference {

// Pointer to element (i0, i1, i2, i3) of a host view; unused trailing indices are 0.
inline char* element_ptr(const Tensor& t, std::int64_t i0, std::int64_t i1 = 0, std::int64_t i2 = 0,
                         std::int64_t i3 = 0) {
  const std::int64_t index[kMaxRank] = {i0, i1, i2, i3};
  std::int64_t offset = 0;
  for (int d = 0; d < t.rank; ++d) offset += index[d] * t.stride[d];
  return static_cast<char*>(t.data) + offset * static_cast<std::int64_t>(dtype_size(t.dtype));
}

inline int read_int(const Tensor& t, std::int64_t i0, std::int64_t i1 = 0) {
  return static_cast<int>(load_scalar(element_ptr(t, i0, i1), t.dtype));
}

// Head h's learnable sink (FwdArgs::learnable_sink), -inf without one.
inline double learnable_sink(const std::optional<Tensor>& sink, int head) {
  return sink ? load_scalar(element_ptr(*sink, head), sink->dtype) : -std::numeric_limits<double>::infinity();
}

// row[c] = scale * p[c] for the `count` elements of tensor t's row at p (stepping by t's last stride).
inline void load_row(const Tensor& t, const char* p, int count, double scale, double* row) {
  const std::int64_t step = t.stride[t.rank - 1] * static_cast<std::int64_t>(dtype_size(t.dtype));
  for (int c = 0; c < count; ++c) row[c] = scale * load_scalar(p + c * step, t.dtype);
}

inline void store_row(char* p, Dtype dtype, int count, const double* row) {
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(dtype));
  for (int c = 0; c < count; ++c) store_scalar(p + c * size, dtype, row[c]);
}

// Writes `value` to every element of a host view (any rank, any strides).
inline void fill_tensor(const Tensor& t, double value) {
  std::int64_t extent[kMaxRank] = {1, 1, 1, 1};
  for (int d = 0; d < t.rank; ++d) extent[d] = t.shape[d];
  for (std::int64_t a = 0; a < extent[0]; ++a)
    for (std::int64_t b = 0; b < extent[1]; ++b)
      for (std::int64_t c = 0; c < extent[2]; ++c)
        for (std::int64_t e = 0; e < extent[3]; ++e) store_scalar(element_ptr(t, a, b, c, e), t.dtype, value);
}

// Where each sequence's query rows, key rows and LSE entries live.
class SequenceLayout {
 public:
  SequenceLayout(const detail::Problem& problem, const std::optional<Tensor>& cu_seqlens_q,
                 const std::optional<Tensor>& cu_seqlens_k, const std::optional<Tensor>& seqused_k,
                 const std::optional<Tensor>& seqused_q, const std::optional<Tensor>& page_table)
      : problem_(problem), page_table_(problem.paged ? page_table : std::nullopt) {
    for (int b = 0; b < problem.batch; ++b) {
      q_start_.push_back(problem.varlen_q ? read_int(*cu_seqlens_q, b) : 0);
      int len_q = problem.varlen_q ? read_int(*cu_seqlens_q, b + 1) - q_start_.back() : problem.seqlen_q;
      if (problem.has_seqused_q) len_q = read_int(*seqused_q, b);
      len_q_.push_back(len_q);
      k_start_.push_back(problem.varlen_k ? read_int(*cu_seqlens_k, b) : 0);
      int len_k = problem.varlen_k ? read_int(*cu_seqlens_k, b + 1) - k_start_.back() : problem.seqlen_k;
      if (problem.has_seqused_k) len_k = read_int(*seqused_k, b);
      len_k_.push_back(len_k);
    }
  }

  // The rows and keys sequence b uses (seqused_q / seqused_k when given).
  int len_q(int b) const { return len_q_[b]; }
  int len_k(int b) const { return len_k_[b]; }

  // Query-side row (q, out, dout, dq) of sequence b, position i, head h.
  char* q_row(const Tensor& t, int b, int i, int h) const {
    return problem_.varlen_q ? element_ptr(t, q_start_[b] + i, h) : element_ptr(t, b, i, h);
  }

  // Key-side row (k, v, dk, dv) of sequence b, position j, kv head h.
  char* k_row(const Tensor& t, int b, int j, int h) const {
    if (page_table_) {
      const int page = read_int(*page_table_, b, j / problem_.page_size);
      return element_ptr(t, page, j % problem_.page_size, h);
    }
    // Paged K/V addressed through cu_seqlens_k use the page table above, never this offset.
    return problem_.varlen_k ? element_ptr(t, k_start_[b] + j, h) : element_ptr(t, b, j, h);
  }

  // LSE entry: (batch, heads_q, seqlen_q) dense, (heads_q, total_q) varlen.
  char* lse_entry(const Tensor& lse, int b, int h, int i) const {
    return problem_.varlen_q ? element_ptr(lse, h, q_start_[b] + i) : element_ptr(lse, b, h, i);
  }

 private:
  const detail::Problem& problem_;
  std::optional<Tensor> page_table_;
  std::vector<int> q_start_, len_q_, k_start_, len_k_;
};

}  // namespace hopattn::reference
