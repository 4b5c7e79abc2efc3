// What the GPU tests of batches of independent sequences (varlen_case.cu, paged_case.cu,
// backward_varlen_case.cu) share. Each sequence of such a call is an ordinary attention problem of its
// own lengths, judged against the float32 GPU reference run on that sequence alone, through batch-1
// views, by the rule of the dense tests (forward_case.cu). Here: the settings every sequence of a call
// shares, rows of (heads, d) elements (optionally padded, optionally bracketed by guard rows), the
// float32 LSE with padding, outputs poisoned with NaN, the per-sequence comparison with its NaN and
// written-outside checks, and the loop of a random sweep. Header-only: everything here is inline or a
// template.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_reference.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {

constexpr int kGuardRows = 192;  // poisoned rows before and after out: more than one 128-row tile
constexpr int kLsePad = 192;     // poisoned LSE entries before the first head's row and after each
constexpr int kRowPad = 8;       // elements added after each head of a row with padded_rows (16 bytes)

constexpr Dtype kBf16 = Dtype::kBFloat16, kFp16 = Dtype::kFloat16;

inline std::string join(const std::vector<int>& values) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < values.size(); ++i) s << (i ? " " : "") << values[i];
  s << "]";
  return s.str();
}

inline bool all_equal(const std::vector<int>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
}

// Entry b is where sequence b's rows start; the last entry is the row count. For a dense side (all
// lengths equal) that is b * seqlen, the rows of a (batch, seqlen, ...) tensor.
inline std::vector<int> prefix_sums(const std::vector<int>& lengths) {
  std::vector<int> sums(1, 0);
  for (int n : lengths) sums.push_back(sums.back() + n);
  return sums;
}

inline Tensor cuda_view(void* data, Dtype dtype, std::initializer_list<std::int64_t> shape,
                        std::initializer_list<std::int64_t> stride) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = DeviceType::kCuda;
  t.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), t.shape);
  std::copy(stride.begin(), stride.end(), t.stride);
  return t;
}

// Rows of (heads, d) elements: head h of row r starts at row(r) + h * head_stride elements.
struct RowView {
  char* base = nullptr;
  Dtype dtype = kBf16;
  int heads = 0, head_dim = 0;
  std::int64_t row_stride = 0, head_stride = 0;

  char* row(std::int64_t r) const { return base + r * row_stride * std::int64_t(dtype_size(dtype)); }
  // What forward takes for q, k, v or out: (total, heads, d) for a varlen side, (batch, seqlen, heads, d)
  // for a dense one.
  Tensor api_tensor(const std::vector<int>& starts, bool varlen) const {
    const std::int64_t total = starts.back(), batch = std::int64_t(starts.size()) - 1;
    if (varlen) return cuda_view(base, dtype, {total, heads, head_dim}, {row_stride, head_stride, 1});
    const std::int64_t seqlen = total / batch;
    return cuda_view(base, dtype, {batch, seqlen, heads, head_dim}, {seqlen * row_stride, row_stride, head_stride, 1});
  }
  // The rows as a pool of pages (num_pages, page_size, heads, d): page p is rows [p, p + 1) * page_size.
  Tensor pages(int num_pages, int page_size) const {
    return cuda_view(base, dtype, {num_pages, page_size, heads, head_dim},
                     {page_size * row_stride, row_stride, head_stride, 1});
  }
  // Rows [start, start + len) as a batch-1 (1, len, heads, d) view: one sequence for the reference.
  Tensor sequence(int start, int len) const {
    return cuda_view(row(start), dtype, {1, len, heads, head_dim}, {len * row_stride, row_stride, head_stride, 1});
  }
  // The heads [first, first + count) of every row, e.g. k within a packed qkv buffer.
  RowView heads_slice(int first, int count) const {
    RowView v = *this;
    v.base += first * head_stride * std::int64_t(dtype_size(dtype));
    v.heads = count;
    return v;
  }
};

// An allocation of `rows` rows with `guard` spare rows before and after them.
struct RowBuffer {
  DeviceBuffer storage;
  std::int64_t elements = 0;
  RowView view;  // row 0 is the first row after the leading guard
};

