#include "gpu_timing.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda_check.hpp"
#include "device_buffer.hpp"
#include "launch_gate.hpp"
#include "random_fill.hpp"

namespace hopattn::bench {
namespace {

// Inputs are rotated until together they exceed twice the H100/H200 L2 (50-60 MB), so every call
// reads q, k and v (and a backward out, dout and the LSE) from HBM as it would in a real model.
constexpr std::size_t kRotationBytes = std::size_t{128} << 20;
constexpr int kMaxInputSets = 64;
// Long shapes (a 128k-token causal call takes ~0.5 s) get fewer calls, so a grid stays minutes long.
constexpr double kWarmupBudgetMs = 2000.0;
constexpr double kTimedBudgetMs = 10000.0;
constexpr int kMinTimedIters = 5;
// --back-to-back: calls per pair of events. An event recorded between two kernels keeps the second
// from launching early by programmatic dependent launch (bench/probes/launch_floor.cu).
constexpr int kBackToBackGroup = 10;

struct InputSet {
  DeviceBuffer q, k, v, out, lse;
  DeviceBuffer q_block_descale, k_block_descale, v_block_descale;  // Shape::fp8_block_rows > 0
  DeviceBuffer cu_seqlens_q, cu_seqlens_k;                           // Shape::varlen
  DeviceBuffer page_table;                                           // Shape::page_size > 0
  DeviceBuffer seqused_k;                                            // Shape::cache_seqlen_k > 0
  DeviceBuffer seqused_q;                                            // Shape::padded_seqlen_q > 0
  DeviceBuffer dout, dq, dk, dv;                                     // Shape::backward
  DeviceBuffer sink, dsink;                                          // Shape::learnable_sink
  DeviceBuffer qv;                                                   // Shape::qv: shaped like out
};

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// A device copy of `values` in `buffer`.
template <class T>
Status upload(const std::vector<T>& values, DeviceBuffer* buffer) {
  if (Status st = buffer->allocate(values.size() * sizeof(T)); !st.ok()) return st;
  HOPATTN_BENCH_CHECK_CUDA(cudaMemcpy(buffer->get(), values.data(), buffer->bytes(), cudaMemcpyHostToDevice));
  return Status::Ok();
}

// `count` block descales as Shape::fp8_block_scales says, on the device.
Status make_block_descales(std::int64_t count, Fp8BlockScales kind, bool v_scales, std::uint64_t seed,
                           DeviceBuffer* buffer) {
  return upload(fp8_block_descale_values(count, kind, v_scales, seed), buffer);
}

// int32 prefix sums 0, seqlen, 2 seqlen, ..., batch seqlen: a packed batch of equal lengths.
Status make_cu_seqlens(int batch, int seqlen, DeviceBuffer* buffer) {
  std::vector<int> sums(static_cast<std::size_t>(batch) + 1);
  for (int b = 0; b <= batch; ++b) sums[b] = b * seqlen;
  return upload(sums, buffer);
}

struct Extents {
  std::int64_t q, kv, lse;  // elements; out has q's; q: allocated_rows_q per sequence; kv: allocated_keys
  std::int64_t q_used;      // elements of q in use: seqlen_q rows per sequence (q unless padded_seqlen_q)
  std::int64_t kv_used;     // elements of k in use: seqlen_k keys per sequence (kv unless cache_seqlen_k)
  std::int64_t v;           // v's storage: kv's rows of v's head dim, or keys-contiguous its keys padded to 16
  std::int64_t v_used;      // elements of v's storage a call reads
  std::int64_t out, out_used;  // out's (and dout's): q's rows of v's head dim
  int v_row_keys;           // v keys-contiguous: keys per (batch, head, dim) row of storage
  Dtype out_dtype;
};

Extents extents_of(const Shape& s) {
  Extents e;
  e.q = std::int64_t{s.batch} * allocated_rows_q(s) * s.heads_q * s.hdim;
  e.q_used = std::int64_t{s.batch} * s.seqlen_q * s.heads_q * s.hdim;
  e.kv = std::int64_t{s.batch} * allocated_keys(s) * s.heads_kv * s.hdim;
  e.kv_used = std::int64_t{s.batch} * s.seqlen_k * s.heads_kv * s.hdim;
  e.lse = std::int64_t{s.batch} * s.heads_q * allocated_rows_q(s);
  e.v_row_keys = ceil_div(s.seqlen_k, 16) * 16;  // TMA: the V^T rows' stride a multiple of 16 bytes
  const int d_v = head_dim_v(s);
  e.v = s.v_keys_contiguous ? std::int64_t{s.batch} * s.heads_kv * d_v * e.v_row_keys
                            : std::int64_t{s.batch} * allocated_keys(s) * s.heads_kv * d_v;
  e.v_used = s.v_keys_contiguous ? e.v : std::int64_t{s.batch} * s.seqlen_k * s.heads_kv * d_v;
  e.out = std::int64_t{s.batch} * allocated_rows_q(s) * s.heads_q * d_v;
  e.out_used = std::int64_t{s.batch} * s.seqlen_q * s.heads_q * d_v;
  e.out_dtype = s.dtype == Dtype::kFloat8E4M3 ? Dtype::kBFloat16 : s.dtype;  // fp8 attention writes bf16
  return e;
}

// The bytes of one input set that a call reads and writes (of a cache, the keys in use; of padded q,
// the rows in use). A backward (write_lse true) also has dout like out, dq like q, dk like k and dv
// like v, all in the inputs' dtype.
std::size_t set_bytes(const Extents& e, Dtype in, bool write_lse, bool backward) {
  const std::size_t forward = static_cast<std::size_t>(e.q_used + e.kv_used + e.v_used) * dtype_size(in) +
                              static_cast<std::size_t>(e.out_used) * dtype_size(e.out_dtype) +
                              (write_lse ? static_cast<std::size_t>(e.lse) * 4 : 0);
  const std::int64_t gradients = e.out_used + e.q_used + e.kv + e.v;
  return backward ? forward + static_cast<std::size_t>(gradients) * dtype_size(in) : forward;
}

// q, k, v random; out and lse poisoned with all-ones bytes (NaN in every float dtype), so output the
// kernel failed to write shows up in check_outputs. A backward set also gets dout random (seed + 3)
// and dq, dk, dv poisoned the same way (check_gradients).
Status make_input_set(const Shape& s, const Extents& e, bool write_lse, std::uint64_t seed, InputSet* set) {
  const std::size_t in_size = dtype_size(s.dtype);
  if (Status st = set->q.allocate(e.q * in_size); !st.ok()) return st;
  if (Status st = set->k.allocate(e.kv * in_size); !st.ok()) return st;
  if (Status st = set->v.allocate(e.v * in_size); !st.ok()) return st;
  if (Status st = set->out.allocate(e.out * dtype_size(e.out_dtype)); !st.ok()) return st;
  if (Status st = fill_random_device(set->q.get(), s.dtype, e.q, seed); !st.ok()) return st;
  if (Status st = fill_random_device(set->k.get(), s.dtype, e.kv, seed + 1); !st.ok()) return st;
  if (Status st = fill_random_device(set->v.get(), s.dtype, e.v, seed + 2); !st.ok()) return st;
  HOPATTN_BENCH_CHECK_CUDA(cudaMemset(set->out.get(), 0xFF, set->out.bytes()));
  if (write_lse) {
    if (Status st = set->lse.allocate(e.lse * sizeof(float)); !st.ok()) return st;
    HOPATTN_BENCH_CHECK_CUDA(cudaMemset(set->lse.get(), 0xFF, set->lse.bytes()));
  }
  if (s.fp8_block_rows > 0) {
    const std::int64_t q_blocks = std::int64_t{s.batch} * s.heads_q * ceil_div(allocated_rows_q(s), s.fp8_block_rows);
    const std::int64_t kv_blocks = std::int64_t{s.batch} * s.heads_kv * ceil_div(s.seqlen_k, s.fp8_block_rows);
    const Fp8BlockScales kind = s.fp8_block_scales;
    if (Status st = make_block_descales(q_blocks, kind, false, seed + 4, &set->q_block_descale); !st.ok()) return st;
    if (Status st = make_block_descales(kv_blocks, kind, false, seed + 5, &set->k_block_descale); !st.ok()) return st;
    if (Status st = make_block_descales(kv_blocks, kind, true, seed + 6, &set->v_block_descale); !st.ok()) return st;
  }
  if (s.varlen) {
    if (Status st = make_cu_seqlens(s.batch, allocated_rows_q(s), &set->cu_seqlens_q); !st.ok()) return st;
    if (Status st = make_cu_seqlens(s.batch, s.seqlen_k, &set->cu_seqlens_k); !st.ok()) return st;
  }
  if (s.page_size > 0) {
    const int pages_per_seq = allocated_keys(s) / s.page_size;
    if (Status st = upload(page_table_values(s.batch, pages_per_seq, s.pages_in_order, seed), &set->page_table);
        !st.ok())
      return st;
  }
  if (s.cache_seqlen_k > 0) {
    if (Status st = upload(std::vector<int>(s.batch, s.seqlen_k), &set->seqused_k); !st.ok()) return st;
  }
  if (s.padded_seqlen_q > 0) {
    if (Status st = upload(std::vector<int>(s.batch, s.seqlen_q), &set->seqused_q); !st.ok()) return st;
  }
  if (s.qv) {
    if (Status st = set->qv.allocate(e.out * in_size); !st.ok()) return st;
    if (Status st = fill_random_device(set->qv.get(), s.dtype, e.out, seed + 7); !st.ok()) return st;
  }
  if (s.learnable_sink) {
    if (Status st = upload(std::vector<float>(s.heads_q, 0.5f), &set->sink); !st.ok()) return st;
    if (Status st = set->dsink.allocate(s.heads_q * sizeof(float)); !st.ok()) return st;
  }
  if (s.backward) {
    if (Status st = set->dout.allocate(e.out * in_size); !st.ok()) return st;
    if (Status st = fill_random_device(set->dout.get(), s.dtype, e.out, seed + 3); !st.ok()) return st;
    for (DeviceBuffer* grad : {&set->dq, &set->dk, &set->dv}) {
      const std::int64_t elements = grad == &set->dq ? e.q : grad == &set->dk ? e.kv : e.v;
      if (Status st = grad->allocate(elements * in_size); !st.ok()) return st;
      HOPATTN_BENCH_CHECK_CUDA(cudaMemset(grad->get(), 0xFF, grad->bytes()));
    }
  }
  return Status::Ok();
}

FwdArgs forward_args(const Shape& s, const Extents& e, const InputSet& set, const TimingOptions& options) {
  const DeviceType cuda = DeviceType::kCuda;
  FwdArgs args;
  const int q_rows = allocated_rows_q(s);
  args.q = make_tensor(set.q.get(), s.dtype, {s.batch, q_rows, s.heads_q, s.hdim}, cuda, options.device);
  const int kv_keys = allocated_keys(s);
  args.k = make_tensor(set.k.get(), s.dtype, {s.batch, kv_keys, s.heads_kv, s.hdim}, cuda, options.device);
  const int d_v = head_dim_v(s);
  args.v = make_tensor(set.v.get(), s.dtype, {s.batch, kv_keys, s.heads_kv, d_v}, cuda, options.device);
  if (s.cache_seqlen_k > 0) {
    args.seqused_k = make_tensor(set.seqused_k.get(), Dtype::kInt32, {s.batch}, cuda, options.device);
  }
  if (s.padded_seqlen_q > 0) {
    args.seqused_q = make_tensor(set.seqused_q.get(), Dtype::kInt32, {s.batch}, cuda, options.device);
  }
  if (s.kv_heads_major) {  // (batch, heads_kv, keys, d) storage viewed as (batch, keys, heads_kv, d)
    for (Tensor* t : {&args.k, &args.v}) {
      const std::int64_t d = t->shape[3];
      const std::int64_t strides[4] = {std::int64_t{s.heads_kv} * kv_keys * d, d, std::int64_t{kv_keys} * d, 1};
      std::copy(strides, strides + 4, t->stride);
    }
  }
  if (s.v_keys_contiguous) {  // (batch, heads_kv, d_v, row keys) storage viewed as (batch, keys, heads_kv, d_v)
    const std::int64_t row = e.v_row_keys;
    const std::int64_t strides[4] = {std::int64_t{s.heads_kv} * d_v * row, 1, std::int64_t{d_v} * row, row};
    std::copy(strides, strides + 4, args.v.stride);
  }
  args.out = make_tensor(set.out.get(), e.out_dtype, {s.batch, q_rows, s.heads_q, d_v}, cuda, options.device);
  if (options.write_lse) {
    args.lse = make_tensor(set.lse.get(), Dtype::kFloat32, {s.batch, s.heads_q, q_rows}, cuda, options.device);
  }
  if (s.fp8_block_rows > 0) {
    const int rows = s.fp8_block_rows;
    args.q_block_descale = make_tensor(set.q_block_descale.get(), Dtype::kFloat32,
                                       {s.batch, s.heads_q, ceil_div(q_rows, rows)}, cuda, options.device);
    args.k_block_descale = make_tensor(set.k_block_descale.get(), Dtype::kFloat32,
                                       {s.batch, s.heads_kv, ceil_div(s.seqlen_k, rows)}, cuda, options.device);
    args.v_block_descale = make_tensor(set.v_block_descale.get(), Dtype::kFloat32,
                                       {s.batch, s.heads_kv, ceil_div(s.seqlen_k, rows)}, cuda, options.device);
    args.descale_block_rows_q = rows;
    args.descale_block_rows_kv = rows;
  }
  if (s.varlen) {  // the same buffers, packed: (batch * seqlen, heads, d) and LSE (heads, batch * seqlen_q)
    const std::int64_t total_q = std::int64_t{s.batch} * q_rows, total_k = std::int64_t{s.batch} * s.seqlen_k;
    args.q = make_tensor(set.q.get(), s.dtype, {total_q, s.heads_q, s.hdim}, cuda, options.device);
    args.k = make_tensor(set.k.get(), s.dtype, {total_k, s.heads_kv, s.hdim}, cuda, options.device);
    args.v = make_tensor(set.v.get(), s.dtype, {total_k, s.heads_kv, d_v}, cuda, options.device);
    args.out = make_tensor(set.out.get(), e.out_dtype, {total_q, s.heads_q, d_v}, cuda, options.device);
    if (options.write_lse) {
      args.lse = make_tensor(set.lse.get(), Dtype::kFloat32, {s.heads_q, total_q}, cuda, options.device);
    }
    args.cu_seqlens_q = make_tensor(set.cu_seqlens_q.get(), Dtype::kInt32, {s.batch + 1}, cuda, options.device);
    args.cu_seqlens_k = make_tensor(set.cu_seqlens_k.get(), Dtype::kInt32, {s.batch + 1}, cuda, options.device);
    args.max_seqlen_q = q_rows;
    args.max_seqlen_k = s.seqlen_k;
  }
  if (s.page_size > 0) {  // the same k and v storage as pages: (batch * kv_keys / page_size, page_size, ...)
    const int pages_per_seq = kv_keys / s.page_size;
    const std::int64_t pages = std::int64_t{s.batch} * pages_per_seq;
    args.k = make_tensor(set.k.get(), s.dtype, {pages, s.page_size, s.heads_kv, s.hdim}, cuda, options.device);
    args.v = make_tensor(set.v.get(), s.dtype, {pages, s.page_size, s.heads_kv, d_v}, cuda, options.device);
    args.page_table = make_tensor(set.page_table.get(), Dtype::kInt32, {s.batch, pages_per_seq}, cuda, options.device);
  }
  if (s.learnable_sink) args.learnable_sink = make_tensor(set.sink.get(), Dtype::kFloat32, {s.heads_q}, cuda, options.device);
  if (s.qv) args.qv = make_tensor(set.qv.get(), s.dtype, {s.batch, q_rows, s.heads_q, d_v}, cuda, options.device);
  args.causal = s.causal;
  args.window_left = s.window_left;
  args.attention_chunk = s.attention_chunk;
  args.softcap = s.softcap;
  args.options = s.options;
  args.num_splits = s.num_splits;
  args.stream = options.stream;
  return args;
}

// BwdArgs over the set's buffers: q, k, v, out, lse and (--varlen) the sequence arrays as the forward
// pre-pass saw them (`fwd`), dout shaped like out, dq like q, dk like k and dv like v (packed with
// --varlen).
BwdArgs backward_args(const Shape& s, const FwdArgs& fwd, const InputSet& set, const TimingOptions& options) {
  BwdArgs args;
  args.q = fwd.q;
  args.k = fwd.k;
  args.v = fwd.v;
  args.out = fwd.out;
  args.lse = *fwd.lse;
  const auto like = [](Tensor t, const DeviceBuffer& buffer) {
    t.data = buffer.get();
    return t;
  };
  args.dout = like(fwd.out, set.dout);
  args.dq = like(fwd.q, set.dq);
  args.dk = like(fwd.k, set.dk);
  args.dv = like(fwd.v, set.dv);
  args.cu_seqlens_q = fwd.cu_seqlens_q;
  args.cu_seqlens_k = fwd.cu_seqlens_k;
  args.max_seqlen_q = fwd.max_seqlen_q;
  args.max_seqlen_k = fwd.max_seqlen_k;
  args.seqused_q = fwd.seqused_q;
  args.causal = s.causal;
  args.window_left = s.window_left;
  args.attention_chunk = s.attention_chunk;
  args.softcap = s.softcap;
  args.deterministic = s.deterministic;
  if (s.learnable_sink) {
    args.learnable_sink = fwd.learnable_sink;
    args.dsink = like(*fwd.learnable_sink, set.dsink);
  }
  args.stream = options.stream;
  return args;
}

// Which elements of a buffer with query rows a call writes: with padded q (Shape::padded_seqlen_q)
// the rows past seqlen_q in each sequence are never written, so they keep the poison. Element i lies
// in query row (i / row_elements) % rows_per_sequence of its sequence, for q-shaped buffers, dense or
// packed, (row_elements = heads * d) and for the LSE, dense (batch, heads, rows) or packed (heads,
// batch * rows) (row_elements = 1).
struct RowsInUse {
  std::int64_t row_elements = 1;
  std::int64_t rows_per_sequence = 1;
  std::int64_t used_rows = 1;
  bool contains(std::int64_t i) const { return (i / row_elements) % rows_per_sequence < used_rows; }
};

RowsInUse rows_in_use(const Shape& s, std::int64_t row_elements) {
  return {row_elements, allocated_rows_q(s), s.seqlen_q};
}

// A 16-bit float buffer (`dtype`: float16 or bfloat16) with every element in `rows` finite, else an
// error naming `name` and the first bad flat index. The 0xFF poison bytes count as bad: unwritten.
Status check_finite_16bit(const DeviceBuffer& buffer, Dtype dtype, const char* name, const RowsInUse& rows = {}) {
  std::vector<std::uint16_t> codes(buffer.bytes() / 2);
  HOPATTN_BENCH_CHECK_CUDA(cudaMemcpy(codes.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost));
  const std::uint16_t exponent_mask = dtype == Dtype::kFloat16 ? 0x7C00 : 0x7F80;  // all ones: inf/NaN
  for (std::size_t i = 0; i < codes.size(); ++i) {
    if ((codes[i] & exponent_mask) == exponent_mask && rows.contains(static_cast<std::int64_t>(i))) {
      return Status(StatusCode::kCudaError,
                    std::string(name) + " has a NaN/Inf (or unwritten element) at flat index " + std::to_string(i));
    }
  }
  return Status::Ok();
}

// The first set's output after the warm-up: every element of the rows in use finite; LSE may be -inf
// (a row that sees no key) but never NaN or +inf. A time measured on a kernel that writes garbage is
// not reported.
Status check_outputs(const Shape& s, const InputSet& set, Dtype out_dtype) {
  if (Status st = check_finite_16bit(set.out, out_dtype, "out", rows_in_use(s, std::int64_t{s.heads_q} * head_dim_v(s)));
      !st.ok())
    return st;
  if (set.lse.get() == nullptr) return Status::Ok();
  std::vector<float> lse(set.lse.bytes() / sizeof(float));
  HOPATTN_BENCH_CHECK_CUDA(cudaMemcpy(lse.data(), set.lse.get(), set.lse.bytes(), cudaMemcpyDeviceToHost));
  const RowsInUse rows = rows_in_use(s, 1);
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if ((std::isnan(lse[i]) || lse[i] == INFINITY) && rows.contains(static_cast<std::int64_t>(i))) {
      return Status(StatusCode::kCudaError,
                    "lse has a NaN/+Inf (or unwritten element) at flat index " + std::to_string(i));
    }
  }
  return Status::Ok();
}

// The first set's gradients after the backward's warm-up: dq, dk and dv finite (and written; dq's rows
// past seqused_q too, as zeros).
Status check_gradients(const InputSet& set, Dtype dtype) {
  if (Status st = check_finite_16bit(set.dq, dtype, "dq"); !st.ok()) return st;
  if (Status st = check_finite_16bit(set.dk, dtype, "dk"); !st.ok()) return st;
  return check_finite_16bit(set.dv, dtype, "dv");
}

class EventList {
 public:
  explicit EventList(std::size_t count) : events_(count, nullptr) {}
  ~EventList() {
    for (cudaEvent_t e : events_)
      if (e != nullptr) cudaEventDestroy(e);
  }
  EventList(const EventList&) = delete;
  EventList& operator=(const EventList&) = delete;
  Status create() {
    for (cudaEvent_t& e : events_) HOPATTN_BENCH_CHECK_CUDA(cudaEventCreate(&e));
    return Status::Ok();
  }
  cudaEvent_t operator[](std::size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

Status elapsed_ms(cudaEvent_t start, cudaEvent_t stop, double* ms) {
  float value = 0.0f;
  HOPATTN_BENCH_CHECK_CUDA(cudaEventElapsedTime(&value, start, stop));
  *ms = value;
  return Status::Ok();
}

// Runs the warm-up and the timed calls of `call` (Status(int set): one hopattn call on input set `set`
// of n_sets, queued on options.stream), with check_warmed_up() (Status()) between them; fills
// m->median_ms and m->iters. The same path times the forward and the backward.
template <class Call, class Check>
Status warm_up_and_time(int n_sets, const Call& call, const Check& check_warmed_up, const TimingOptions& options,
                        Measurement* m) {
  const auto stream = static_cast<cudaStream_t>(options.stream);
  EventList bracket(2);
  if (Status st = bracket.create(); !st.ok()) return st;

  // First call alone: it pays one-time setup and tells how long a call takes.
  HOPATTN_BENCH_CHECK_CUDA(cudaEventRecord(bracket[0], stream));
  if (Status st = call(0); !st.ok()) return st;
  HOPATTN_BENCH_CHECK_CUDA(cudaEventRecord(bracket[1], stream));
  HOPATTN_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
  double estimate_ms = 0.0;
  if (Status st = elapsed_ms(bracket[0], bracket[1], &estimate_ms); !st.ok()) return st;

  const int more_warmup = std::min(options.warmup - 1, static_cast<int>(kWarmupBudgetMs / std::max(estimate_ms, 1e-3)));
  if (more_warmup > 0) {
    HOPATTN_BENCH_CHECK_CUDA(cudaEventRecord(bracket[0], stream));
    for (int i = 1; i <= more_warmup; ++i) {
      if (Status st = call(i % n_sets); !st.ok()) return st;
    }
    HOPATTN_BENCH_CHECK_CUDA(cudaEventRecord(bracket[1], stream));
    HOPATTN_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
    if (Status st = elapsed_ms(bracket[0], bracket[1], &estimate_ms); !st.ok()) return st;
    estimate_ms /= more_warmup;
  }
  if (Status st = check_warmed_up(); !st.ok()) return st;

  const int iters = std::min(options.iters, std::max(kMinTimedIters, static_cast<int>(kTimedBudgetMs / std::max(estimate_ms, 1e-3))));
  // Each group of calls is bracketed by its own pair of events: one call, or kBackToBackGroup.
  const int group = options.back_to_back ? kBackToBackGroup : 1;
  const int groups = (iters + group - 1) / group;
  EventList events(2 * static_cast<std::size_t>(groups));
  if (Status st = events.create(); !st.ok()) return st;
  LaunchGate gate;
  if (options.queue_ahead) {
    if (Status st = gate.close(stream); !st.ok()) return st;
  }
  for (int g = 0, i = 0; g < groups; ++g) {
    HOPATTN_BENCH_CHECK_CUDA(cudaEventRecord(events[2 * g], stream));
    for (int j = 0; j < group; ++j, ++i) {
      if (Status st = call((i + 1) % n_sets); !st.ok()) return st;
    }
    HOPATTN_BENCH_CHECK_CUDA(cudaEventRecord(events[2 * g + 1], stream));
  }
  if (options.queue_ahead && !gate.open()) {
    m->message = "--queue-ahead: the gate opened by itself before all calls were queued; times may include "
                 "host launch gaps";
  }
  HOPATTN_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> times(groups);
  for (int g = 0; g < groups; ++g) {
    if (Status st = elapsed_ms(events[2 * g], events[2 * g + 1], &times[g]); !st.ok()) return st;
    times[g] /= group;
  }
  std::sort(times.begin(), times.end());
  m->median_ms = times[times.size() / 2];
  m->iters = groups * group;
  return Status::Ok();
}

// One forward per set writes the out and LSE its backward reads; the first set's are checked as
// after a forward's warm-up. A failure says it came from this forward.
Status forward_before_backward(const Shape& s, const std::vector<FwdArgs>& args, const InputSet& first_set,
                               Dtype out_dtype, const TimingOptions& options) {
  Status status;
  for (std::size_t i = 0; i < args.size() && status.ok(); ++i) status = forward(args[i]);
  if (status.ok()) {
    status = cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(options.stream)), "cudaStreamSynchronize");
  }
  if (status.ok()) status = check_outputs(s, first_set, out_dtype);
  if (status.ok()) return status;
  return Status(status.code(), "the forward before the backward: " + status.message());
}

// The number of input sets whose bytes together pass kRotationBytes (1 to kMaxInputSets).
int input_sets_for(std::size_t set_bytes) {
  return static_cast<int>(std::clamp<std::size_t>((kRotationBytes + set_bytes - 1) / set_bytes, 1, kMaxInputSets));
}

// m with the outcome `status` says: ok, unsupported (this build or device lacks it) or an error.
void set_outcome(const Status& status, Measurement* m) {
  if (status.ok()) {
    m->outcome = Outcome::kOk;
    return;
  }
  const bool unsupported = status.code() == StatusCode::kUnsupported || status.code() == StatusCode::kNoDevice;
  m->outcome = unsupported ? Outcome::kUnsupported : Outcome::kError;
  m->message = status.message();
  m->median_ms = 0.0;
}

}  // namespace

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk: return "ok";
    case Outcome::kUnsupported: return "unsupported";
    case Outcome::kError: return "error";
    case Outcome::kNotRun: return "not_run";
  }
  return "error";
}

