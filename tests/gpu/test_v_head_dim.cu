// v with a head dim of its own (flash-attention 3's headdim_v, e.g. DeepSeek's q/k 192 and v 128) on
// the 16-bit kernels, forward and backward. Such a call runs in the kernel of the wider of the two head
// dims, with the narrower tensors' columns past theirs zero-filled by TMA (or by the cp.async copies),
// and the stores cut to each output's own columns. So it must equal, bit for bit, the same call with q,
// k, v and dout zero-padded in memory to the wider head dim, whose outputs are then cut: the two run
// the same kernel on the same shared-memory contents (the kernels are deterministic; the backward runs
// deterministic here but in a few cases, whose dq may differ in its last bits). The padded calls are ordinary ones that the rest of the suite checks against the
// reference. Outputs live in rows 8 columns longer than they need, poisoned: a store past an output's
// own head dim shows there.
// One pair has forward kernels of its own (q/k 136-192 with v at most 128: V and O tiles 128 wide, in
// 128-key blocks where the padded call's 192 kernel takes 64; warp-specialized only): its online softmax
// rounds P to 16 bits against other running maxima, so its out differs from the padded call's in the
// last bits. Those calls are held to the reference backend instead (float64 inside, on float32 copies
// of the same inputs): no further from it than twice the padded call's error plus half a rounding step
// (output_bound's rule, the padded kernel as the naive one), and their LSE likewise. Their backward
// kernels (V and dO tiles 128 wide) give the padded call's bits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

struct OwnVCase {
  const char* name;
  int head_dim, head_dim_v;
  std::vector<int> len_q, len_k;  // one per sequence; with varlen, packed, else all equal
  int heads_q = 4, heads_kv = 2;
  Dtype dtype = Dtype::kBFloat16;
  bool causal = false;
  bool varlen = false;
  int page_size = 0;   // > 0: k and v a paged cache (varlen q), len_k as seqused_k
  int num_splits = 0;  // FwdArgs::num_splits
  KernelOptions options{};
  int attention_chunk = 0;  // FwdArgs::attention_chunk
  bool deterministic = true;  // BwdArgs::deterministic
  std::vector<int> used_q;    // the backward's seqused_q, one per sequence (empty: none)
};

constexpr int kSlack = 8;  // extra columns of every output row, poisoned

// Whether the case's forward runs in the kernels whose V and O tiles are v's 128 columns (forward.cu's
// dispatch_head_dim).
bool v_width_kernel(const OwnVCase& c) {
  return c.head_dim > 128 && c.head_dim <= 192 && c.head_dim_v <= 128 && c.options.warp_specialized;
}

float as_float(std::uint16_t bits, Dtype dtype) {
  if (dtype == Dtype::kBFloat16) return __bfloat162float(__nv_bfloat16_raw{bits});
  return __half2float(__half_raw{bits});
}

std::vector<float> host_floats(const DeviceBuffer& buffer, Dtype dtype) {
  const std::vector<std::uint16_t> bits = buffer.to_host<std::uint16_t>();
  std::vector<float> values(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) values[i] = as_float(bits[i], dtype);
  return values;
}

// A CUDA tensor over rows of `storage_cols` elements of which the view takes `cols`; the other extents
// (outer first) contiguous.
Tensor columns_view(void* data, Dtype dtype, std::vector<std::int64_t> extents, int cols, int storage_cols) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = DeviceType::kCuda;
  t.rank = static_cast<int>(extents.size()) + 1;
  std::int64_t stride = storage_cols;
  t.shape[t.rank - 1] = cols;
  t.stride[t.rank - 1] = 1;
  for (int i = t.rank - 2; i >= 0; --i) {
    t.shape[i] = extents[i];
    t.stride[i] = stride;
    stride *= extents[i];
  }
  return t;
}

// `rows` rows of `storage_cols` elements: N(0, 1) in the first `cols`, zeros past them.
DeviceBuffer random_rows(std::int64_t rows, int cols, int storage_cols, Dtype dtype, std::uint64_t seed) {
  const std::size_t element = dtype_size(dtype);
  DeviceBuffer buffer(rows * storage_cols * element);
  fill_normal(buffer.data(), dtype, rows * storage_cols, seed);
  if (cols < storage_cols) {
    HOPATTN_CUDA_CHECK(cudaMemset2D(static_cast<char*>(buffer.data()) + cols * element, storage_cols * element, 0,
                                    (storage_cols - cols) * element, rows));
  }
  return buffer;
}

