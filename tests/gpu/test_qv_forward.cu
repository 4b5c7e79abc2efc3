// flash-attention 3's qv (FwdArgs::qv: DeepSeek's multi-head latent attention, decoding with the
// projections absorbed) on the sm_90a forward: s_ij = softmax_scale * (q_i . k_j + qv_i . v_j), the
// default scale 1/sqrt(64 + 512). The kernel's scope: bf16 / fp16, q and k head dim 64, v, qv and out
// 512; dense q / qv / out, or q and qv (and k and v) column views of one array as FlashMLA keeps them;
// dense k / v or a paged cache; seqused_k; any GQA
// ratio; causal (bottom-right aligned) or not; LSE or not; softmax_scale given or default; num_splits
// 0, 1 or more.
//
// Each case draws fresh inputs on the host (N(0, 1); q and qv rows scaled by 1, 3 or 8 so that some
// rows' softmax is peaked and some flat), runs the same call on float32 copies through the CPU
// reference backend (float64 inside), and holds the GPU's out to the suite's rule for 16-bit outputs
// (output_bound: 2 max|naive - ref| + 1e-5 + half a rounding step, "naive" computed here on the host as
// the GPU reference computes it: P rounded to the input dtype before P V, the result rounded once) and
// its LSE to 1e-3 with matching -inf (rows that see no key: out 0, LSE -inf). out and lse are poisoned
// with NaN over their storage, which has poisoned guard rows before and after the (dense) views: every
// element of the views must be written and nothing outside them. k and v rows past seqused_k (and the
// pool rows that are no key) hold NaN: they must not reach out or lse. Every case runs with num_splits
// 0, 1 and 3, each with and without LSE.
//
// The refusals (kUnsupported, and a message that names the argument and qv; out left untouched) are in
// QvUnsupported below, with the other KernelOptions switches (each runs and matches the default call,
// or is refused naming qv and the switch). Replay a failure with HOPATTN_TEST_SEED=<the seed in its
// trace>.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common/host_tensor.hpp"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

constexpr int kD = 64;    // q and k
constexpr int kDv = 512;  // v, qv and out

constexpr std::int64_t kGuardRows = 128;  // poisoned (row, head) rows of out before and after the view
constexpr std::int64_t kLseGuard = 256;   // poisoned LSE entries before and after the view
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct QvCase {
  const char* name;
  Dtype dtype;
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  bool causal = false;
  std::vector<int> seqused_k = {};  // one per sequence (<= seqlen_k); empty: none
  float softmax_scale = 0.0f;       // 0: the default, 1/sqrt(64 + 512)
  int page_size = 0;                // > 0: k and v a paged cache (seqused_k required)
  bool flash_mla_layout = false;    // q, qv and k, v as column views of rows [qv | q], [v | k]

  std::int64_t q_rows() const { return std::int64_t(batch) * seqlen_q * heads_q; }
  std::int64_t lse_numel() const { return std::int64_t(batch) * heads_q * seqlen_q; }
  int len_k(int b) const { return seqused_k.empty() ? seqlen_k : seqused_k[b]; }
  float resolved_scale() const {
    return softmax_scale > 0.0f ? softmax_scale : 1.0f / std::sqrt(static_cast<float>(kD + kDv));
  }
  std::string describe() const {
    std::ostringstream s;
    s << name << " (" << dtype_name(dtype) << ", batch " << batch << ", heads " << heads_q << "/" << heads_kv
      << ", seqlen_q " << seqlen_q << ", seqlen_k " << seqlen_k << (causal ? ", causal" : "");
    if (!seqused_k.empty()) {
      s << ", seqused_k";
      for (int n : seqused_k) s << " " << n;
    }
    if (softmax_scale > 0.0f) s << ", softmax_scale " << softmax_scale;
    if (page_size > 0) s << ", page_size " << page_size;
    if (flash_mla_layout) s << ", FlashMLA layout";
    s << ")";
    return s.str();
  }
};

// The inputs of a case on the host, in its dtype: q, qv (batch, seqlen_q, heads_q, 64 / 512), and k, v
// logically dense (batch, seqlen_k, heads_kv, 64 / 512) with NaN in the rows past seqused_k. A paged
// case also has the pools (num_pages, page_size, heads_kv, d) and the table that the call reads.
struct HostInputs {
  HostTensor q, qv, k, v;
  HostTensor seqused_k;  // int32 (batch), when given
  HostTensor k_pool, v_pool, page_table;
};

// N(0, 1) in every element of rows of `row_len`; with `row_amplitudes`, row r scaled by 1, 3 or 8 (a
// hash of (seed, r)): q and qv drawn with the same seed share their rows' amplitudes.
void fill_normal_rows(HostTensor& t, int row_len, std::uint64_t seed, bool row_amplitudes) {
  static constexpr double kAmplitudes[] = {1.0, 3.0, 8.0};
  std::mt19937_64 rng(splitmix64(seed ^ 0x5eed));
  std::normal_distribution<double> normal;
  const std::int64_t rows = t.numel() / row_len;
  for (std::int64_t r = 0; r < rows; ++r) {
    const double a = row_amplitudes ? kAmplitudes[splitmix64(seed ^ std::uint64_t(r)) % 3] : 1.0;
    for (int c = 0; c < row_len; ++c) t.set(r * row_len + c, a * normal(rng));
  }
}

