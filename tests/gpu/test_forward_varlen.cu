// The sm_90a forward on variable-length batches: cu_seqlens_q, cu_seqlens_k and seqused_k, alone and
// combined, with dense q or k where the API allows it. Each sequence is an ordinary attention problem
// of its own lengths (masks bottom-right aligned per sequence), so each is judged against the float32
// GPU reference run on that sequence alone, through batch-1 views into the packed buffers, by the rule
// of the dense tests (forward_case.cu). Outputs are poisoned with NaN and bracketed by poisoned guard
// rows: every row must be written, and nothing around or between the logical rows. A tile holding the
// last rows of one sequence must not spill into the next one; the prefix test makes every sequence
// the last of a batch once, so that such a spill lands in the guard instead of racing with the next
// sequence's own (correct) write.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/gpu_reference.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

constexpr int kGuardRows = 192;  // poisoned rows before and after out: more than one 128-row tile
constexpr int kLsePad = 192;     // poisoned LSE entries before the first head's row and after each
constexpr int kRowPad = 8;       // elements added after each head of a row with padded_rows (16 bytes)

// One variable-length call. A dense side (varlen_q or varlen_k false) is (batch, seqlen, heads, d) with
// every length equal; its rows are laid out exactly as a varlen side's, sequence after sequence.
struct VarlenCase {
  std::vector<int> len_q;                     // query rows of each sequence
  std::vector<int> len_k;                     // key rows stored for each sequence
  std::optional<std::vector<int>> seqused_k;  // keys each sequence uses (<= len_k), when given
  bool varlen_q = true, varlen_k = true;
  int heads_q = 4, heads_kv = 4, head_dim = 128;
  Dtype dtype = Dtype::kBFloat16;
  bool causal = false;
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::optional<float> softmax_scale;
  bool with_lse = true;
  float amplitude = 1.0f;    // q is drawn from amplitude * N(0, 1): larger = peakier softmax
  bool padded_rows = false;  // q, k, v and out: kRowPad spare elements after each head
  // q, k, v as head slices of one (total, hq + 2 hkv, d) buffer, as flash_attn_varlen_qkvpacked_func
  // takes them; needs varlen q and k with equal lengths.
  bool packed_qkv = false;

  int batch() const { return static_cast<int>(len_q.size()); }
  int used_k(int b) const { return seqused_k ? (*seqused_k)[b] : len_k[b]; }
  double work() const {
    double pairs = 0;
    for (int b = 0; b < batch(); ++b) pairs += double(len_q[b]) * used_k(b);
    return pairs * heads_q * head_dim;
  }
  // The first `n` sequences as a batch of their own.
  VarlenCase prefix(int n) const {
    VarlenCase c = *this;
    c.len_q.resize(n);
    c.len_k.resize(n);
    if (c.seqused_k) c.seqused_k->resize(n);
    return c;
  }
  std::string describe() const;
};

std::string join(const std::vector<int>& values) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < values.size(); ++i) s << (i ? " " : "") << values[i];
  s << "]";
  return s.str();
}

std::string VarlenCase::describe() const {
  std::ostringstream s;
  s << (varlen_q ? "varlen q " : "dense q ") << join(len_q) << (varlen_k ? " varlen k " : " dense k ") << join(len_k);
  if (seqused_k) s << " seqused_k " << join(*seqused_k);
  s << " hq " << heads_q << " hkv " << heads_kv << " d " << head_dim << " " << dtype_name(dtype)
    << (causal ? " causal" : "");
  if (window_left >= 0 || window_right >= 0) s << " window (" << window_left << ", " << window_right << ")";
  if (softcap > 0.0f) s << " softcap " << softcap;
  if (softmax_scale) s << " scale " << *softmax_scale;
  s << (with_lse ? " lse" : " no-lse") << " amplitude " << amplitude << (padded_rows ? " padded-rows" : "")
    << (packed_qkv ? " packed-qkv" : "");
  return s.str();
}

// Entry b is where sequence b's rows start; the last entry is the row count. For a dense side (all
// lengths equal) that is b * seqlen, the rows of a (batch, seqlen, ...) tensor.
std::vector<int> prefix_sums(const std::vector<int>& lengths) {
  std::vector<int> sums(1, 0);
  for (int n : lengths) sums.push_back(sums.back() + n);
  return sums;
}