DeviceBuffer poisoned(std::int64_t elements, Dtype dtype) {
  DeviceBuffer buffer(elements * dtype_size(dtype));
  poison_nan(buffer.data(), dtype, elements);
  return buffer;
}

// What differs between rows of `own` (cols wide in rows of cols + kSlack, the slack still poisoned) and
// the first cols of `padded`'s rows (padded_cols wide); empty when nothing does. bits = false: only the
// slack and NaN/Inf are checked (the values are held to the reference instead).
std::string compare_rows(const char* what, const DeviceBuffer& own, const DeviceBuffer& padded, std::int64_t rows,
                         int cols, int padded_cols, Dtype dtype, bool bits = true) {
  const std::vector<std::uint16_t> a = own.to_host<std::uint16_t>(), b = padded.to_host<std::uint16_t>();
  const auto poison = static_cast<std::uint16_t>(nan_bits(dtype));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < cols + kSlack; ++c) {
      const std::uint16_t got = a[r * (cols + kSlack) + c];
      if (c >= cols && got != poison) return std::string(what) + ": written past its columns, row " + std::to_string(r);
      if (c < cols && bits && got != b[r * padded_cols + c]) {
        std::ostringstream s;
        s << what << " row " << r << " column " << c << ": 0x" << std::hex << got << " where the padded call has 0x"
          << b[r * padded_cols + c];
        return s.str();
      }
      if (c < cols && (got & 0x7F80) == 0x7F80 && dtype == Dtype::kBFloat16) return std::string(what) + ": NaN/Inf";
      if (c < cols && (got & 0x7C00) == 0x7C00 && dtype == Dtype::kFloat16) return std::string(what) + ": NaN/Inf";
    }
  }
  return "";
}

// dq of a backward that is not deterministic (its float32 sums in any order): like compare_rows, but
// each value within one rounding step of the padded call's (at the larger of the two) plus 1e-4 of the
// padded call's largest |dq|, for sums cancelling.
std::string compare_dq_rows(const DeviceBuffer& own, const DeviceBuffer& padded, std::int64_t rows, int cols,
                            int padded_cols, Dtype dtype) {
  if (std::string problem = compare_rows("dq", own, padded, rows, cols, padded_cols, dtype, false); !problem.empty())
    return problem;
  const std::vector<float> a = host_floats(own, dtype), b = host_floats(padded, dtype);
  float largest = 0.0f;
  for (std::int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) largest = std::max(largest, std::fabs(b[r * padded_cols + c]));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const float got = a[r * (cols + kSlack) + c], want = b[r * padded_cols + c];
      const float bound =
          2.0f * half_rounding_step(dtype, std::max(std::fabs(got), std::fabs(want))) + 1e-4f * largest;
      if (!(std::fabs(got - want) <= bound)) {
        std::ostringstream s;
        s << "dq row " << r << " column " << c << ": " << got << " where the padded call has " << want << " (bound "
          << bound << ")";
        return s.str();
      }
    }
  }
  return "";
}

// One set of buffers for a case: q and k `head_dim` wide and v `head_dim_v` wide inside rows of
// `storage` columns (zeros past their own), outputs in rows of their own width + kSlack (own) or of
// `storage` (padded).
struct Inputs {
  DeviceBuffer q, k, v, dout;
  std::vector<int> cu_q, cu_k, table;  // host copies of cu_seqlens_q, cu_seqlens_k and page_table
  DeviceBuffer cu_seqlens_q, cu_seqlens_k, seqused_k, page_table;
  std::int64_t rows_q = 0, rows_kv = 0;  // (batch x) rows of q, of k and v (varlen: packed; paged: pool)
  int batch = 0, max_q = 0, max_k = 0, pages_per_seq = 0;
};