HostInputs draw_inputs(const QvCase& c, std::uint64_t seed) {
  HostInputs in;
  in.q = HostTensor(c.dtype, {c.batch, c.seqlen_q, c.heads_q, kD});
  in.qv = HostTensor(c.dtype, {c.batch, c.seqlen_q, c.heads_q, kDv});
  in.k = HostTensor(c.dtype, {c.batch, c.seqlen_k, c.heads_kv, kD});
  in.v = HostTensor(c.dtype, {c.batch, c.seqlen_k, c.heads_kv, kDv});
  const std::uint64_t row_seed = splitmix64(seed ^ 11);
  // q and qv from different streams but with the same row amplitudes.
  fill_normal_rows(in.q, kD, row_seed, true);
  {
    std::mt19937_64 rng(splitmix64(seed ^ 12));
    std::normal_distribution<double> normal;
    static constexpr double kAmplitudes[] = {1.0, 3.0, 8.0};
    for (std::int64_t r = 0; r < c.q_rows(); ++r) {
      const double a = kAmplitudes[splitmix64(row_seed ^ std::uint64_t(r)) % 3];
      for (int col = 0; col < kDv; ++col) in.qv.set(r * kDv + col, a * normal(rng));
    }
  }
  fill_normal_rows(in.k, kD, splitmix64(seed ^ 13), false);
  fill_normal_rows(in.v, kDv, splitmix64(seed ^ 14), false);

  if (!c.seqused_k.empty()) {
    in.seqused_k = HostTensor(Dtype::kInt32, {c.batch});
    for (int b = 0; b < c.batch; ++b) {
      in.seqused_k.set(b, c.seqused_k[b]);
      // The keys past the sequence's: NaN, as a cache from torch.empty may hold.
      for (int j = c.seqused_k[b]; j < c.seqlen_k; ++j)
        for (int h = 0; h < c.heads_kv; ++h) {
          const std::int64_t row = (std::int64_t(b) * c.seqlen_k + j) * c.heads_kv + h;
          for (int col = 0; col < kD; ++col) in.k.set(row * kD + col, kNaN);
          for (int col = 0; col < kDv; ++col) in.v.set(row * kDv + col, kNaN);
        }
    }
  }

  if (c.page_size > 0) {
    // Each sequence's pages distinct and shuffled over a pool with spare pages; every pool row that is
    // no key (spare pages, the tail of a sequence's pages) NaN.
    const int pages_per_seq = (c.seqlen_k + c.page_size - 1) / c.page_size;
    const int num_pages = c.batch * pages_per_seq + 3;
    std::vector<int> ids(num_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(splitmix64(seed ^ 15)));
    in.page_table = HostTensor(Dtype::kInt32, {c.batch, pages_per_seq});
    in.k_pool = HostTensor(c.dtype, {num_pages, c.page_size, c.heads_kv, kD});
    in.v_pool = HostTensor(c.dtype, {num_pages, c.page_size, c.heads_kv, kDv});
    in.k_pool.poison();
    in.v_pool.poison();
    for (int b = 0; b < c.batch; ++b)
      for (int p = 0; p < pages_per_seq; ++p) {
        const int page = ids[b * pages_per_seq + p];
        in.page_table.set(std::int64_t(b) * pages_per_seq + p, page);
        for (int r = 0; r < c.page_size; ++r) {
          const int j = p * c.page_size + r;
          if (j >= c.seqlen_k) break;
          for (int h = 0; h < c.heads_kv; ++h) {
            const std::int64_t src = (std::int64_t(b) * c.seqlen_k + j) * c.heads_kv + h;
            const std::int64_t dst = (std::int64_t(page) * c.page_size + r) * c.heads_kv + h;
            for (int col = 0; col < kD; ++col) in.k_pool.set(dst * kD + col, in.k.get(src * kD + col));
            for (int col = 0; col < kDv; ++col) in.v_pool.set(dst * kDv + col, in.v.get(src * kDv + col));
          }
        }
      }
  }
  return in;
}

// The call of `c` over the given tensors (host or CUDA alike); out and lse are set by the caller.
FwdArgs call_args(const QvCase& c, const Tensor& q, const Tensor& qv, const Tensor& k, const Tensor& v,
                  const std::optional<Tensor>& seqused_k, const std::optional<Tensor>& page_table) {
  FwdArgs a;
  a.q = q, a.qv = qv, a.k = k, a.v = v;
  a.causal = c.causal;
  if (c.softmax_scale > 0.0f) a.softmax_scale = c.softmax_scale;
  a.seqused_k = seqused_k;
  a.page_table = page_table;
  return a;
}

HostTensor widened(const HostTensor& h) {
  HostTensor w(Dtype::kFloat32, h.shape());
  for (std::int64_t i = 0; i < h.numel(); ++i) w.set(i, h.get(i));
  return w;
}

std::vector<float> to_floats(const HostTensor& h) {
  std::vector<float> values(static_cast<std::size_t>(h.numel()));
  for (std::int64_t i = 0; i < h.numel(); ++i) values[i] = static_cast<float>(h.get(i));
  return values;
}

struct Expected {
  std::vector<float> out, lse;  // dense (batch, seqlen_q, heads_q, 512) and (batch, heads_q, seqlen_q)
};