Tensor cuda_view(void* data, Dtype dtype, std::initializer_list<std::int64_t> shape,
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
  Dtype dtype = Dtype::kBFloat16;
  int heads = 0, head_dim = 0;
  std::int64_t row_stride = 0, head_stride = 0;

  char* row(std::int64_t r) const { return base + r * row_stride * std::int64_t(dtype_size(dtype)); }
  // What forward takes: (total, heads, d) for a varlen side, (batch, seqlen, heads, d) for a dense one.
  Tensor api_tensor(const std::vector<int>& starts, bool varlen) const {
    const std::int64_t total = starts.back(), batch = std::int64_t(starts.size()) - 1;
    if (varlen) return cuda_view(base, dtype, {total, heads, head_dim}, {row_stride, head_stride, 1});
    const std::int64_t seqlen = total / batch;
    return cuda_view(base, dtype, {batch, seqlen, heads, head_dim}, {seqlen * row_stride, row_stride, head_stride, 1});
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

RowBuffer make_rows(Dtype dtype, std::int64_t rows, int heads, int head_dim, bool padded, int guard) {
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

DeviceBuffer upload_int32(const std::vector<int>& values) {
  DeviceBuffer b(values.size() * sizeof(std::int32_t));
  HOPATTN_CUDA_CHECK(cudaMemcpy(b.data(), values.data(), b.bytes(), cudaMemcpyHostToDevice));
  return b;
}

float device_element(const void* p, Dtype dtype) {
  unsigned char bytes[4] = {};
  HOPATTN_CUDA_CHECK(cudaMemcpy(bytes, p, dtype_size(dtype), cudaMemcpyDeviceToHost));
  switch (dtype) {
    case Dtype::kFloat16: return __half2float(*reinterpret_cast<const __half*>(bytes));
    case Dtype::kBFloat16: return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(bytes));
    default: return *reinterpret_cast<const float*>(bytes);
  }
}

// " at (row i, head h, col c): out .. ref ..": where the worst element of a sequence sits, to tell a
// masking or addressing bug (a few rows far off) from a rounding one.
std::string locate_worst(const Tensor& out, const float* ref, std::int64_t worst) {
  if (worst < 0) return "";
  const std::int64_t d = out.shape[3], heads = out.shape[2];
  const std::int64_t col = worst % d, h = worst / d % heads, i = worst / (d * heads);
  const std::int64_t offset = i * out.stride[1] + h * out.stride[2] + col;
  const float o = device_element(static_cast<const char*>(out.data) + offset * dtype_size(out.dtype), out.dtype);
  std::ostringstream s;
  s << " at (row " << i << ", head " << h << ", col " << col << "): out " << o << " ref "
    << device_element(ref + worst, Dtype::kFloat32);
  return s.str();
}

void check_case_shape(const VarlenCase& c) {
  const auto all_equal = [](const std::vector<int>& v) {
    return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
  };
  if (c.batch() < 1 || c.len_k.size() != c.len_q.size() || (c.seqused_k && int(c.seqused_k->size()) != c.batch()))
    throw std::invalid_argument("test case: one length per sequence on each side");
  if ((!c.varlen_q && !all_equal(c.len_q)) || (!c.varlen_k && !all_equal(c.len_k)))
    throw std::invalid_argument("test case: a dense side needs equal lengths");
  if (c.packed_qkv && (!c.varlen_q || !c.varlen_k || c.len_q != c.len_k))
    throw std::invalid_argument("test case: packed qkv needs varlen q and k of equal lengths");
  for (int b = 0; b < c.batch(); ++b)
    if (c.used_k(b) < 0 || c.used_k(b) > c.len_k[b]) throw std::invalid_argument("test case: seqused_k > len_k");
}

// Runs `c` on data drawn from `seed` and returns what is wrong (empty when nothing is): forward must
// return Ok; per sequence, out within 2 max|naive - ref| + 1e-5 of the reference and the LSE within
// 1e-3 with -inf exactly where the reference has it (a sequence without keys: out 0, LSE -inf); no NaN
// left in out or the LSE; nothing written outside their views.
std::string run_varlen_case(const VarlenCase& c, std::uint64_t seed) {
  try {
    check_case_shape(c);
    const int batch = c.batch(), hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
    const std::vector<int> starts_q = prefix_sums(c.len_q), starts_k = prefix_sums(c.len_k);
    const int total_q = starts_q.back(), total_k = starts_k.back();

    // Inputs: fresh normal values over the whole storage, padding included. With packed_qkv, q_rows
    // holds all three.
    RowBuffer q_rows, k_rows, v_rows;
    RowView q, k, v;
    if (c.packed_qkv) {
      q_rows = make_rows(c.dtype, total_q, hq + 2 * hkv, d, c.padded_rows, 0);
      fill_normal(q_rows.storage.data(), c.dtype, q_rows.elements, splitmix64(seed ^ 1), c.amplitude);
      q = q_rows.view.heads_slice(0, hq);
      k = q_rows.view.heads_slice(hq, hkv);
      v = q_rows.view.heads_slice(hq + hkv, hkv);
    } else {
      q_rows = make_rows(c.dtype, total_q, hq, d, c.padded_rows, 0);
      k_rows = make_rows(c.dtype, total_k, hkv, d, c.padded_rows, 0);
      v_rows = make_rows(c.dtype, total_k, hkv, d, c.padded_rows, 0);
      fill_normal(q_rows.storage.data(), c.dtype, q_rows.elements, splitmix64(seed ^ 1), c.amplitude);
      fill_normal(k_rows.storage.data(), c.dtype, k_rows.elements, splitmix64(seed ^ 2));
      fill_normal(v_rows.storage.data(), c.dtype, v_rows.elements, splitmix64(seed ^ 3));
      q = q_rows.view, k = k_rows.view, v = v_rows.view;
    }

    // Outputs: poisoned with NaN, guards and padding included.
    RowBuffer out = make_rows(c.dtype, total_q, hq, d, c.padded_rows, kGuardRows);
    poison_nan(out.storage.data(), c.dtype, out.elements);
    std::optional<LseBuffer> lse;
    if (c.with_lse) {
      lse.emplace(starts_q, c.varlen_q, hq);
      poison_nan(lse->storage.data(), Dtype::kFloat32, lse->elements);
    }

    std::optional<DeviceBuffer> cu_q, cu_k, seqused;
    if (c.varlen_q) cu_q = upload_int32(starts_q);
    if (c.varlen_k) cu_k = upload_int32(starts_k);
    if (c.seqused_k) seqused = upload_int32(*c.seqused_k);
    FwdArgs args;
    args.q = q.api_tensor(starts_q, c.varlen_q);
    args.k = k.api_tensor(starts_k, c.varlen_k);
    args.v = v.api_tensor(starts_k, c.varlen_k);
    args.out = out.view.api_tensor(starts_q, c.varlen_q);
    if (lse) args.lse = lse->api_tensor;
    if (cu_q) args.cu_seqlens_q = make_tensor(cu_q->data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
    if (cu_k) args.cu_seqlens_k = make_tensor(cu_k->data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
    if (seqused) args.seqused_k = make_tensor(seqused->data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
    // The true maxima, also on a dense side (where validation reads the length from the shape).
    args.max_seqlen_q = *std::max_element(c.len_q.begin(), c.len_q.end());
    args.max_seqlen_k = *std::max_element(c.len_k.begin(), c.len_k.end());
    args.softmax_scale = c.softmax_scale;
    args.causal = c.causal;
    args.window_left = c.window_left;
    args.window_right = c.window_right;
    args.softcap = c.softcap;
    const Status status = forward(args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    if (!status.ok()) return "forward returned code " + std::to_string(int(status.code())) + ": " + status.message();

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
      if (c.len_q[b] == 0 || c.used_k(b) == 0) continue;
      GpuReferenceArgs ra;
      ra.q = q.sequence(starts_q[b], c.len_q[b]);
      ra.k = k.sequence(starts_k[b], c.used_k(b));
      ra.v = v.sequence(starts_k[b], c.used_k(b));
      ra.softmax_scale = c.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
      ra.causal = c.causal;
      ra.window_left = c.window_left;
      ra.window_right = c.window_right;
      ra.softcap = c.softcap;
      const std::int64_t first = std::int64_t(starts_q[b]) * hq;  // sequence b's first (row, head)
      ra.out = ref.as<float>() + first * d;
      ra.out_naive = naive.as<float>() + first * d;
      ra.lse = lse_ref.as<float>() + first;
      if (const Status s = gpu_reference_forward(ra); !s.ok()) return "reference: " + s.message();
    }
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::ostringstream problems;
    std::int64_t out_nans = 0, lse_nans = 0;
    for (int b = 0; b < batch; ++b) {
      if (c.len_q[b] == 0) continue;
      std::ostringstream seq;
      const std::int64_t first = std::int64_t(starts_q[b]) * hq;
      const Tensor out_b = out.view.sequence(starts_q[b], c.len_q[b]);
      const float* ref_b = ref.as<float>() + first * d;
      const OutputDiff diff = output_diff(out_b, ref_b, naive.as<float>() + first * d);
      const float bound = 2.0f * diff.max_naive_err + 1e-5f;
      out_nans += diff.nan_count;
      if (diff.nan_count) seq << diff.nan_count << " NaN in out (unwritten or computed); ";
      if (!(diff.max_err <= bound))
        seq << "max|out-ref| " << diff.max_err << " > 2*max|naive-ref| + 1e-5 = " << bound
            << locate_worst(out_b, ref_b, diff.worst) << "; ";
      if (lse) {
        const LseDiff ld = lse_diff(lse->sequence(b, hq, c.len_q[b]), lse_ref.as<float>() + first);
        lse_nans += ld.nan_count;
        if (ld.nan_count) seq << ld.nan_count << " NaN in lse; ";
        if (ld.inf_mismatch) seq << ld.inf_mismatch << " lse entries disagree on -inf; ";
        if (!(ld.max_err <= 1e-3f)) seq << "max|lse-ref| " << ld.max_err << " > 1e-3; ";
      }
      if (!seq.str().empty())
        problems << "sequence " << b << " (len_q " << c.len_q[b] << ", len_k " << c.used_k(b) << "): " << seq.str();
    }

    // Elements of the storage that lost their poison, less the view's elements that did (those not
    // NaN): what was written outside the view, into the guards, padding or between LSE rows.
    const std::int64_t out_numel = ref_rows * d;
    const std::int64_t out_outside =
        count_unpoisoned(out.storage.data(), c.dtype, out.elements) - (out_numel - out_nans);
    if (out_outside != 0) problems << "out: " << out_outside << " elements outside its view were written; ";
    if (lse) {
      const std::int64_t lse_outside =
          count_unpoisoned(lse->storage.data(), Dtype::kFloat32, lse->elements) - (ref_rows - lse_nans);
      if (lse_outside != 0) problems << "lse: " << lse_outside << " entries outside its view were written; ";
    }
    return problems.str();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

// Builds a case of varlen q and k (the common form); the tests then change what they need.
VarlenCase varlen(std::vector<int> len_q, std::vector<int> len_k, int heads_q, int heads_kv, int head_dim,
                  Dtype dtype) {
  VarlenCase c;
  c.len_q = std::move(len_q);
  c.len_k = std::move(len_k);
  c.heads_q = heads_q, c.heads_kv = heads_kv, c.head_dim = head_dim, c.dtype = dtype;
  return c;
}

struct NamedCase {
  std::string name;
  VarlenCase c;
};

void PrintTo(const NamedCase& n, std::ostream* os) { *os << n.name << ": " << n.c.describe(); }

constexpr Dtype kBf16 = Dtype::kBFloat16, kFp16 = Dtype::kFloat16;

std::vector<NamedCase> corner_cases() {
  // Lengths either side of the 128-row tile edges, the key lengths in another order than the queries'.
  const std::vector<int> edges_q = {1, 127, 128, 129, 255, 257}, edges_k = {257, 1, 129, 128, 127, 255};
  std::vector<NamedCase> cases;
  const auto add = [&](std::string name, VarlenCase c) { cases.push_back({std::move(name), std::move(c)}); };

  add("TileEdges_d64_bf16_gqa", varlen(edges_q, edges_k, 8, 2, 64, kBf16));
  {
    VarlenCase c = varlen(edges_q, edges_k, 4, 1, 64, kFp16);
    c.causal = true;  // len_q 257 > len_k 255: its first two rows see no key
    add("TileEdges_d64_fp16_causal_mqa", c);
  }
  {
    VarlenCase c = varlen(edges_q, edges_k, 8, 2, 128, kBf16);
    c.window_left = 100, c.window_right = 0;
    add("TileEdges_d128_bf16_window100_0", c);
  }
  {
    VarlenCase c = varlen(edges_q, edges_k, 2, 2, 128, kFp16);
    c.window_left = 37, c.window_right = 11, c.with_lse = false;
    add("TileEdges_d128_fp16_window37_11_nolse", c);
  }
  {
    VarlenCase c = varlen(edges_q, edges_k, 4, 2, 256, kBf16);
    c.causal = true, c.softcap = 30.0f;
    add("TileEdges_d256_bf16_causal_softcap30", c);
  }
  add("TileEdges_d256_fp16_mqa", varlen(edges_q, edges_k, 4, 1, 256, kFp16));
  {
    VarlenCase c = varlen({200, 0, 129}, {300, 77, 129}, 8, 2, 128, kFp16);
    c.causal = true;
    add("EmptyQuerySequenceInTheMiddle", c);
  }
  // Sequences 1 and 3 have no keys: out 0 and LSE -inf for all their rows.
  add("SequencesWithoutKeys", varlen({64, 100, 1, 30}, {70, 0, 33, 0}, 4, 2, 64, kBf16));
  {
    VarlenCase c = varlen({300, 129, 7}, {100, 1, 7}, 8, 2, 128, kBf16);
    c.causal = true;  // the first len_q - len_k rows of each sequence see no key
    add("CausalMoreQueriesThanKeys", c);
  }
  {
    VarlenCase c = varlen({1, 64, 129}, {3000, 2000, 257}, 2, 1, 256, kFp16);
    c.window_left = 37, c.window_right = 11;
    add("MoreKeysThanQueries_window37_11", c);
  }
  {
    VarlenCase c = varlen({1000}, {1000}, 4, 4, 128, kBf16);
    c.causal = true, c.softcap = 30.0f;
    add("SingleSequence_causal_softcap30", c);
  }
  {
    VarlenCase c = varlen({1, 500, 128, 0, 77, 257, 1024, 33, 129, 255}, {1, 700, 64, 10, 77, 256, 1000, 2000, 129, 1},
                          6, 3, 64, kFp16);
    c.causal = true, c.with_lse = false;
    add("TenMixedLengths_causal", c);
  }
  {
    VarlenCase c = varlen({100, 128, 5, 600}, {600, 600, 600, 600}, 4, 1, 128, kBf16);
    c.varlen_k = false, c.seqused_k = {{600, 1, 0, 317}}, c.causal = true;
    add("SequsedK_VarlenQ_DenseK_causal", c);
  }
  {
    VarlenCase c = varlen({129, 129, 129}, {500, 500, 500}, 4, 2, 64, kFp16);
    c.varlen_q = false, c.varlen_k = false, c.seqused_k = {{500, 129, 0}};
    c.window_left = 37, c.window_right = 11;
    add("SequsedK_DenseQ_DenseK_window37_11", c);
  }
  {
    VarlenCase c = varlen({256, 1, 130}, {400, 300, 130}, 4, 2, 256, kBf16);
    c.seqused_k = {{257, 0, 130}}, c.softcap = 30.0f;
    add("SequsedK_VarlenQ_VarlenK_softcap30", c);
  }
  {
    VarlenCase c = varlen({100, 333, 1}, {333, 333, 333}, 8, 2, 128, kFp16);
    c.varlen_k = false, c.causal = true;
    add("VarlenQ_DenseK_causal", c);
  }
  {
    VarlenCase c = varlen({200, 200, 200}, {1, 500, 129}, 4, 4, 64, kBf16);
    c.varlen_q = false, c.window_left = 100, c.window_right = 0;
    add("DenseQ_VarlenK_window100_0", c);
  }
  {
    VarlenCase c = varlen({129, 1, 300}, {129, 1, 300}, 4, 2, 128, kBf16);
    c.packed_qkv = true, c.causal = true;
    add("PackedQkv_d128_bf16_causal", c);
  }
  {
    VarlenCase c = varlen({64, 0, 257}, {64, 0, 257}, 3, 1, 64, kFp16);
    c.packed_qkv = true, c.padded_rows = true, c.causal = true, c.window_left = 100;
    add("PackedQkv_PaddedRows_d64_fp16_mqa_causal_window100", c);
  }
  {
    VarlenCase c = varlen({255, 3}, {3, 255}, 2, 1, 256, kFp16);
    c.padded_rows = true, c.causal = true;
    add("PaddedRows_d256_fp16_causal", c);
  }
  return cases;
}

class ForwardVarlenCorners : public HopperTest, public ::testing::WithParamInterface<NamedCase> {};

TEST_P(ForwardVarlenCorners, EverySequenceMatchesReference) {
  const std::uint64_t seed = run_seed();
  const VarlenCase& c = GetParam().c;
  const std::string problems = run_varlen_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Corners, ForwardVarlenCorners, ::testing::ValuesIn(corner_cases()),
                         [](const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; });

class ForwardVarlen : public HopperTest {};

// Each sequence in turn is the last of the batch (the batch cut after it), so rows a tile writes past
// its end land in out's trailing guard (and past its LSE row, in the padding) where they are seen,
// instead of in the next sequence's rows where that sequence's own write may hide them.
TEST_F(ForwardVarlen, NoSequenceWritesPastItsEnd) {
  const std::uint64_t seed = run_seed();
  const std::vector<int> len_q = {129, 255, 1, 257, 128, 0, 127, 65}, len_k = {129, 300, 5, 257, 128, 40, 1, 64};
  int index = 0;
  for (const auto& [d, dtype] : {std::pair{64, kFp16}, std::pair{128, kBf16}, std::pair{256, kFp16}}) {
    VarlenCase full = varlen(len_q, len_k, 4, 2, d, dtype);
    full.causal = d == 128;
    for (int n = 1; n <= full.batch(); ++n) {
      const VarlenCase c = full.prefix(n);
      const std::string problems = run_varlen_case(c, splitmix64(seed + index++));
      EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
    }
  }
}

// Lengths either side of the 64- and 128-row tile edges: a quarter of the random lengths.
constexpr int kEdgeLengths[] = {1, 63, 64, 65, 127, 128, 129, 255, 256, 257};
constexpr int kMaxLength = 3000;
constexpr int kRandomCases = 40;
// Bound on heads_q * d * sum_b len_q * len_k (most draws are far below): the whole sweep, reference
// included, then takes about a second on an H200.
constexpr double kMaxWork = 4e10;

// Batch 1-6; varlen q, varlen k and seqused_k drawn independently (at least one); lengths log-uniform
// in [1, 3000], often an edge length, sometimes 0 on a varlen side; every head dim, dtype and GQA
// ratio; causal, windows, softcap, scale, LSE, padded rows and packed qkv at random.
VarlenCase random_varlen_case(std::mt19937_64& rng) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const auto length = [&] {
    if (chance(0.25)) return kEdgeLengths[pick(0, static_cast<int>(std::size(kEdgeLengths)) - 1)];
    const double x = std::exp(std::uniform_real_distribution<double>(0.0, std::log(double(kMaxLength)))(rng));
    return std::clamp(static_cast<int>(std::lround(x)), 1, kMaxLength);
  };
  constexpr int kRatios[] = {1, 2, 4, 8};
  constexpr int kHeadDims[] = {64, 128, 256};

  VarlenCase c;
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

  c.heads_kv = pick(1, 4);
  c.heads_q = c.heads_kv * kRatios[pick(0, 3)];
  c.head_dim = kHeadDims[pick(0, 2)];
  c.dtype = chance(0.5) ? kBf16 : kFp16;
  c.causal = chance(0.5);
  if (chance(0.25)) {
    c.window_left = chance(0.8) ? pick(0, *std::max_element(c.len_k.begin(), c.len_k.end())) : -1;
    c.window_right = c.causal ? -1 : pick(0, 64);
  }
  if (chance(0.2)) c.softcap = std::uniform_real_distribution<float>(5.0f, 50.0f)(rng);
  if (chance(0.2)) c.softmax_scale = std::uniform_real_distribution<float>(0.02f, 0.5f)(rng);
  c.with_lse = chance(0.85);
  c.amplitude = std::uniform_real_distribution<float>(0.5f, 3.0f)(rng);
  c.padded_rows = chance(0.2);

  // Fewer heads first, then every length (used keys too) by a quarter, until the work fits.
  while (c.work() > kMaxWork) {
    if (c.heads_q > c.heads_kv) {
      c.heads_q /= 2;  // the ratio is a power of two
    } else if (c.heads_kv > 1) {
      c.heads_q = --c.heads_kv;
    } else {
      // Monotone, so used keys stay <= stored keys; 0 stays 0 and nothing else reaches it.
      const auto shrink = [](std::vector<int>& lengths) {
        for (int& n : lengths) n = n == 0 ? 0 : std::max(1, n * 3 / 4);
      };
      shrink(c.len_q);
      shrink(c.len_k);
      if (c.seqused_k) shrink(*c.seqused_k);
    }
  }
  return c;
}

TEST_F(ForwardVarlen, RandomBatchesMatchReference) {
  const std::uint64_t seed = run_seed();
  RecordProperty("seed", std::to_string(seed));
  std::cout << "[ seed     ] HOPATTN_TEST_SEED=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  for (int i = 0; i < kRandomCases; ++i) {
    const VarlenCase c = random_varlen_case(rng);
    const std::string problems = run_varlen_case(c, splitmix64(seed + i));
    if (problems.empty()) continue;
    ADD_FAILURE() << "case " << i << " (HOPATTN_TEST_SEED=" << seed << "): " << c.describe() << "\n  " << problems;
    if (++failed == 10) {
      ADD_FAILURE() << "stopping after 10 failing cases";
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ sweep    ] " << kRandomCases << " cases, " << failed << " failed, in " << seconds << " s"
            << std::endl;
}

// FP8 inputs with cu_seqlens are refused with kUnsupported and a message, before anything is written.
TEST_F(ForwardVarlen, Fp8WithCuSeqlensIsUnsupported) {
  constexpr int kHq = 4, kHkv = 2, kD = 128;
  struct Mode {
    const char* name;
    bool varlen_q, varlen_k;
  };
  for (const Mode& m : {Mode{"varlen q and k", true, true}, Mode{"varlen q, dense k", true, false},
                        Mode{"dense q, varlen k", false, true}}) {
    const std::vector<int> lens_q = m.varlen_q ? std::vector<int>{100, 0, 129} : std::vector<int>(3, 129);
    const std::vector<int> lens_k = m.varlen_k ? std::vector<int>{300, 1, 129} : std::vector<int>(3, 129);
    const std::vector<int> starts_q = prefix_sums(lens_q), starts_k = prefix_sums(lens_k);
    RowBuffer q = make_rows(Dtype::kFloat8E4M3, starts_q.back(), kHq, kD, false, 0);
    RowBuffer k = make_rows(Dtype::kFloat8E4M3, starts_k.back(), kHkv, kD, false, 0);
    RowBuffer v = make_rows(Dtype::kFloat8E4M3, starts_k.back(), kHkv, kD, false, 0);
    for (RowBuffer* t : {&q, &k, &v})  // 0x38 is 1.0 in e4m3: valid inputs, should a kernel read them
      HOPATTN_CUDA_CHECK(cudaMemset(t->storage.data(), 0x38, t->storage.bytes()));
    RowBuffer out = make_rows(Dtype::kBFloat16, starts_q.back(), kHq, kD, false, 0);
    poison_nan(out.storage.data(), Dtype::kBFloat16, out.elements);
    LseBuffer lse(starts_q, m.varlen_q, kHq);
    poison_nan(lse.storage.data(), Dtype::kFloat32, lse.elements);
    const DeviceBuffer cu_q = upload_int32(starts_q), cu_k = upload_int32(starts_k);

    FwdArgs args;
    args.q = q.view.api_tensor(starts_q, m.varlen_q);
    args.k = k.view.api_tensor(starts_k, m.varlen_k);
    args.v = v.view.api_tensor(starts_k, m.varlen_k);
    args.out = out.view.api_tensor(starts_q, m.varlen_q);
    args.lse = lse.api_tensor;
    if (m.varlen_q) args.cu_seqlens_q = make_tensor(cu_q.data(), Dtype::kInt32, {4}, DeviceType::kCuda);
    if (m.varlen_k) args.cu_seqlens_k = make_tensor(cu_k.data(), Dtype::kInt32, {4}, DeviceType::kCuda);
    args.max_seqlen_q = *std::max_element(lens_q.begin(), lens_q.end());
    args.max_seqlen_k = *std::max_element(lens_k.begin(), lens_k.end());
    const Status status = forward(args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << m.name << ": " << status.message();
    EXPECT_FALSE(status.message().empty()) << m.name << ": kUnsupported must say what is unsupported";
    EXPECT_EQ(count_unpoisoned(out.storage.data(), Dtype::kBFloat16, out.elements), 0) << m.name << ": out written";
    EXPECT_EQ(count_unpoisoned(lse.storage.data(), Dtype::kFloat32, lse.elements), 0) << m.name << ": lse written";
  }
}

}  // namespace
}  // namespace hopattn::test