Inputs make_inputs(const OwnVCase& c, int storage, std::uint64_t seed) {
  Inputs in;
  in.batch = static_cast<int>(c.len_q.size());
  in.max_q = *std::max_element(c.len_q.begin(), c.len_q.end());
  in.max_k = *std::max_element(c.len_k.begin(), c.len_k.end());
  in.cu_q.assign(1, 0);
  in.cu_k.assign(1, 0);
  for (int b = 0; b < in.batch; ++b) {
    in.cu_q.push_back(in.cu_q.back() + c.len_q[b]);
    in.cu_k.push_back(in.cu_k.back() + c.len_k[b]);
  }
  in.rows_q = c.varlen || c.page_size > 0 ? in.cu_q.back() : std::int64_t{in.batch} * in.max_q;
  if (c.page_size > 0) {
    in.pages_per_seq = (in.max_k + c.page_size - 1) / c.page_size;
    in.table.resize(static_cast<std::size_t>(in.batch) * in.pages_per_seq);
    std::iota(in.table.begin(), in.table.end(), 0);
    std::shuffle(in.table.begin(), in.table.end(), std::mt19937_64(seed));
    in.page_table = upload(in.table);
    in.seqused_k = upload(c.len_k);
    in.rows_kv = static_cast<std::int64_t>(in.table.size()) * c.page_size;
  } else {
    in.rows_kv = c.varlen ? in.cu_k.back() : std::int64_t{in.batch} * in.max_k;
  }
  if (c.varlen || c.page_size > 0) in.cu_seqlens_q = upload(in.cu_q);
  if (c.varlen) in.cu_seqlens_k = upload(in.cu_k);
  in.q = random_rows(in.rows_q * c.heads_q, c.head_dim, storage, c.dtype, seed + 1);
  in.k = random_rows(in.rows_kv * c.heads_kv, c.head_dim, storage, c.dtype, seed + 2);
  in.v = random_rows(in.rows_kv * c.heads_kv, c.head_dim_v, storage, c.dtype, seed + 3);
  in.dout = random_rows(in.rows_q * c.heads_q, c.head_dim_v, storage, c.dtype, seed + 4);
  return in;
}

// A q-like (rows_q, heads_q) or k-like (rows_kv, heads_kv) tensor in the case's layout.
Tensor layout_view(const OwnVCase& c, const Inputs& in, void* data, bool q_like, int cols, int storage) {
  const std::int64_t heads = q_like ? c.heads_q : c.heads_kv;
  if (q_like ? (c.varlen || c.page_size > 0) : c.varlen)
    return columns_view(data, c.dtype, {q_like ? in.rows_q : in.rows_kv, heads}, cols, storage);
  if (!q_like && c.page_size > 0)
    return columns_view(data, c.dtype, {in.rows_kv / c.page_size, c.page_size, heads}, cols, storage);
  return columns_view(data, c.dtype, {in.batch, q_like ? in.max_q : in.max_k, heads}, cols, storage);
}

FwdArgs forward_args(const OwnVCase& c, const Inputs& in, int qk_cols, int v_cols, int storage, void* out,
                     int out_storage, void* lse) {
  FwdArgs a;
  a.q = layout_view(c, in, in.q.data(), true, qk_cols, storage);
  a.k = layout_view(c, in, in.k.data(), false, qk_cols, storage);
  a.v = layout_view(c, in, in.v.data(), false, v_cols, storage);
  a.out = layout_view(c, in, out, true, v_cols, out_storage);
  const bool packed_q = c.varlen || c.page_size > 0;
  a.lse = packed_q ? make_tensor(lse, Dtype::kFloat32, {c.heads_q, in.rows_q}, DeviceType::kCuda)
                   : make_tensor(lse, Dtype::kFloat32, {in.batch, c.heads_q, in.max_q}, DeviceType::kCuda);
  if (packed_q) {
    a.cu_seqlens_q = make_tensor(in.cu_seqlens_q.data(), Dtype::kInt32, {in.batch + 1}, DeviceType::kCuda);
    a.max_seqlen_q = in.max_q;
  }
  if (c.varlen) {
    a.cu_seqlens_k = make_tensor(in.cu_seqlens_k.data(), Dtype::kInt32, {in.batch + 1}, DeviceType::kCuda);
    a.max_seqlen_k = in.max_k;
  }
  if (c.page_size > 0) {
    a.page_table = make_tensor(in.page_table.data(), Dtype::kInt32, {in.batch, in.pages_per_seq}, DeviceType::kCuda);
    a.seqused_k = make_tensor(in.seqused_k.data(), Dtype::kInt32, {in.batch}, DeviceType::kCuda);
  }
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));  // the padded call's default would differ
  a.causal = c.causal;
  a.num_splits = c.num_splits;
  a.options = c.options;
  a.attention_chunk = c.attention_chunk;
  return a;
}

// The wider head dim: the storage rows of every input, and the padded call's head dim.
int storage_of(const OwnVCase& c) { return std::max(c.head_dim, c.head_dim_v); }