// The CPU reference backend on float32 copies of the inputs: the same call on host tensors.
Expected reference_forward(const QvCase& c, const HostInputs& in) {
  const HostTensor q = widened(in.q), qv = widened(in.qv);
  const HostTensor k = widened(c.page_size > 0 ? in.k_pool : in.k), v = widened(c.page_size > 0 ? in.v_pool : in.v);
  HostTensor out(Dtype::kFloat32, {c.batch, c.seqlen_q, c.heads_q, kDv});
  HostTensor lse(Dtype::kFloat32, {c.batch, c.heads_q, c.seqlen_q});
  out.poison();
  lse.poison();
  FwdArgs a = call_args(c, q.tensor(), qv.tensor(), k.tensor(), v.tensor(),
                        c.seqused_k.empty() ? std::nullopt : std::optional<Tensor>(in.seqused_k.tensor()),
                        c.page_size > 0 ? std::optional<Tensor>(in.page_table.tensor()) : std::nullopt);
  a.out = out.tensor();
  a.lse = lse.tensor();
  const Status s = hopattn::forward(a);
  if (!s.ok()) throw std::runtime_error("CPU reference backend: " + s.message());
  return {to_floats(out), to_floats(lse)};
}

// "Naive at the input precision", as the float32 GPU reference computes it (gpu_reference.cuh): exact
// scores, P = exp(s - rowmax) rounded to the input dtype before P V, the row sum of the unrounded P, the
// result rounded to the output dtype. float64 here; (batch, kv head) pairs spread over threads.
std::vector<float> naive_forward(const QvCase& c, const HostInputs& in) {
  const std::vector<double> q = in.q.to_double(), qv = in.qv.to_double(), k = in.k.to_double(), v = in.v.to_double();
  std::vector<float> out(static_cast<std::size_t>(c.q_rows()) * kDv);
  const double scale = c.resolved_scale();
  const int group = c.heads_q / c.heads_kv;
  std::atomic<int> next{0};
  const auto work = [&] {
    std::vector<double> s, acc(kDv);
    for (int task; (task = next++) < c.batch * c.heads_q;) {
      const int b = task / c.heads_q, h = task % c.heads_q, hk = h / group;
      const int len_k = c.len_k(b);
      s.assign(std::max(len_k, 1), 0.0);
      for (int i = 0; i < c.seqlen_q; ++i) {
        const std::int64_t row = (std::int64_t(b) * c.seqlen_q + i) * c.heads_q + h;
        const int end = c.causal ? std::min(len_k, std::max(0, i + len_k - c.seqlen_q + 1)) : len_k;
        float* o = out.data() + row * kDv;
        if (end <= 0) {
          std::fill(o, o + kDv, 0.0f);
          continue;
        }
        double max_s = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < end; ++j) {
          const std::int64_t kv = (std::int64_t(b) * c.seqlen_k + j) * c.heads_kv + hk;
          double dot = 0.0;
          for (int col = 0; col < kD; ++col) dot += q[row * kD + col] * k[kv * kD + col];
          for (int col = 0; col < kDv; ++col) dot += qv[row * kDv + col] * v[kv * kDv + col];
          s[j] = scale * dot;
          max_s = std::max(max_s, s[j]);
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < end; ++j) {
          const double p = std::exp(s[j] - max_s);
          sum += p;
          const double p_rounded = reference::round_to_dtype(p, c.dtype);
          const double* vj = v.data() + ((std::int64_t(b) * c.seqlen_k + j) * c.heads_kv + hk) * kDv;
          for (int col = 0; col < kDv; ++col) acc[col] += p_rounded * vj[col];
        }
        for (int col = 0; col < kDv; ++col)
          o[col] = static_cast<float>(reference::round_to_dtype(acc[col] / sum, c.dtype));
      }
    }
  };
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

DeviceBuffer upload_bytes(const void* data, std::size_t bytes) {
  DeviceBuffer buffer(bytes);
  HOPATTN_CUDA_CHECK(cudaMemcpy(buffer.data(), data, bytes, cudaMemcpyHostToDevice));
  return buffer;
}

// A host tensor's contiguous copy on the device, and its CUDA view.
struct DeviceCopy {
  DeviceBuffer buffer;
  Tensor tensor;
};

DeviceCopy upload_tensor(const HostTensor& h) {
  DeviceCopy d{upload_bytes(h.data(), h.numel() * dtype_size(h.dtype())), h.tensor()};
  d.tensor.data = d.buffer.data();
  d.tensor.device = DeviceType::kCuda;
  return d;
}

// FlashMLA's layout: `latent` and `rope` (one shape but the last extent) as one device array whose rows
// are [latent | rope], and views of its columns in their places.
struct JoinedRows {
  DeviceBuffer buffer;
  Tensor latent, rope;
};

JoinedRows upload_joined(const HostTensor& latent, const HostTensor& rope) {
  const std::size_t e = dtype_size(latent.dtype());
  const std::int64_t latent_width = latent.shape().back(), rope_width = rope.shape().back();
  const std::int64_t width = latent_width + rope_width, rows = latent.numel() / latent_width;
  std::vector<char> bytes(static_cast<std::size_t>(rows * width) * e);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(bytes.data() + r * width * e, static_cast<const char*>(latent.data()) + r * latent_width * e,
                latent_width * e);
    std::memcpy(bytes.data() + (r * width + latent_width) * e,
                static_cast<const char*>(rope.data()) + r * rope_width * e, rope_width * e);
  }
  JoinedRows j{upload_bytes(bytes.data(), bytes.size()), latent.tensor(), rope.tensor()};
  j.latent.data = j.buffer.data();
  j.rope.data = j.buffer.as<char>() + latent_width * e;
  for (Tensor* t : {&j.latent, &j.rope}) {
    t->device = DeviceType::kCuda;
    std::int64_t stride = width;
    for (int d = t->rank - 2; d >= 0; --d) {
      t->stride[d] = stride;
      stride *= t->shape[d];
    }
  }
  return j;
}