inline RowBuffer make_rows(Dtype dtype, std::int64_t rows, int heads, int head_dim, bool padded, int guard) {
  RowBuffer b;
  b.view.dtype = dtype;
  b.view.heads = heads;
  b.view.head_dim = head_dim;
  b.view.head_stride = head_dim + (padded ? kRowPad : 0);
  b.view.row_stride = heads * b.view.head_stride;
  b.elements = (rows + 2 * guard) * b.view.row_stride;
  b.storage = DeviceBuffer(b.elements * dtype_size(dtype));
  b.view.base = b.storage.as<char>() + guard * b.view.row_stride * std::int64_t(dtype_size(dtype));
  return b;
}

// q, k and v: fresh normal values over their whole storage, padding included, from `seed` (q scaled by
// `amplitude`).
inline void fill_inputs(const RowBuffer& q, const RowBuffer& k, const RowBuffer& v, std::uint64_t seed,
                        float amplitude) {
  fill_normal(q.storage.data(), q.view.dtype, q.elements, splitmix64(seed ^ 1), amplitude);
  fill_normal(k.storage.data(), k.view.dtype, k.elements, splitmix64(seed ^ 2));
  fill_normal(v.storage.data(), v.view.dtype, v.elements, splitmix64(seed ^ 3));
}

// Every element of a row flagged in `flags` (rows of row_elements elements) set to `value`: what a
// caller's memory may hold in rows no sequence uses (a paged cache's spare pages and page tails, rows
// past seqused_k).
template <typename T>
__global__ void fill_flagged_rows_kernel(T* data, std::int64_t n, std::int64_t row_elements,
                                         const std::uint8_t* flags, float value) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    if (flags[i / row_elements]) data[i] = from_float<T>(value);
}

inline void fill_flagged_rows(const RowBuffer& rows, const DeviceBuffer& flags, float value) {
  dispatch_float_dtype(rows.view.dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_flagged_rows_kernel<T><<<grid_for(rows.elements), 256>>>(
        rows.storage.as<T>(), rows.elements, rows.view.row_stride, flags.as<std::uint8_t>(), value);
  });
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

// 1 for each of the `rows` rows that no sequence uses: past the first used(b) of sequence b (its
// seqused_k or seqused_q entry), or after the last sequence (starts: where each sequence's rows start).
template <class Used>
std::vector<std::uint8_t> unused_rows(const std::vector<int>& starts, Used&& used, int rows) {
  std::vector<std::uint8_t> unused(rows, 1);
  for (std::size_t b = 0; b + 1 < starts.size(); ++b) std::fill_n(unused.begin() + starts[b], used(b), std::uint8_t{0});
  return unused;
}

// The q, k and v of a variable-length case: fresh normal values over their whole storage, padding
// included; with packed_qkv the three are head slices of one (total_q, hq + 2 hkv, d) buffer (q_rows),
// else k and v have k_rows_stored rows each, with unused_row_value every k/v row no sequence uses
// holds that value, and every q row past seqused_q holds NaN (what must never be read). Case: the
// forward's and the backward's variable-length cases, which name these fields alike.
struct SequenceInputs {
  RowBuffer q_rows, k_rows, v_rows;
  RowView q, k, v;
};

template <class Case>
SequenceInputs make_sequence_inputs(const Case& c, const std::vector<int>& starts_k, int total_q, int k_rows_stored,
                                    std::uint64_t seed) {
  const int hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  SequenceInputs in;
  if (c.packed_qkv) {
    in.q_rows = make_rows(c.dtype, total_q, hq + 2 * hkv, d, c.padded_rows, 0);
    fill_normal(in.q_rows.storage.data(), c.dtype, in.q_rows.elements, splitmix64(seed ^ 1), c.amplitude);
    in.q = in.q_rows.view.heads_slice(0, hq);
    in.k = in.q_rows.view.heads_slice(hq, hkv);
    in.v = in.q_rows.view.heads_slice(hq + hkv, hkv);
    return in;
  }
  in.q_rows = make_rows(c.dtype, total_q, hq, d, c.padded_rows, 0);
  in.k_rows = make_rows(c.dtype, k_rows_stored, hkv, d, c.padded_rows, 0);
  in.v_rows = make_rows(c.dtype, k_rows_stored, hkv, d, c.padded_rows, 0);
  fill_inputs(in.q_rows, in.k_rows, in.v_rows, seed, c.amplitude);
  in.q = in.q_rows.view, in.k = in.k_rows.view, in.v = in.v_rows.view;
  if (c.unused_row_value) {
    const DeviceBuffer flags = upload(unused_rows(starts_k, [&](int b) { return c.used_k(b); }, k_rows_stored));
    fill_flagged_rows(in.k_rows, flags, *c.unused_row_value);
    fill_flagged_rows(in.v_rows, flags, *c.unused_row_value);
  }
  if (c.seqused_q) {
    const DeviceBuffer flags = upload(unused_rows(prefix_sums(c.len_q), [&](int b) { return c.used_q(b); }, total_q));
    fill_flagged_rows(in.q_rows, flags, NAN);
  }
  return in;
}