std::string describe(const OwnVCase& c, std::uint64_t seed) {
  return std::string(c.name) + " (d " + std::to_string(c.head_dim) + ", d_v " + std::to_string(c.head_dim_v) + ", " +
         dtype_name(c.dtype) + ", HOPATTN_TEST_SEED=" + std::to_string(seed) + ")";
}

// Both forwards of `c` on the same inputs: with its own head dims into outputs of their own width +
// kSlack, and zero-padded into outputs `storage` wide; each set poisoned first.
struct ForwardPair {
  DeviceBuffer out_own, lse_own, out_pad, lse_pad;
  FwdArgs own, pad;
  std::int64_t rows = 0;  // rows of out: (batch x) query rows x heads_q
};

// Runs both forwards into `f`; an empty string, or what failed.
std::string run_forward_pair(const OwnVCase& c, const Inputs& in, int storage, ForwardPair* f) {
  f->rows = in.rows_q * c.heads_q;
  const std::int64_t lse_n = std::int64_t{c.heads_q} * in.rows_q;
  f->out_own = poisoned(f->rows * (c.head_dim_v + kSlack), c.dtype);
  f->out_pad = poisoned(f->rows * storage, c.dtype);
  f->lse_own = poisoned(lse_n, Dtype::kFloat32);
  f->lse_pad = poisoned(lse_n, Dtype::kFloat32);
  f->own = forward_args(c, in, c.head_dim, c.head_dim_v, storage, f->out_own.data(), c.head_dim_v + kSlack,
                        f->lse_own.data());
  f->pad = forward_args(c, in, storage, storage, storage, f->out_pad.data(), storage, f->lse_pad.data());
  if (Status st = forward(f->own); !st.ok()) return "own head dims, forward: " + st.message();
  if (Status st = forward(f->pad); !st.ok()) return "padded, forward: " + st.message();
  return "";
}

// The CUDA view `t` as a host one over `data` (same shape and strides, element type `dtype`).
Tensor on_host(Tensor t, const void* data, Dtype dtype) {
  t.data = const_cast<void*>(data);
  t.device = DeviceType::kHost;
  t.dtype = dtype;
  return t;
}

// The reference backend's out (rows of head_dim_v floats) and LSE for the call `own` of case `c`, from
// float32 copies of its inputs.
struct Reference {
  std::vector<float> out, lse;
};
Reference run_reference(const OwnVCase& c, const Inputs& in, const FwdArgs& own, std::int64_t rows) {
  const std::vector<float> q = host_floats(in.q, c.dtype), k = host_floats(in.k, c.dtype), v = host_floats(in.v, c.dtype);
  Reference ref;
  ref.out.assign(rows * c.head_dim_v, 0.0f);
  ref.lse.assign(std::int64_t{c.heads_q} * in.rows_q, 0.0f);
  std::vector<int> seqused(c.len_k.begin(), c.len_k.end());
  FwdArgs a = own;
  a.q = on_host(own.q, q.data(), Dtype::kFloat32);
  a.k = on_host(own.k, k.data(), Dtype::kFloat32);
  a.v = on_host(own.v, v.data(), Dtype::kFloat32);
  Tensor out = own.out;
  out.stride[out.rank - 2] = c.head_dim_v;  // rows of head_dim_v, no slack
  for (int i = out.rank - 3; i >= 0; --i) out.stride[i] = out.stride[i + 1] * out.shape[i + 1];
  a.out = on_host(out, ref.out.data(), Dtype::kFloat32);
  a.lse = on_host(*own.lse, ref.lse.data(), Dtype::kFloat32);
  if (own.cu_seqlens_q) a.cu_seqlens_q = on_host(*own.cu_seqlens_q, in.cu_q.data(), Dtype::kInt32);
  if (own.cu_seqlens_k) a.cu_seqlens_k = on_host(*own.cu_seqlens_k, in.cu_k.data(), Dtype::kInt32);
  if (own.page_table) a.page_table = on_host(*own.page_table, in.table.data(), Dtype::kInt32);
  if (own.seqused_k) a.seqused_k = on_host(*own.seqused_k, seqused.data(), Dtype::kInt32);
  const Status st = forward(a);
  EXPECT_TRUE(st.ok()) << "reference backend: " << st.message();
  return ref;
}