// The inputs on the device, and the reference's (ref, naive, lse) for the comparisons.
struct DeviceCase {
  DeviceCopy q, qv, k, v;
  std::optional<JoinedRows> joined_q, joined_kv;  // FlashMLA's layout: q, qv, k and v view these
  std::optional<DeviceCopy> seqused_k, page_table;
  DeviceBuffer ref, naive, lse_ref;
};

DeviceCase upload_inputs(const QvCase& c, const HostInputs& in) {
  const bool paged = c.page_size > 0;
  DeviceCase d;
  if (c.flash_mla_layout) {
    d.joined_q = upload_joined(in.qv, in.q);
    d.joined_kv = upload_joined(paged ? in.v_pool : in.v, paged ? in.k_pool : in.k);
    d.qv.tensor = d.joined_q->latent;
    d.q.tensor = d.joined_q->rope;
    d.v.tensor = d.joined_kv->latent;
    d.k.tensor = d.joined_kv->rope;
  } else {
    d.q = upload_tensor(in.q);
    d.qv = upload_tensor(in.qv);
    d.k = upload_tensor(paged ? in.k_pool : in.k);
    d.v = upload_tensor(paged ? in.v_pool : in.v);
  }
  if (!c.seqused_k.empty()) d.seqused_k = upload_tensor(in.seqused_k);
  if (paged) d.page_table = upload_tensor(in.page_table);
  return d;
}

DeviceCase upload_case(const QvCase& c, const HostInputs& in, const Expected& want, const std::vector<float>& naive) {
  DeviceCase d = upload_inputs(c, in);
  d.ref = upload(want.out);
  d.naive = upload(naive);
  d.lse_ref = upload(want.lse);
  return d;
}

FwdArgs device_args(const QvCase& c, const DeviceCase& d) {
  return call_args(c, d.q.tensor, d.qv.tensor, d.k.tensor, d.v.tensor,
                   d.seqused_k ? std::optional<Tensor>(d.seqused_k->tensor) : std::nullopt,
                   d.page_table ? std::optional<Tensor>(d.page_table->tensor) : std::nullopt);
}

// out (batch, seqlen_q, heads_q, 512) dense, with kGuardRows poisoned rows of 512 before and after it in
// one allocation; lse (batch, heads_q, seqlen_q) likewise with kLseGuard entries.
struct GuardedOutputs {
  DeviceBuffer out_storage, lse_storage;
  std::int64_t out_numel = 0, lse_numel = 0;
  Tensor out, lse;

  GuardedOutputs(const QvCase& c, Dtype dtype) {
    out_numel = c.q_rows() * kDv;
    lse_numel = c.lse_numel();
    const std::size_t e = dtype_size(dtype);
    out_storage = DeviceBuffer((out_numel + 2 * kGuardRows * kDv) * e);
    lse_storage = DeviceBuffer((lse_numel + 2 * kLseGuard) * sizeof(float));
    poison_nan(out_storage.data(), dtype, out_numel + 2 * kGuardRows * kDv);
    poison_nan(lse_storage.data(), Dtype::kFloat32, lse_numel + 2 * kLseGuard);
    out = make_tensor(out_storage.as<char>() + kGuardRows * kDv * e, dtype, {c.batch, c.seqlen_q, c.heads_q, kDv},
                      DeviceType::kCuda);
    lse = make_tensor(lse_storage.as<float>() + kLseGuard, Dtype::kFloat32, {c.batch, c.heads_q, c.seqlen_q},
                      DeviceType::kCuda);
  }

  // Elements changed (no longer the NaN poison) in [before the view, the view, after the view].
  std::vector<std::int64_t> out_changed(Dtype dtype) const {
    const std::size_t e = dtype_size(dtype);
    const char* base = out_storage.as<char>();
    const std::int64_t guard = kGuardRows * kDv;
    return {count_unpoisoned(base, dtype, guard), count_unpoisoned(base + guard * e, dtype, out_numel),
            count_unpoisoned(base + (guard + out_numel) * e, dtype, guard)};
  }
  std::vector<std::int64_t> lse_changed() const {
    const float* base = lse_storage.as<float>();
    return {count_unpoisoned(base, Dtype::kFloat32, kLseGuard),
            count_unpoisoned(base + kLseGuard, Dtype::kFloat32, lse_numel),
            count_unpoisoned(base + kLseGuard + lse_numel, Dtype::kFloat32, kLseGuard)};
  }
};