// The float32 LSE, (heads_q, total_q) for varlen q or (batch, heads_q, seqlen_q) for dense q, each
// head's row followed by kLsePad poisoned entries and the first preceded by as many.
struct LseBuffer {
  DeviceBuffer storage;
  std::int64_t elements = 0;
  float* base = nullptr;
  std::int64_t head_stride = 0;
  std::vector<std::int64_t> sequence_offset;  // of entry (sequence b, head 0, row 0) from base
  Tensor api_tensor;

  LseBuffer(const std::vector<int>& starts_q, bool varlen_q, int heads_q) {
    const std::int64_t total = starts_q.back(), batch = std::int64_t(starts_q.size()) - 1;
    const std::int64_t row = (varlen_q ? total : total / batch) + kLsePad;
    head_stride = row;
    elements = kLsePad + (varlen_q ? 1 : batch) * heads_q * row;
    storage = DeviceBuffer(elements * sizeof(float));
    base = storage.as<float>() + kLsePad;
    for (std::int64_t b = 0; b < batch; ++b) sequence_offset.push_back(varlen_q ? starts_q[b] : b * heads_q * row);
    api_tensor = varlen_q ? cuda_view(base, Dtype::kFloat32, {heads_q, total}, {row, 1})
                          : cuda_view(base, Dtype::kFloat32, {batch, heads_q, total / batch}, {heads_q * row, row, 1});
  }
  // Sequence b's entries as a (1, 1, heads_q, len) view, the layout of the reference's LSE.
  Tensor sequence(int b, int heads_q, int len) const {
    return cuda_view(base + sequence_offset[b], Dtype::kFloat32, {1, 1, heads_q, len}, {0, 0, head_stride, 1});
  }
};

// out (the rows of q's layout) bracketed by kGuardRows rows on each side, and the LSE when wanted:
// everything poisoned with NaN, guards and padding included.
struct PoisonedOutputs {
  RowBuffer out;
  std::optional<LseBuffer> lse;

  PoisonedOutputs() = default;
  PoisonedOutputs(Dtype dtype, const std::vector<int>& starts_q, bool varlen_q, int heads_q, int head_dim,
                  bool padded_rows, bool with_lse) {
    out = make_rows(dtype, starts_q.back(), heads_q, head_dim, padded_rows, kGuardRows);
    poison_nan(out.storage.data(), dtype, out.elements);
    if (with_lse) {
      lse.emplace(starts_q, varlen_q, heads_q);
      poison_nan(lse->storage.data(), Dtype::kFloat32, lse->elements);
    }
  }
  // args.out and (when there is one) args.lse over these buffers.
  void set_args(FwdArgs& args, const std::vector<int>& starts_q, bool varlen_q) const {
    args.out = out.view.api_tensor(starts_q, varlen_q);
    if (lse) args.lse = lse->api_tensor;
  }
};

// What every sequence of a call shares (besides the lengths, which each test keeps its own way).
struct CallSettings {
  int heads_q = 4, heads_kv = 4, head_dim = 128;
  Dtype dtype = kBf16;
  bool causal = false;
  int window_left = -1, window_right = -1;
  int attention_chunk = 0;
  float softcap = 0.0f;
  std::optional<float> softmax_scale;
  bool with_lse = true;
  float amplitude = 1.0f;    // q is drawn from amplitude * N(0, 1): larger = peakier softmax
  bool padded_rows = false;  // q, k, v and out: kRowPad spare elements after each head
  KernelOptions::PackGqa pack_gqa = KernelOptions::PackGqa::kAuto;
  KernelOptions::KvLoads kv_loads = KernelOptions::KvLoads::kAuto;
  int num_splits = 0;  // FwdArgs::num_splits