// |got - ref| of the finite references, the largest; -1 where a value is NaN, or infinite where the
// reference is not (or the other way round).
float max_error(const std::vector<float>& got, const std::vector<float>& ref) {
  float worst = 0.0f;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      if (got[i] != ref[i]) return -1.0f;
      continue;
    }
    const float err = std::fabs(got[i] - ref[i]);
    if (!(err <= worst)) worst = std::isnan(err) ? -1.0f : err;
    if (worst < 0.0f) return worst;
  }
  return worst;
}

// The rows (head_dim_v values each, from rows of `pitch`) of a 16-bit output as floats.
std::vector<float> output_floats(const DeviceBuffer& out, std::int64_t rows, int cols, int pitch, Dtype dtype) {
  const std::vector<float> all = host_floats(out, dtype);
  std::vector<float> values(rows * cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) values[r * cols + j] = all[r * pitch + j];
  return values;
}

// The v-width kernels' out and LSE against the reference: each element within twice the padded call's
// largest error plus half a rounding step at its reference (out), twice that error plus 1e-5 (LSE).
std::string reference_mismatch(const OwnVCase& c, const Inputs& in, const ForwardPair& f, int storage) {
  const Reference ref = run_reference(c, in, f.own, f.rows);
  const std::vector<float> own = output_floats(f.out_own, f.rows, c.head_dim_v, c.head_dim_v + kSlack, c.dtype);
  const float pad_err = max_error(output_floats(f.out_pad, f.rows, c.head_dim_v, storage, c.dtype), ref.out);
  if (pad_err < 0.0f) return "the padded call's out has NaN or Inf where the reference has none";
  // The padded kernel is checked against the reference elsewhere: a large error here means the two
  // reference calls disagree (e.g. a reference left unwritten), and the bound below would mean nothing.
  float ref_max = 0.0f;
  for (const float x : ref.out) ref_max = std::max(ref_max, std::fabs(x));
  if (!(pad_err <= 0.02f * ref_max + 1e-4f)) {
    std::ostringstream s;
    s << "the padded call's out is " << pad_err << " from the reference's (largest |value| " << ref_max << ")";
    return s.str();
  }
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    const float bound = 2.0f * pad_err + half_rounding_step(c.dtype, ref.out[i]) + 1e-5f;
    if (!(std::fabs(own[i] - ref.out[i]) <= bound)) {
      std::ostringstream s;
      s << "out element " << i << ": " << own[i] << " against the reference's " << ref.out[i] << " (bound " << bound
        << ", the padded call's largest error " << pad_err << ")";
      return s.str();
    }
  }
  const std::vector<float> lse_own = f.lse_own.to_host<float>();
  const float lse_pad_err = max_error(f.lse_pad.to_host<float>(), ref.lse);
  const float lse_own_err = max_error(lse_own, ref.lse);
  if (lse_pad_err < 0.0f || lse_own_err < 0.0f || lse_own_err > 2.0f * lse_pad_err + 1e-5f) {
    std::ostringstream s;
    s << "lse: largest error " << lse_own_err << " against the padded call's " << lse_pad_err << " (-1: NaN or Inf)";
    return s.str();
  }
  return "";
}

// out and the LSE of a run pair (after a device sync): bit for bit alike, or, where the own call ran in
// the v-width kernels, each held to the reference (reference_mismatch).
std::string forward_pair_mismatch(const OwnVCase& c, const Inputs& in, const ForwardPair& f, int storage) {
  const bool own_kernel = v_width_kernel(c);
  std::string problem = compare_rows("out", f.out_own, f.out_pad, f.rows, c.head_dim_v, storage, c.dtype, !own_kernel);
  if (!problem.empty()) return problem;
  if (own_kernel) return reference_mismatch(c, in, f, storage);
  if (f.lse_own.to_host<std::uint32_t>() != f.lse_pad.to_host<std::uint32_t>())
    return "lse differs from the padded call's";
  return "";
}

// The forward of `c` into own outputs and padded ones: out and the LSE alike (forward_pair_mismatch).
std::string forward_mismatch(const OwnVCase& c, std::uint64_t seed) {
  const int storage = storage_of(c);
  const Inputs in = make_inputs(c, storage, seed);
  ForwardPair f;
  if (std::string failed = run_forward_pair(c, in, storage, &f); !failed.empty()) return failed;
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  return forward_pair_mismatch(c, in, f, storage);
}