// One GPU call of c (num_splits, with or without LSE) against the reference; what is wrong, or "".
std::string run_and_judge(const QvCase& c, const DeviceCase& d, int num_splits, bool with_lse) {
  GuardedOutputs o(c, c.dtype);
  FwdArgs a = device_args(c, d);
  a.out = o.out;
  if (with_lse) a.lse = o.lse;
  a.num_splits = num_splits;
  const Status s = hopattn::forward(a);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  if (!s.ok()) return "forward returned code " + std::to_string(int(s.code())) + ": " + s.message();

  std::ostringstream problems;
  const OutputDiff diff = output_diff(o.out, d.ref.as<float>(), d.naive.as<float>());
  const float bound = output_bound(diff, c.dtype, d.ref.as<float>());
  if (diff.nan_count) problems << diff.nan_count << " NaN in out; ";
  if (!(diff.max_err <= bound)) {
    const std::int64_t w = diff.worst;
    problems << "max|out - ref| " << diff.max_err << " > 2 max|naive - ref| + 1e-5 + half a rounding step = " << bound
             << " at (b " << w / kDv / c.heads_q / c.seqlen_q << ", i " << w / kDv / c.heads_q % c.seqlen_q << ", h "
             << w / kDv % c.heads_q << ", col " << w % kDv << "): out "
             << element_as_float(static_cast<const char*>(o.out.data) + w * dtype_size(c.dtype), c.dtype) << ", ref "
             << element_as_float(d.ref.as<float>() + w, Dtype::kFloat32) << "; ";
  }
  const std::vector<std::int64_t> written = o.out_changed(c.dtype);
  if (written[1] != o.out_numel)
    problems << "out: " << o.out_numel - written[1] << " of its " << o.out_numel << " elements left unwritten; ";
  if (written[0] || written[2])
    problems << "out: " << written[0] << " elements written before the view and " << written[2] << " after it; ";
  const std::vector<std::int64_t> lse_written = o.lse_changed();
  if (with_lse) {
    const LseDiff ld = lse_diff(o.lse, d.lse_ref.as<float>());
    if (ld.nan_count) problems << ld.nan_count << " NaN in lse; ";
    if (ld.inf_mismatch) problems << ld.inf_mismatch << " lse rows disagree with the reference on -inf; ";
    if (!(ld.max_err <= 1e-3f)) problems << "max|lse - ref| " << ld.max_err << " > 1e-3; ";
    if (lse_written[1] != o.lse_numel)
      problems << "lse: " << o.lse_numel - lse_written[1] << " of its " << o.lse_numel << " entries left unwritten; ";
  } else if (lse_written[1]) {
    problems << "lse: not given, yet " << lse_written[1] << " entries of its buffer changed; ";
  }
  if (lse_written[0] || lse_written[2])
    problems << "lse: " << lse_written[0] << " entries written before the view and " << lse_written[2] << " after it; ";
  return problems.str();
}

// Draws c's inputs, computes the references once and runs c with num_splits 0, 1 and 3, each with and
// without LSE.
void check_case(const QvCase& c, std::uint64_t seed) {
  SCOPED_TRACE(c.describe() + ", HOPATTN_TEST_SEED=" + std::to_string(seed));
  const HostInputs in = draw_inputs(c, seed);
  auto reference = std::async(std::launch::async, [&] { return reference_forward(c, in); });
  const std::vector<float> naive = naive_forward(c, in);
  const Expected want = reference.get();
  // Sanity of the case itself: the reference and the naive agree to the naive's rounding, and some row
  // is not flat (the largest probability of some row well above uniform) is implied by the amplitudes.
  for (std::size_t i = 0; i < want.out.size(); ++i) {
    ASSERT_FALSE(std::isnan(want.out[i])) << "the CPU reference wrote NaN at " << i;
    ASSERT_LE(std::fabs(want.out[i] - naive[i]), 0.05f + 0.05f * std::fabs(want.out[i]))
        << "the host naive and the CPU reference disagree at " << i << ": test bug";
  }
  const DeviceCase d = upload_case(c, in, want, naive);
  for (int num_splits : {0, 1, 3})
    for (bool with_lse : {true, false}) {
      const std::string problems = run_and_judge(c, d, num_splits, with_lse);
      EXPECT_TRUE(problems.empty()) << "num_splits " << num_splits << (with_lse ? ", with lse: " : ", no lse: ")
                                    << problems;
    }
}

constexpr Dtype kBf16 = Dtype::kBFloat16, kFp16 = Dtype::kFloat16;

class QvForward : public HopperTest {
 protected:
  void run_cases(const std::vector<QvCase>& cases) {
    const std::uint64_t seed = run_seed();
    for (std::size_t i = 0; i < cases.size(); ++i) check_case(cases[i], splitmix64(seed + i));
  }
};

// Decoding steps of DeepSeek's shapes: 128 (one GPU's share of 128) or 16 query heads on one latent
// K/V head, one query row; multi-token prediction: two query rows, causal.
TEST_F(QvForward, DecodeSteps) {
  std::vector<QvCase> cases;
  for (Dtype dtype : {kBf16, kFp16}) {
    cases.push_back({"decode 128/1", dtype, 2, 128, 1, 1, 700});
    cases.push_back({"decode 16/1, long cache", dtype, 2, 16, 1, 1, 4099});
    cases.push_back({"MTP 64/1, 2 rows causal", dtype, 2, 64, 1, 2, 1000, true});
  }
  // 128 heads a K/V head over two query rows: four tiles, each of one query row's 64 heads.
  cases.push_back({"MTP 128/1, 2 rows causal", kBf16, 1, 128, 1, 2, 777, true});
  cases.push_back({"decode 16/1, explicit softmax_scale", kBf16, 1, 16, 1, 1, 1000, false, {}, 0.07f});
  run_cases(cases);
}

// Key counts at and either side of the kernels' block edges, odd GQA ratios and batch 3.
TEST_F(QvForward, OddSizes) {
  run_cases({
      {"one key", kFp16, 1, 3, 1, 5, 1},
      {"63 keys, 6/2 heads", kBf16, 3, 6, 2, 7, 63},
      {"65 keys causal", kFp16, 3, 3, 1, 65, 65, true},
      {"1000 keys, 6/2 heads", kBf16, 1, 6, 2, 33, 1000},
      {"4099 keys, 3/1 heads", kFp16, 1, 3, 1, 3, 4099},
      {"MHA 4/4", kBf16, 2, 4, 4, 9, 130, true},
      // The narrow tiles' edges (16 and 32 packed rows) and key blocks split unevenly between their two
      // warpgroups (3 and 5 blocks).
      {"17/1 heads, 191 keys", kBf16, 2, 17, 1, 1, 191},
      {"16/1 heads x 2 rows causal, 257 keys", kFp16, 1, 16, 1, 2, 257, true},
      {"11/1 heads x 3 rows causal (33 rows)", kBf16, 1, 11, 1, 3, 320, true},
  });
}