  // " hq .. hkv .. d .. dtype[ causal][ window (l, r)][ softcap ..][ scale ..] lse|no-lse amplitude ..[ padded-rows]"
  void describe_to(std::ostream& s) const {
    s << " hq " << heads_q << " hkv " << heads_kv << " d " << head_dim << " " << dtype_name(dtype)
      << (causal ? " causal" : "");
    if (window_left >= 0 || window_right >= 0) s << " window (" << window_left << ", " << window_right << ")";
    if (attention_chunk > 0) s << " chunk " << attention_chunk;
    if (softcap > 0.0f) s << " softcap " << softcap;
    if (softmax_scale) s << " scale " << *softmax_scale;
    s << (with_lse ? " lse" : " no-lse") << " amplitude " << amplitude << (padded_rows ? " padded-rows" : "");
    if (pack_gqa != KernelOptions::PackGqa::kAuto)
      s << (pack_gqa == KernelOptions::PackGqa::kOn ? " pack-gqa on" : " pack-gqa off");
    if (num_splits != 0) s << " num_splits " << num_splits;
    if (kv_loads != KernelOptions::KvLoads::kAuto)
      s << (kv_loads == KernelOptions::KvLoads::kCopyThreads ? " kv-loads copy-threads" : " kv-loads tma");
  }
  // The scale, masks, softcap, GQA packing, K/V loads and split of the call.
  void set_args(FwdArgs& args) const {
    args.options.pack_gqa = pack_gqa;
    args.options.kv_loads = kv_loads;
    args.num_splits = num_splits;
    args.softmax_scale = softmax_scale;
    args.causal = causal;
    args.window_left = window_left;
    args.window_right = window_right;
    args.attention_chunk = attention_chunk;
    args.softcap = softcap;
  }
};

// Calls forward and waits for it; what is wrong (empty when it returned Ok).
inline std::string forward_problem(const FwdArgs& args) {
  const Status status = forward(args);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  if (!status.ok()) return "forward returned code " + std::to_string(int(status.code())) + ": " + status.message();
  return "";
}

// " at (row i, head h, col c): out .. ref ..": where the worst element of a sequence sits, to tell a
// masking, addressing or paging bug (a few rows far off, or garbage of the order of 1e4) from a
// rounding one.
inline std::string locate_worst(const Tensor& out, const float* ref, std::int64_t worst) {
  if (worst < 0) return "";
  const std::int64_t d = out.shape[3], heads = out.shape[2];
  const std::int64_t col = worst % d, h = worst / d % heads, i = worst / (d * heads);
  const std::int64_t offset = i * out.stride[1] + h * out.stride[2] + col;
  const float o = element_as_float(static_cast<const char*>(out.data) + offset * dtype_size(out.dtype), out.dtype);
  std::ostringstream s;
  s << " at (row " << i << ", head " << h << ", col " << col << "): out " << o << " ref "
    << element_as_float(ref + worst, Dtype::kFloat32);
  return s.str();
}

// The inputs of a finished call as the reference reads them, one sequence after the other: sequence
// b's queries are q rows [starts_q[b], starts_q[b] + len_q[b]), its keys and values k and v rows
// [starts_k[b], starts_k[b] + len_k[b]) (the keys it uses).
struct SequenceRows {
  std::vector<int> len_q, starts_q;
  std::vector<int> len_k, starts_k;
  RowView q, k, v;
};