// The backward of `c` (dense or varlen) after each call's own forward: out and the LSE alike
// (forward_pair_mismatch), dk and dv bit for bit, and dq too where the backward is deterministic (else
// within a rounding step: compare_dq_rows). Where the forward ran in the v-width kernels, the own
// backward reads the padded forward's out (its first head_dim_v columns) and LSE, so that both
// backwards see the same bits. The backward's v-width kernels (q/k 136-192 with v at most 128:
// backward.cu) skip the zero-filled columns of V and dO that the padded call multiplies, whose products
// add exact zeros: the same bits still.
std::string backward_mismatch(const OwnVCase& c, std::uint64_t seed) {
  const int storage = storage_of(c);
  const Inputs in = make_inputs(c, storage, seed);
  ForwardPair f;
  if (std::string failed = run_forward_pair(c, in, storage, &f); !failed.empty()) return failed;
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  if (std::string problem = forward_pair_mismatch(c, in, f, storage); !problem.empty()) return problem;
  if (v_width_kernel(c)) {
    const std::size_t element = dtype_size(c.dtype);
    HOPATTN_CUDA_CHECK(cudaMemcpy2D(f.out_own.data(), (c.head_dim_v + kSlack) * element, f.out_pad.data(),
                                    storage * element, c.head_dim_v * element, f.rows, cudaMemcpyDeviceToDevice));
    HOPATTN_CUDA_CHECK(cudaMemcpy(f.lse_own.data(), f.lse_pad.data(), f.lse_pad.bytes(), cudaMemcpyDeviceToDevice));
  }

  const std::int64_t rows_kv = in.rows_kv * c.heads_kv;
  const int d = c.head_dim, dv = c.head_dim_v;
  DeviceBuffer dq_own = poisoned(f.rows * (d + kSlack), c.dtype), dk_own = poisoned(rows_kv * (d + kSlack), c.dtype);
  DeviceBuffer dv_own = poisoned(rows_kv * (dv + kSlack), c.dtype);
  DeviceBuffer dq_pad = poisoned(f.rows * storage, c.dtype), dk_pad = poisoned(rows_kv * storage, c.dtype);
  DeviceBuffer dv_pad = poisoned(rows_kv * storage, c.dtype);
  const DeviceBuffer used_q = upload(c.used_q.empty() ? std::vector<int>{0} : c.used_q);
  const auto backward_args = [&](const FwdArgs& fwd, int qk_cols, int v_cols, void* dq, void* dk, void* dv_data,
                                 bool padded) {
    BwdArgs b;
    b.q = fwd.q, b.k = fwd.k, b.v = fwd.v, b.out = fwd.out, b.lse = *fwd.lse;
    b.dout = layout_view(c, in, in.dout.data(), true, v_cols, storage);
    b.dq = layout_view(c, in, dq, true, qk_cols, padded ? storage : qk_cols + kSlack);
    b.dk = layout_view(c, in, dk, false, qk_cols, padded ? storage : qk_cols + kSlack);
    b.dv = layout_view(c, in, dv_data, false, v_cols, padded ? storage : v_cols + kSlack);
    b.cu_seqlens_q = fwd.cu_seqlens_q, b.cu_seqlens_k = fwd.cu_seqlens_k;
    b.max_seqlen_q = fwd.max_seqlen_q, b.max_seqlen_k = fwd.max_seqlen_k;
    b.softmax_scale = fwd.softmax_scale;
    b.causal = c.causal;
    b.attention_chunk = c.attention_chunk;
    if (!c.used_q.empty()) b.seqused_q = make_tensor(used_q.data(), Dtype::kInt32, {in.batch}, DeviceType::kCuda);
    b.deterministic = c.deterministic;
    return b;
  };
  if (Status st = backward(backward_args(f.own, d, dv, dq_own.data(), dk_own.data(), dv_own.data(), false));
      !st.ok())
    return "own head dims, backward: " + st.message();
  if (Status st =
          backward(backward_args(f.pad, storage, storage, dq_pad.data(), dk_pad.data(), dv_pad.data(), true));
      !st.ok())
    return "padded, backward: " + st.message();
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::string problem = c.deterministic ? compare_rows("dq", dq_own, dq_pad, f.rows, d, storage, c.dtype)
                                        : compare_dq_rows(dq_own, dq_pad, f.rows, d, storage, c.dtype);
  if (problem.empty()) problem = compare_rows("dk", dk_own, dk_pad, rows_kv, d, storage, c.dtype);
  if (problem.empty()) problem = compare_rows("dv", dv_own, dv_pad, rows_kv, dv, storage, c.dtype);
  return problem;
}