// seqused_k shorter than seqlen_k: the rows past each sequence's keys are NaN in k and v and must not
// leak into out or lse. A sequence with no keys gets out 0 and LSE -inf; causal aligns to seqused_k.
TEST_F(QvForward, SequsedKHidesTheRowsPastIt) {
  run_cases({
      {"decode 16/1", kBf16, 4, 16, 1, 1, 1000, false, {1000, 517, 1, 0}},
      {"MTP 8/1, 3 rows causal", kFp16, 3, 8, 1, 3, 300, true, {300, 2, 129}},
      {"128/1", kFp16, 2, 128, 1, 1, 300, false, {64, 257}},
      {"6/2, 40 rows causal", kBf16, 2, 6, 2, 40, 200, true, {200, 65}},
  });
}

// Causal with seqlen_q > seqlen_k (bottom-right aligned): the first seqlen_q - seqlen_k rows see no key,
// out 0 and LSE -inf, as the reference gives.
TEST_F(QvForward, CausalRowsWithoutKeys) {
  run_cases({
      {"100 rows on 63 keys", kFp16, 2, 3, 1, 100, 63, true},
      {"5 rows on 1 key", kBf16, 1, 16, 1, 5, 1, true},
      {"200 rows on 130 keys, 4/2", kBf16, 1, 4, 2, 200, 130, true},
  });
}

// A prefill-like call: 300 query rows, causal, 4 query heads on one K/V head.
TEST_F(QvForward, PrefillCausal) {
  run_cases({
      {"prefill 300 causal 4/1", kBf16, 1, 4, 1, 300, 300, true},
      {"chunk of 300 onto 700 keys, causal 4/1", kFp16, 1, 4, 1, 300, 700, true},
  });
}

// A paged KV cache (page sizes powers of two >= 16), seqused_k, NaN in every pool row that is no key.
TEST_F(QvForward, PagedCache) {
  run_cases({
      {"decode 128/1, pages of 64", kBf16, 3, 128, 1, 1, 1500, false, {700, 1, 1500}, 0.0f, 64},
      {"MTP 16/1 causal, pages of 16", kFp16, 2, 16, 1, 2, 100, true, {100, 33}, 0.0f, 16},
      {"6/2, 4 rows causal, pages of 256", kBf16, 2, 6, 2, 4, 513, true, {513, 256}, 0.0f, 256},
  });
}

// FlashMLA's layout (python/hopattn/flash_mla.py): q and qv as column views of one array of rows
// [qv | q], 576 wide, and k and v of one cache of rows [v | k]: K's TMA boxes start 1024 bytes into rows
// of 1152, and so do the Q tile's copies of q.
TEST_F(QvForward, FlashMlaLayoutViews) {
  QvCase decode{"decode 128/1, pages of 64", kBf16, 2, 128, 1, 1, 700, false, {700, 333}, 0.0f, 64};
  QvCase mtp{"MTP 16/1 causal, dense", kFp16, 2, 16, 1, 2, 300, true, {300, 65}};
  decode.flash_mla_layout = mtp.flash_mla_layout = true;
  run_cases({decode, mtp});
}

// ---- Refusals ---------------------------------------------------------------------------------------

// A small valid qv call on the device (bf16, batch 1, heads 4/1, seqlen_q 3, seqlen_k 65) and buffers for
// the arguments the refusals add.
struct SmallQvCall {
  static constexpr int kHeadsQ = 4, kHeadsKv = 1, kSeqQ = 3, kSeqK = 65;
  DeviceBuffer q, qv, k, v, out, lse, ints, sink;
  FwdArgs args;