// Judges the outputs of a finished call and returns what is wrong (empty when nothing is): per
// sequence, out within 2 max|naive - ref| + 1e-5 (+ half a rounding step) of the reference and the
// LSE within 1e-3 with -inf exactly where the reference has it (a sequence without keys: out 0, LSE
// -inf); no NaN left in out or the LSE; nothing written outside their views.
inline std::string check_sequences(const CallSettings& s, const SequenceRows& in, const PoisonedOutputs& outputs) {
  const int batch = static_cast<int>(in.len_q.size()), hq = s.heads_q, d = s.head_dim;
  const std::vector<int>& len_q = in.len_q;
  const std::vector<int>& len_k = in.len_k;
  const std::vector<int>& starts_q = in.starts_q;
  const int total_q = starts_q.back();

  // The reference, sequence by sequence, into dense float32 rows laid out like out's (sequence b
  // at row starts_q[b]); a sequence without keys keeps the initial out 0 and LSE -inf.
  const std::int64_t ref_rows = std::int64_t(total_q) * hq;
  DeviceBuffer ref(ref_rows * d * sizeof(float)), naive(ref_rows * d * sizeof(float));
  DeviceBuffer lse_ref(ref_rows * sizeof(float));
  HOPATTN_CUDA_CHECK(cudaMemset(ref.data(), 0, ref.bytes()));
  HOPATTN_CUDA_CHECK(cudaMemset(naive.data(), 0, naive.bytes()));
  fill_pattern_kernel<<<grid_for(ref_rows), 256>>>(lse_ref.as<std::uint32_t>(), ref_rows, 0xFF800000u);  // -inf
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  for (int b = 0; b < batch; ++b) {
    if (len_q[b] == 0 || len_k[b] == 0) continue;
    GpuReferenceArgs ra;
    ra.q = in.q.sequence(starts_q[b], len_q[b]);
    ra.k = in.k.sequence(in.starts_k[b], len_k[b]);
    ra.v = in.v.sequence(in.starts_k[b], len_k[b]);
    ra.softmax_scale = s.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
    ra.causal = s.causal;
    ra.window_left = s.window_left;
    ra.window_right = s.window_right;
    ra.attention_chunk = s.attention_chunk;
    ra.softcap = s.softcap;
    const std::int64_t first = std::int64_t(starts_q[b]) * hq;  // sequence b's first (row, head)
    ra.out = ref.as<float>() + first * d;
    ra.out_naive = naive.as<float>() + first * d;
    ra.lse = lse_ref.as<float>() + first;
    if (const Status st = gpu_reference_forward(ra); !st.ok()) return "reference: " + st.message();
  }
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());

  std::ostringstream problems;
  std::int64_t out_nans = 0, lse_nans = 0;
  for (int b = 0; b < batch; ++b) {
    if (len_q[b] == 0) continue;
    std::ostringstream seq;
    const std::int64_t first = std::int64_t(starts_q[b]) * hq;
    const Tensor out_b = outputs.out.view.sequence(starts_q[b], len_q[b]);
    const float* ref_b = ref.as<float>() + first * d;
    const OutputDiff diff = output_diff(out_b, ref_b, naive.as<float>() + first * d);
    const float bound = output_bound(diff, out_b.dtype, ref_b);
    out_nans += diff.nan_count;
    if (diff.nan_count) seq << diff.nan_count << " NaN in out (unwritten or computed); ";
    if (!(diff.max_err <= bound))
      seq << "max|out-ref| " << diff.max_err << " > 2*max|naive-ref| + 1e-5 + half a rounding step = " << bound
          << locate_worst(out_b, ref_b, diff.worst) << "; ";
    if (outputs.lse) {
      const LseDiff ld = lse_diff(outputs.lse->sequence(b, hq, len_q[b]), lse_ref.as<float>() + first);
      lse_nans += ld.nan_count;
      if (ld.nan_count) seq << ld.nan_count << " NaN in lse; ";
      if (ld.inf_mismatch) seq << ld.inf_mismatch << " lse entries disagree on -inf; ";
      if (!(ld.max_err <= 1e-3f)) seq << "max|lse-ref| " << ld.max_err << " > 1e-3; ";
    }
    if (!seq.str().empty())
      problems << "sequence " << b << " (len_q " << len_q[b] << ", len_k " << len_k[b] << "): " << seq.str();
  }

  // Elements of the storage that lost their poison, less the view's elements that did (those not
  // NaN): what was written outside the view, into the guards, padding or between LSE rows.
  // Only the rows each sequence uses are written: with seqused_q, the rest keep their poison too.
  const RowBuffer& out = outputs.out;
  std::int64_t rows_used = 0;
  for (int n : len_q) rows_used += std::int64_t(n) * hq;
  const std::int64_t out_numel = rows_used * d;
  const std::int64_t out_outside =
      count_unpoisoned(out.storage.data(), out.view.dtype, out.elements) - (out_numel - out_nans);
  if (out_outside != 0) problems << "out: " << out_outside << " elements outside its view were written; ";
  if (outputs.lse) {
    const std::int64_t lse_outside =
        count_unpoisoned(outputs.lse->storage.data(), Dtype::kFloat32, outputs.lse->elements) - (rows_used - lse_nans);
    if (lse_outside != 0) problems << "lse: " << lse_outside << " entries outside its view were written; ";
  }
  return problems.str();
}