// mismatch(case, seed) empty for each case, each on its own seed drawn from the run's.
template <std::size_t kCases, class Mismatch>
void expect_each_equals_padded(const OwnVCase (&cases)[kCases], Mismatch&& mismatch) {
  const std::uint64_t seed = run_seed();
  int index = 0;
  for (const OwnVCase& c : cases) {
    const std::string problem = mismatch(c, splitmix64(seed + index++));
    EXPECT_TRUE(problem.empty()) << describe(c, seed) << "\n  " << problem;
  }
}

class VHeadDimOfItsOwn : public HopperTest {};

// Narrower v (DeepSeek's 192/128, and within one tile width) and wider v, dense and variable-length,
// causal or not, GQA; decoding steps packed and split (at 192 / 128 in the d 256 decoding kernel, as the
// padded call); a paged cache of pages small enough for the cp.async copies (whose V rows end at v's
// head dim) and one loaded by TMA. q/k at the 192 tile with v at
// most 128 run in kernels whose V and O tiles are 128 wide (forward.cu), the padded call in the 192 one:
// their P V differ in width only, so the outputs must still be the same bits. Those cases cover their
// dense, variable-length, chunk and non-warp-specialized kernels, odd lengths, tiles enough for the
// persistent hand-out and a v narrower than the tile.
TEST_F(VHeadDimOfItsOwn, ForwardEqualsTheZeroPaddedCall) {
  KernelOptions copies;
  copies.kv_loads = KernelOptions::KvLoads::kCopyThreads;
  KernelOptions inline_loads;
  inline_loads.warp_specialized = false;
  const OwnVCase cases[] = {
      {"deepseek dense causal", 192, 128, {77, 77}, {300, 300}, 4, 2, Dtype::kBFloat16, true},
      {"deepseek dense, many tiles", 192, 128, {1000, 1000}, {1000, 1000}, 16, 16, Dtype::kFloat16, false},
      {"deepseek varlen causal", 192, 128, {1, 300, 129, 0}, {200, 300, 700, 5}, 8, 2, Dtype::kBFloat16, true, true},
      {"deepseek chunks", 192, 128, {1, 333}, {1, 333}, 4, 1, Dtype::kBFloat16, true, false, 0, 0, {}, 128},
      {"deepseek non-warp-specialized", 192, 128, {65}, {191}, 2, 2, Dtype::kFloat16, true, false, 0, 0, inline_loads},
      {"q/k 160, v 72", 160, 72, {130}, {257}, 4, 2, Dtype::kBFloat16, false},
      {"narrower v, one tile width", 128, 72, {129}, {129}, 4, 4, Dtype::kFloat16, false},
      {"wider v", 64, 128, {65, 65, 65}, {200, 200, 200}, 8, 2, Dtype::kBFloat16, true},
      {"wider v at 256", 136, 256, {100}, {77}, 2, 1, Dtype::kFloat16, true},
      {"varlen", 128, 64, {1, 127, 0, 300}, {300, 1, 65, 129}, 4, 2, Dtype::kBFloat16, true, true},
      {"varlen wider v", 32, 96, {1, 127, 300}, {300, 1, 129}, 4, 2, Dtype::kFloat16, false, true},
      {"decode packed, split", 128, 64, {1, 1, 1}, {3000, 1, 700}, 28, 4, Dtype::kBFloat16, true, true, 0, 5},
      {"deepseek decode (the d 256 decoding kernel)", 192, 128, {1, 1, 1}, {3000, 1, 700}, 16, 2, Dtype::kFloat16,
       true, true},
      {"decode cp.async", 96, 128, {1, 1}, {1000, 77}, 8, 2, Dtype::kFloat16, true, true, 0, 0, copies},
      {"paged 16 (copies)", 64, 32, {1, 77}, {300, 1000}, 4, 2, Dtype::kBFloat16, true, false, 16},
      {"paged 64 (TMA)", 192, 128, {33, 1}, {500, 64}, 4, 2, Dtype::kFloat16, true, false, 64},
      {"deepseek paged 16 (TMA, 8 pages a block)", 192, 128, {1, 130}, {700, 130}, 4, 1, Dtype::kBFloat16, true, false,
       16},
  };
  expect_each_equals_padded(cases, forward_mismatch);
}