  explicit SmallQvCall(int d = kD, int dv = kDv, Dtype dtype = kBf16) {
    const Dtype out_dtype = dtype == Dtype::kFloat8E4M3 ? kBf16 : dtype;
    const std::size_t e = dtype_size(dtype);
    q = DeviceBuffer(std::size_t(kSeqQ) * kHeadsQ * d * e);
    qv = DeviceBuffer(std::size_t(kSeqQ) * kHeadsQ * dv * e);
    k = DeviceBuffer(std::size_t(kSeqK) * kHeadsKv * d * e);
    v = DeviceBuffer(std::size_t(kSeqK) * kHeadsKv * dv * e);
    out = DeviceBuffer(std::size_t(kSeqQ) * kHeadsQ * dv * dtype_size(out_dtype));
    lse = DeviceBuffer(std::size_t(kSeqQ) * kHeadsQ * sizeof(float));
    ints = DeviceBuffer(16 * sizeof(std::int32_t));
    sink = DeviceBuffer(kHeadsQ * sizeof(float));
    if (dtype == Dtype::kFloat8E4M3) {
      for (DeviceBuffer* b : {&q, &qv, &k, &v}) HOPATTN_CUDA_CHECK(cudaMemset(b->data(), 0x38, b->bytes()));  // 1.0
    } else {
      fill_normal(q.data(), dtype, q.bytes() / e, 1);
      fill_normal(qv.data(), dtype, qv.bytes() / e, 2);
      fill_normal(k.data(), dtype, k.bytes() / e, 3);
      fill_normal(v.data(), dtype, v.bytes() / e, 4);
    }
    HOPATTN_CUDA_CHECK(cudaMemset(sink.data(), 0, sink.bytes()));
    poison_nan(out.data(), out_dtype, out.bytes() / dtype_size(out_dtype));
    args.q = make_tensor(q.data(), dtype, {1, kSeqQ, kHeadsQ, d}, DeviceType::kCuda);
    args.qv = make_tensor(qv.data(), dtype, {1, kSeqQ, kHeadsQ, dv}, DeviceType::kCuda);
    args.k = make_tensor(k.data(), dtype, {1, kSeqK, kHeadsKv, d}, DeviceType::kCuda);
    args.v = make_tensor(v.data(), dtype, {1, kSeqK, kHeadsKv, dv}, DeviceType::kCuda);
    args.out = make_tensor(out.data(), out_dtype, {1, kSeqQ, kHeadsQ, dv}, DeviceType::kCuda);
  }
  // {0, n} in the int32 buffer, for cu_seqlens.
  Tensor cu_seqlens(int n) {
    const std::int32_t values[2] = {0, n};
    HOPATTN_CUDA_CHECK(cudaMemcpy(ints.data(), values, sizeof values, cudaMemcpyHostToDevice));
    return make_tensor(ints.data(), Dtype::kInt32, {2}, DeviceType::kCuda);
  }
  Tensor seqused(int n) {
    HOPATTN_CUDA_CHECK(cudaMemcpy(ints.data(), &n, sizeof n, cudaMemcpyHostToDevice));
    return make_tensor(ints.data(), Dtype::kInt32, {1}, DeviceType::kCuda);
  }
  std::int64_t out_changed() const {
    const Dtype dtype = args.out.dtype;
    return count_unpoisoned(out.data(), dtype, args.out.numel());
  }
};

// kUnsupported, a message holding every one of `named`, and out untouched; "" when all holds.
std::string refusal_problem(SmallQvCall& call, std::initializer_list<std::string> named) {
  const Status s = hopattn::forward(call.args);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::ostringstream problems;
  if (s.code() != StatusCode::kUnsupported)
    problems << "code " << int(s.code()) << " instead of kUnsupported (" << int(StatusCode::kUnsupported) << "); ";
  for (const std::string& n : named)
    if (s.message().find(n) == std::string::npos) problems << "message lacks '" << n << "'; ";
  if (const std::int64_t changed = call.out_changed()) problems << changed << " elements of out written; ";
  if (!problems.str().empty()) problems << "message: " << s.message();
  return problems.str();
}

class QvUnsupported : public HopperTest {};

// The base call runs; a causal mask spelled as the window (-1, 0) is causal and runs too.
TEST_F(QvUnsupported, TheBaseCallRuns) {
  SmallQvCall call;
  Status s = hopattn::forward(call.args);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(call.out_changed(), call.args.out.numel());
  SmallQvCall causal;
  causal.args.window_left = -1, causal.args.window_right = 0;
  causal.args.lse = make_tensor(causal.lse.data(), Dtype::kFloat32, {1, SmallQvCall::kHeadsQ, SmallQvCall::kSeqQ},
                                DeviceType::kCuda);
  s = hopattn::forward(causal.args);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(s.ok()) << "window (-1, 0): " << s.message();
}