Measurement time_forward(const Shape& shape, const TimingOptions& options, std::uint64_t seed) {
  Measurement m;
  const Extents extents = extents_of(shape);
  m.input_sets = input_sets_for(set_bytes(extents, shape.dtype, options.write_lse, /*backward=*/false));

  Status status;
  std::vector<InputSet> sets(m.input_sets);
  std::vector<FwdArgs> args;
  for (int i = 0; i < m.input_sets && status.ok(); ++i) {
    status = make_input_set(shape, extents, options.write_lse, seed + 3 * i, &sets[i]);
    args.push_back(forward_args(shape, extents, sets[i], options));
  }
  if (status.ok()) {
    status = warm_up_and_time(
        m.input_sets, [&](int set) { return forward(args[set]); },
        [&] { return check_outputs(shape, sets[0], extents.out_dtype); }, options, &m);
  }
  set_outcome(status, &m);
  return m;
}

Measurement time_backward(const Shape& shape, const TimingOptions& options_in, std::uint64_t seed) {
  TimingOptions options = options_in;
  options.write_lse = true;  // the backward reads the forward's LSE
  Measurement m;
  const Extents extents = extents_of(shape);
  m.input_sets = input_sets_for(set_bytes(extents, shape.dtype, /*write_lse=*/true, /*backward=*/true));

  Status status;
  std::vector<InputSet> sets(m.input_sets);
  std::vector<FwdArgs> fwd_args;
  std::vector<BwdArgs> bwd_args;
  for (int i = 0; i < m.input_sets && status.ok(); ++i) {
    status = make_input_set(shape, extents, /*write_lse=*/true, seed + 4 * i, &sets[i]);
    fwd_args.push_back(forward_args(shape, extents, sets[i], options));
    bwd_args.push_back(backward_args(shape, fwd_args.back(), sets[i], options));
  }
  if (status.ok()) status = forward_before_backward(shape, fwd_args, sets[0], extents.out_dtype, options);
  if (status.ok()) {
    status = warm_up_and_time(
        m.input_sets, [&](int set) { return backward(bwd_args[set]); },
        [&] { return check_gradients(sets[0], shape.dtype); }, options, &m);
  }
  set_outcome(status, &m);
  return m;
}

Measurement time_shape(const Shape& shape, const TimingOptions& options, std::uint64_t seed) {
  return shape.backward ? time_backward(shape, options, seed) : time_forward(shape, options, seed);
}

}  // namespace hopattn::bench