// q/k at the 192 tile with v at most 128 run in backward kernels whose V and dO tiles are 128 wide: their
// dense / variable-length, deterministic and chunk / seqused_q kernels, odd lengths, many key blocks and
// a v narrower than the tile.
TEST_F(VHeadDimOfItsOwn, BackwardEqualsTheZeroPaddedCall) {
  const OwnVCase cases[] = {
      {"deepseek dense causal", 192, 128, {77, 77}, {300, 300}, 4, 2, Dtype::kBFloat16, true},
      {"deepseek dense, many key blocks", 192, 128, {500}, {1000}, 4, 4, Dtype::kFloat16, false},
      {"deepseek varlen causal", 192, 128, {1, 300, 129, 0}, {200, 300, 700, 5}, 8, 2, Dtype::kBFloat16, true, true},
      {"deepseek, not deterministic", 192, 128, {333, 333}, {333, 333}, 4, 2, Dtype::kFloat16, true, false, 0, 0, {},
       0, false},
      {"deepseek varlen, not deterministic", 192, 128, {65, 1, 257}, {300, 77, 257}, 4, 1, Dtype::kBFloat16, false, true,
       0, 0, {}, 0, false},
      {"deepseek chunks", 192, 128, {1, 333}, {1, 333}, 4, 1, Dtype::kBFloat16, true, false, 0, 0, {}, 128, false},
      {"deepseek seqused_q", 192, 128, {200, 129}, {300, 129}, 4, 2, Dtype::kFloat16, true, true, 0, 0, {}, 0, false,
       {131, 64}},
      {"q/k 160, v 72", 160, 72, {130}, {257}, 4, 2, Dtype::kBFloat16, false},
      {"narrower v, one tile width", 128, 72, {129}, {129}, 2, 1, Dtype::kFloat16, false},
      {"wider v", 64, 128, {65, 65}, {200, 200}, 4, 2, Dtype::kBFloat16, true},
      {"varlen", 128, 64, {1, 127, 0, 300}, {300, 1, 65, 129}, 4, 2, Dtype::kBFloat16, true, true},
      {"varlen wider v", 40, 256, {127, 65}, {1, 129}, 2, 2, Dtype::kFloat16, false, true},
  };
  expect_each_equals_padded(cases, backward_mismatch);
}

// What has no kernel is refused naming v, before anything is written: an FP8 v head dim that is no
// multiple of 16, and a 16-bit one that is no multiple of 8.
TEST_F(VHeadDimOfItsOwn, VHeadDimsWithoutAKernelAreRefused) {
  struct Refused {
    Dtype dtype;
    int head_dim, head_dim_v;
    const char* rule;
  };
  for (const Refused& r : {Refused{Dtype::kFloat8E4M3, 128, 72, "a multiple of 16"},
                           Refused{Dtype::kBFloat16, 128, 60, "multiple of 8"}}) {
    const bool fp8 = r.dtype == Dtype::kFloat8E4M3;
    const Dtype out_dtype = fp8 ? Dtype::kBFloat16 : r.dtype;
    const int batch = 1, heads = 2, rows = 65;
    const std::size_t in_size = dtype_size(r.dtype);
    DeviceBuffer q(std::size_t{1} * rows * heads * r.head_dim * in_size), k(q.bytes());
    DeviceBuffer v(std::size_t{1} * rows * heads * r.head_dim_v * in_size);
    for (const DeviceBuffer* t : {&q, &k, &v}) HOPATTN_CUDA_CHECK(cudaMemset(t->data(), 0x38, t->bytes()));
    const std::int64_t out_n = std::int64_t{rows} * heads * r.head_dim_v;
    DeviceBuffer out = poisoned(out_n, out_dtype);
    FwdArgs a;
    a.q = make_tensor(q.data(), r.dtype, {batch, rows, heads, r.head_dim}, DeviceType::kCuda);
    a.k = make_tensor(k.data(), r.dtype, {batch, rows, heads, r.head_dim}, DeviceType::kCuda);
    a.v = make_tensor(v.data(), r.dtype, {batch, rows, heads, r.head_dim_v}, DeviceType::kCuda);
    a.out = make_tensor(out.data(), out_dtype, {batch, rows, heads, r.head_dim_v}, DeviceType::kCuda);
    const Status status = forward(a);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.message();
    EXPECT_EQ(status.message().rfind("v: ", 0), 0u) << status.message();
    EXPECT_NE(status.message().find(r.rule), std::string::npos) << status.message();
    EXPECT_EQ(count_unpoisoned(out.data(), out_dtype, out_n), 0) << "out written";
  }
}

}  // namespace
}  // namespace hopattn::test