TEST_F(QvUnsupported, EachRefusedArgumentIsNamed) {
  {
    SmallQvCall call;  // q, qv and out varlen: (total_q, heads, d)
    const int total_q = SmallQvCall::kSeqQ;
    call.args.q = make_tensor(call.q.data(), kBf16, {total_q, SmallQvCall::kHeadsQ, kD}, DeviceType::kCuda);
    call.args.qv = make_tensor(call.qv.data(), kBf16, {total_q, SmallQvCall::kHeadsQ, kDv}, DeviceType::kCuda);
    call.args.out = make_tensor(call.out.data(), kBf16, {total_q, SmallQvCall::kHeadsQ, kDv}, DeviceType::kCuda);
    call.args.cu_seqlens_q = call.cu_seqlens(total_q);
    call.args.max_seqlen_q = total_q;
    EXPECT_EQ(refusal_problem(call, {"qv", "cu_seqlens_q"}), "") << "cu_seqlens_q";
  }
  {
    SmallQvCall call;  // k and v varlen: (total_k, heads_kv, d)
    const int total_k = SmallQvCall::kSeqK;
    call.args.k = make_tensor(call.k.data(), kBf16, {total_k, SmallQvCall::kHeadsKv, kD}, DeviceType::kCuda);
    call.args.v = make_tensor(call.v.data(), kBf16, {total_k, SmallQvCall::kHeadsKv, kDv}, DeviceType::kCuda);
    call.args.cu_seqlens_k = call.cu_seqlens(total_k);
    call.args.max_seqlen_k = total_k;
    EXPECT_EQ(refusal_problem(call, {"qv", "cu_seqlens_k"}), "") << "cu_seqlens_k";
  }
  {
    SmallQvCall call;
    call.args.seqused_q = call.seqused(2);
    EXPECT_EQ(refusal_problem(call, {"qv", "seqused_q"}), "") << "seqused_q";
  }
  for (const auto& [left, right, causal] : {std::tuple{8, -1, false}, std::tuple{-1, 1, false},
                                            std::tuple{8, 0, false}, std::tuple{8, -1, true}}) {
    SmallQvCall call;
    call.args.window_left = left, call.args.window_right = right, call.args.causal = causal;
    EXPECT_EQ(refusal_problem(call, {"qv", "window"}), "")
        << "window_left " << left << ", window_right " << right << (causal ? ", causal" : "");
  }
  {
    SmallQvCall call;
    call.args.softcap = 30.0f;
    EXPECT_EQ(refusal_problem(call, {"qv", "softcap"}), "") << "softcap";
  }
  {
    SmallQvCall call;
    call.args.learnable_sink = make_tensor(call.sink.data(), Dtype::kFloat32, {SmallQvCall::kHeadsQ}, DeviceType::kCuda);
    EXPECT_EQ(refusal_problem(call, {"qv", "learnable_sink"}), "") << "learnable_sink";
  }
  {
    SmallQvCall call;
    call.args.attention_chunk = 16;
    EXPECT_EQ(refusal_problem(call, {"qv", "attention_chunk"}), "") << "attention_chunk";
  }
  {
    SmallQvCall call;
    call.args.options.warp_specialized = false;
    EXPECT_EQ(refusal_problem(call, {"qv", "warp_specialized"}), "") << "warp_specialized = false";
  }
  for (const int page_size : {1, 8, 24}) {
    // A paged cache of pages the MLA kernel's TMA boxes do not take: 64 keys in pages of page_size (k's
    // 65 rows hold them), the table 0, 1, ... in the int32 buffer.
    SmallQvCall call;
    const int pages = 64 / page_size;
    std::vector<std::int32_t> ids(pages);
    for (int i = 0; i < pages; ++i) ids[i] = i;
    DeviceBuffer table = upload(ids);
    const int heads_kv = SmallQvCall::kHeadsKv;
    call.args.k = make_tensor(call.k.data(), kBf16, {pages, page_size, heads_kv, kD}, DeviceType::kCuda);
    call.args.v = make_tensor(call.v.data(), kBf16, {pages, page_size, heads_kv, kDv}, DeviceType::kCuda);
    call.args.page_table = make_tensor(table.data(), Dtype::kInt32, {1, pages}, DeviceType::kCuda);
    EXPECT_EQ(refusal_problem(call, {"qv", "page_size " + std::to_string(page_size)}), "") << "page_size " << page_size;
  }
  {
    SmallQvCall call(kD, kD, Dtype::kFloat8E4M3);  // FP8 with qv: refused (d 64 / 64, so q/k/v alone pass)
    EXPECT_EQ(refusal_problem(call, {"qv", "float8_e4m3"}), "") << "float8_e4m3";
  }
  // Head dims other than q/k 64 with v (and qv, out) 512.
  for (const auto& [d, dv] : {std::pair{64, 256}, std::pair{64, 128}, std::pair{128, 128}, std::pair{128, 512},
                              std::pair{192, 512}, std::pair{64, 64}}) {
    for (Dtype dtype : {kBf16, kFp16}) {
      SmallQvCall call(d, dv, dtype);
      EXPECT_EQ(refusal_problem(call, {"qv", "64", "512"}), "")
          << "q/k head dim " << d << ", v head dim " << dv << ", " << dtype_name(dtype);
    }
  }
}

// The other KernelOptions switches: the MLA kernel may take each (then out must match the default call's
// to two rounding steps) or refuse it with kUnsupported naming qv and the switch.
TEST_F(QvUnsupported, OtherKernelOptionsRunOrAreNamed) {
  SmallQvCall base;
  ASSERT_TRUE(hopattn::forward(base.args).ok());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  const auto host_out = [](const SmallQvCall& call) {
    const std::vector<std::uint16_t> bits = call.out.to_host<std::uint16_t>();
    std::vector<float> values(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) values[i] = __bfloat162float(__nv_bfloat16_raw{bits[i]});
    return values;
  };
  const std::vector<float> want = host_out(base);
  struct Variant {
    const char* name;
    void (*set)(KernelOptions&);
  };
  const Variant variants[] = {
      {"pingpong", [](KernelOptions& o) { o.pingpong = false; }},
      {"intra_wg_overlap", [](KernelOptions& o) { o.intra_wg_overlap = false; }},
      {"persistent", [](KernelOptions& o) { o.persistent = false; }},
      {"pack_gqa", [](KernelOptions& o) { o.pack_gqa = KernelOptions::PackGqa::kOff; }},
      {"pack_gqa", [](KernelOptions& o) { o.pack_gqa = KernelOptions::PackGqa::kOn; }},
      {"kv_loads", [](KernelOptions& o) { o.kv_loads = KernelOptions::KvLoads::kCopyThreads; }},
      {"kv_loads", [](KernelOptions& o) { o.kv_loads = KernelOptions::KvLoads::kTma; }},
  };
  for (const Variant& variant : variants) {
    SmallQvCall call;
    variant.set(call.args.options);
    const Status s = hopattn::forward(call.args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kUnsupported) << variant.name << ": " << s.message();
      for (const char* named : {"qv", variant.name})
        EXPECT_NE(s.message().find(named), std::string::npos)
            << variant.name << ": message lacks '" << named << "': " << s.message();
      EXPECT_EQ(call.out_changed(), 0) << variant.name << ": a refused call wrote out";
      continue;
    }
    const std::vector<float> got = host_out(call);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), 2.0f * std::ldexp(1.0f, std::ilogb(std::fmax(std::fabs(want[i]), 1e-3f)) - 7))
          << variant.name << ": element " << i << " is " << got[i] << " where the default options give " << want[i];
    }
  }
}

}  // namespace
}  // namespace hopattn::test