// The random part of a random case that is not about lengths, drawn in this order: heads_kv 1-4 with a
// GQA ratio of 1, 2, 4 or 8, a head dim up to max_head_dim (draw_head_dim: padded ones too) and either
// 16-bit dtype; causal, windows (left up to the longest key length `max_len_k`), softcap, scale, LSE,
// amplitude, padded rows and chunks at random.
inline void draw_settings(std::mt19937_64& rng, CallSettings& c, int max_len_k, int max_head_dim = 256) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  constexpr int kRatios[] = {1, 2, 4, 8};
  c.heads_kv = pick(1, 4);
  c.heads_q = c.heads_kv * kRatios[pick(0, 3)];
  c.head_dim = draw_head_dim(rng, max_head_dim);
  c.dtype = chance(0.5) ? kBf16 : kFp16;
  c.causal = chance(0.5);
  if (chance(0.25)) {
    c.window_left = chance(0.8) ? pick(0, max_len_k) : -1;
    c.window_right = c.causal ? -1 : pick(0, 64);
  }
  if (chance(0.2)) c.softcap = std::uniform_real_distribution<float>(5.0f, 50.0f)(rng);
  if (chance(0.2)) c.softmax_scale = std::uniform_real_distribution<float>(0.02f, 0.5f)(rng);
  c.with_lse = chance(0.85);
  c.amplitude = std::uniform_real_distribution<float>(0.5f, 3.0f)(rng);
  c.padded_rows = chance(0.2);
  if (chance(0.15)) c.attention_chunk = pick(1, max_len_k + 64);  // chunked attention
}

// A variable-length case (the forward's VarlenCase, the backward's VarlenBackwardCase) of these
// lengths, heads, head dim and dtype; every other field at its default.
template <class Case>
Case varlen_case_of(std::vector<int> len_q, std::vector<int> len_k, int heads_q, int heads_kv, int head_dim,
                    Dtype dtype) {
  Case c;
  c.len_q = std::move(len_q);
  c.len_k = std::move(len_k);
  c.heads_q = heads_q, c.heads_kv = heads_kv, c.head_dim = head_dim, c.dtype = dtype;
  return c;
}

// The checks every variable-length case's lengths pass (the forward's and the backward's cases name
// these fields alike): one length per sequence, equal lengths on a dense side, packed qkv only over
// equal packed sides, used keys within the stored ones.
template <class Case>
void check_sequence_lengths(const Case& c) {
  if (c.batch() < 1 || c.len_k.size() != c.len_q.size() || (c.seqused_k && int(c.seqused_k->size()) != c.batch()) ||
      (c.seqused_q && int(c.seqused_q->size()) != c.batch()))
    throw std::invalid_argument("test case: one length per sequence on each side");
  if ((!c.varlen_q && !all_equal(c.len_q)) || (!c.varlen_k && !all_equal(c.len_k)))
    throw std::invalid_argument("test case: a dense side needs equal lengths");
  if (c.packed_qkv && (!c.varlen_q || !c.varlen_k || c.len_q != c.len_k))
    throw std::invalid_argument("test case: packed qkv needs varlen q and k of equal lengths");
  for (int b = 0; b < c.batch(); ++b)
    if (c.used_k(b) < 0 || c.used_k(b) > c.len_k[b] || c.used_q(b) < 0 || c.used_q(b) > c.len_q[b])
      throw std::invalid_argument("test case: seqused_k > len_k or seqused_q > len_q");
}

// The lengths of a random variable-length case (the forward's and the backward's sweeps name these
// fields alike), drawn in this order: batch 1-6; a packed q, a packed k and seqused_k independently (at
// least one); lengths log-uniform in [1, max_length], an edge length with chance edge_chance,
// sometimes 0 on a packed side; packed qkv; the keys each sequence uses; the queries it uses
// (seqused_q, a fifth of the cases: the q rows past them hold NaN, make_sequence_inputs).
template <class Case, std::size_t kEdges>
void draw_lengths(std::mt19937_64& rng, Case& c, const int (&edge_lengths)[kEdges], int max_length,
                  double edge_chance) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const auto length = [&] {
    if (chance(edge_chance)) return edge_lengths[pick(0, static_cast<int>(kEdges) - 1)];
    const double x = std::exp(std::uniform_real_distribution<double>(0.0, std::log(double(max_length)))(rng));
    return std::clamp(static_cast<int>(std::lround(x)), 1, max_length);
  };
  const int batch = pick(1, 6);
  c.varlen_q = chance(0.8);
  c.varlen_k = chance(0.75);
  const bool seqused = chance(0.35) || (!c.varlen_q && !c.varlen_k);
  const int dense_q = length(), dense_k = length();
  for (int b = 0; b < batch; ++b) {
    const int lq = !c.varlen_q ? dense_q : chance(0.08) ? 0 : length();
    const int lk = !c.varlen_k ? dense_k : chance(0.08) ? 0 : chance(0.25) && lq > 0 ? lq : length();
    c.len_q.push_back(lq);
    c.len_k.push_back(lk);
  }
  // CUDA tensors may not be empty: at least one row on each side.
  if (prefix_sums(c.len_q).back() == 0) c.len_q[0] = 1;
  if (prefix_sums(c.len_k).back() == 0) c.len_k[0] = 1;
  c.packed_qkv = c.varlen_q && c.varlen_k && chance(0.15);
  if (c.packed_qkv) c.len_k = c.len_q;
  if (seqused) {
    c.seqused_k.emplace();
    for (int lk : c.len_k) c.seqused_k->push_back(chance(0.3) ? lk : pick(0, lk));
  }
  if (chance(0.2)) {
    c.seqused_q.emplace();
    for (int lq : c.len_q) c.seqused_q->push_back(chance(0.3) ? lq : pick(0, lq));
  }
}

// Every length of a case (used keys and queries too) by a quarter: monotone, so used rows stay <= stored ones; 0
// stays 0 and nothing else reaches it.
template <class Case>
void shrink_lengths(Case& c) {
  const auto shrink = [](std::vector<int>& lengths) {
    for (int& n : lengths) n = n == 0 ? 0 : std::max(1, n * 3 / 4);
  };
  shrink(c.len_q);
  shrink(c.len_k);
  if (c.seqused_k) shrink(*c.seqused_k);
  if (c.seqused_q) shrink(*c.seqused_q);
}

// One step of fitting a random case's work: halves the GQA ratio, else (ratio 1) drops a kv head.
// False when a single head is left: the lengths must shrink instead.
inline bool shrink_heads(CallSettings& c) {
  if (c.heads_q > c.heads_kv) {
    c.heads_q /= 2;  // the ratio is a power of two
    return true;
  }
  if (c.heads_kv > 1) {
    c.heads_q = --c.heads_kv;
    return true;
  }
  return false;
}

// The body of a random sweep test: `count` cases drawn by draw(rng) from the run's seed (printed and
// recorded, to replay with HOPATTN_TEST_SEED), case i run as run(case, splitmix64(seed + i)), which
// returns its problems; a failure for each failing case, stopping after 10.
template <class Draw, class Run>
void random_sweep(int count, Draw&& draw, Run&& run) {
  const std::uint64_t seed = run_seed();
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::cout << "[ seed     ] HOPATTN_TEST_SEED=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    const auto c = draw(rng);
    const std::string problems = run(c, splitmix64(seed + i));
    if (problems.empty()) continue;
    ADD_FAILURE() << "case " << i << " (HOPATTN_TEST_SEED=" << seed << "): " << c.describe() << "\n  " << problems;
    if (++failed == 10) {
      ADD_FAILURE() << "stopping after 10 failing cases";
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ sweep    ] " << count << " cases, " << failed << " failed, in " << seconds << " s" << std::endl;
}

// A corner case of a parameterized test, with the name gtest gives it (CaseName).
template <class Case>
struct NamedCase {
  std::string name;
  Case c;
};

// The cases of head dim at most max_head_dim, with K/V loaded as `loads` says and `suffix` after their
// names (a CallSettings case: varlen or paged).
template <class Case>
std::vector<NamedCase<Case>> with_kv_loads(std::vector<NamedCase<Case>> cases, KernelOptions::KvLoads loads,
                                           int max_head_dim, const std::string& suffix) {
  std::vector<NamedCase<Case>> out;
  for (NamedCase<Case>& named : cases) {
    if (named.c.head_dim > max_head_dim) continue;
    named.c.kv_loads = loads;
    out.push_back({named.name + suffix, named.c});
  }
  return out;
}

template <class Case>
void PrintTo(const NamedCase<Case>& n, std::ostream* os) {
  *os << n.name << ": " << n.c.describe();
}

struct CaseName {
  template <class Case>
  std::string operator()(const ::testing::TestParamInfo<NamedCase<Case>>& info) const {
    return info.param.name;
  }
};

}  // namespace hopattn::test
