#include "gpu/backward_varlen_case.cuh"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "gpu/backward_case.cuh"
#include "gpu/gpu_reference_backward.cuh"

namespace hopattn::test {
namespace {

void check_case_shape(const VarlenBackwardCase& c) {
  check_sequence_lengths(c);
  if (prefix_sums(c.len_q).back() == 0 || prefix_sums(c.len_k).back() == 0)
    throw std::invalid_argument("test case: CUDA tensors need at least one row on each side");
  if ((c.trailing_k_rows != 0 && (!c.varlen_k || c.packed_qkv)) || (c.unused_row_value && c.packed_qkv) ||
      c.trailing_k_rows < 0)
    throw std::invalid_argument("test case: trailing k rows and unused row values need a varlen or dense k of its own");
}

// Stored elements of `view`'s rows that are not 0 (NaN included), read back through the view.
std::int64_t nonzero_elements(const Tensor& view) {
  const std::vector<float> values = read_view(view);
  return std::count_if(values.begin(), values.end(), [](float x) { return !(x == 0.0f); });
}

// "name: n of m not 0 (why); " when some element of view is not 0, else "".
std::string expect_zero(const char* name, const Tensor& view, const char* why) {
  const std::int64_t n = nonzero_elements(view);
  if (n == 0) return "";
  std::ostringstream s;
  s << name << ": " << n << " of " << view.numel() << " elements not 0 (" << why << "); ";
  return s.str();
}

// The buffers of one call of a case, and its judgement.
class VarlenBackwardCall {
 public:
  VarlenBackwardCall(const VarlenBackwardCase& c, std::uint64_t seed)
      : c_(c), starts_q_(prefix_sums(c.len_q)), starts_k_(prefix_sums(c.len_k)) {
    check_case_shape(c);
    const int hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
    const Dtype dt = c.dtype;
    const int total_q = starts_q_.back(), total_k = starts_k_.back(), k_rows_stored = total_k + c.trailing_k_rows;
    inputs_ = make_sequence_inputs(c, starts_k_, total_q, k_rows_stored, seed);
    q_ = inputs_.q, k_ = inputs_.k, v_ = inputs_.v;
    // A varlen k of k_rows_stored rows (and so dk, dv): the last sequence may end before the tensor does.
    std::vector<int> stored_k = starts_k_;
    stored_k.back() = k_rows_stored;
    dout_ = make_rows(dt, total_q, hq, d, c.padded_rows, 0);
    fill_normal(dout_.storage.data(), dt, dout_.elements, splitmix64(seed ^ 4));
    out_ = make_rows(dt, total_q, hq, d, c.padded_rows, 0);
    lse_.emplace(starts_q_, c.varlen_q, hq);
    if (c.varlen_q) cu_q_ = upload(starts_q_);
    if (c.varlen_k) cu_k_ = upload(starts_k_);
    if (c.seqused_k) seqused_ = upload(*c.seqused_k);
    if (c.seqused_q) seqused_q_ = upload(*c.seqused_q);

    // out and lse from the GPU forward, as training has them.
    FwdArgs fwd;
    fwd.q = q_.api_tensor(starts_q_, c.varlen_q);
    fwd.k = k_.api_tensor(stored_k, c.varlen_k);
    fwd.v = v_.api_tensor(stored_k, c.varlen_k);
    fwd.out = out_.view.api_tensor(starts_q_, c.varlen_q);
    fwd.lse = lse_->api_tensor;
    set_lengths(fwd);
    c.set_args(fwd);
    if (std::string why = forward_problem(fwd); !why.empty()) throw std::runtime_error(why);
    if (c.seqused_q) fill_rows_past_use_with_nan();

    dq_ = make_rows(dt, total_q, hq, d, c.padded_rows, kGuardRows);
    dk_ = make_rows(dt, k_rows_stored, hkv, d, c.padded_rows, kGuardRows);
    dv_ = make_rows(dt, k_rows_stored, hkv, d, c.padded_rows, kGuardRows);
    args.q = fwd.q, args.k = fwd.k, args.v = fwd.v, args.out = fwd.out, args.lse = *fwd.lse;
    args.dout = dout_.view.api_tensor(starts_q_, c.varlen_q);
    args.dq = dq_.view.api_tensor(starts_q_, c.varlen_q);
    args.dk = dk_.view.api_tensor(stored_k, c.varlen_k);
    args.dv = dv_.view.api_tensor(stored_k, c.varlen_k);
    set_lengths(args);
    args.softmax_scale = c.softmax_scale;
    args.causal = c.causal;
    args.window_left = c.window_left;
    args.window_right = c.window_right;
    args.attention_chunk = c.attention_chunk;
    args.softcap = c.softcap;
    args.deterministic = c.deterministic;
    poison_gradients();
  }

  BwdArgs args;

  // dout, out and lse past each sequence's seqused_q (q's: make_sequence_inputs): rows the backward
  // must not read. (The forward left out and lse there unwritten.)
  void fill_rows_past_use_with_nan() {
    const DeviceBuffer flags =
        upload(unused_rows(starts_q_, [&](int b) { return c_.used_q(b); }, starts_q_.back()));
    fill_flagged_rows(dout_, flags, NAN);
    fill_flagged_rows(out_, flags, NAN);
    for (int b = 0; b < c_.batch(); ++b)
      for (int h = 0; h < c_.heads_q; ++h) {
        float* first_past = lse_->base + lse_->sequence_offset[b] + h * lse_->head_stride + c_.used_q(b);
        HOPATTN_CUDA_CHECK(cudaMemset(first_past, 0xFF, (c_.len_q[b] - c_.used_q(b)) * sizeof(float)));  // NaN
      }
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  }

  void poison_gradients() const {
    for (const RowBuffer* g : {&dq_, &dk_, &dv_}) poison_nan(g->storage.data(), c_.dtype, g->elements);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Calls backward and waits for it; what is wrong with its status (empty when Ok).
  std::string call_backward() const {
    const Status status = backward(args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    if (status.ok()) return "";
    return "backward returned code " + std::to_string(int(status.code())) + ": " + status.message();
  }

  // Judges the gradients of a finished call (the checks of backward_varlen_case.cuh).
  std::string check() const {
    std::ostringstream problems;
    for (int b = 0; b < c_.batch(); ++b) {
      const std::string seq = check_sequence(b);
      if (!seq.empty())
        problems << "sequence " << b << " (len_q " << c_.len_q[b] << ", used " << c_.used_q(b) << ", len_k "
                 << c_.len_k[b] << ", used " << c_.used_k(b) << "): " << seq;
    }
    // Exactly the sequences' elements written: with no NaN left inside them (checked above), any other
    // element that lost its poison lies outside, in the guards, the padding or the trailing k rows.
    const struct {
      const char* name;
      const RowBuffer* buffer;
      std::int64_t sequence_elements;
    } gradients[] = {{"dq", &dq_, dq_.view.api_tensor(starts_q_, c_.varlen_q).numel()},
                     {"dk", &dk_, dk_.view.api_tensor(starts_k_, c_.varlen_k).numel()},
                     {"dv", &dv_, dv_.view.api_tensor(starts_k_, c_.varlen_k).numel()}};
    for (const auto& g : gradients) {
      const std::int64_t written = count_unpoisoned(g.buffer->storage.data(), c_.dtype, g.buffer->elements);
      if (written != g.sequence_elements)
        problems << g.name << ": " << written << " stored elements changed, expected the " << g.sequence_elements
                 << " of its sequences; ";
    }
    return problems.str();
  }

  const RowBuffer& dq() const { return dq_; }
  const RowBuffer& dk() const { return dk_; }
  const RowBuffer& dv() const { return dv_; }
  int first_k_row(int b) const { return starts_k_[b]; }

 private:
  template <class Args>
  void set_lengths(Args& a) const {
    const int batch = c_.batch();
    if (cu_q_) a.cu_seqlens_q = make_tensor(cu_q_->data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
    if (cu_k_) a.cu_seqlens_k = make_tensor(cu_k_->data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
    if (seqused_) a.seqused_k = make_tensor(seqused_->data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
    if (seqused_q_) a.seqused_q = make_tensor(seqused_q_->data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
    // The true maxima, also on a dense side (where validation reads the length from the shape).
    a.max_seqlen_q = *std::max_element(c_.len_q.begin(), c_.len_q.end());
    a.max_seqlen_k = *std::max_element(c_.len_k.begin(), c_.len_k.end());
  }

  std::string check_sequence(int b) const {
    // len_q: the queries in use (the reference's); the stored rows past them must get dq = 0.
    const int len_q = c_.used_q(b), len_k = c_.len_k[b], used = c_.used_k(b);
    const int q0 = starts_q_[b], k0 = starts_k_[b];
    std::string problems;
    if (len_q > 0 && used > 0) {
      const int hq = c_.heads_q, hkv = c_.heads_kv, d = c_.head_dim;
      ReferenceGradient dq(std::int64_t(len_q) * hq * d), dk(std::int64_t(used) * hkv * d),
          dv(std::int64_t(used) * hkv * d);
      GpuReferenceBackwardArgs a;
      a.q = q_.sequence(q0, len_q), a.dout = dout_.view.sequence(q0, len_q);
      a.k = k_.sequence(k0, used), a.v = v_.sequence(k0, used);
      a.softmax_scale = c_.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
      a.causal = c_.causal;
      a.window_left = c_.window_left;
      a.window_right = c_.window_right;
      a.attention_chunk = c_.attention_chunk;
      a.softcap = c_.softcap;
      a.dq = dq.buffers(), a.dk = dk.buffers(), a.dv = dv.buffers();
      if (const Status s = gpu_reference_backward(a); !s.ok()) throw std::runtime_error("reference: " + s.message());
      HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
      problems += check_gradient("dq", dq_.view.sequence(q0, len_q), dq);
      problems += check_gradient("dk", dk_.view.sequence(k0, used), dk);
      problems += check_gradient("dv", dv_.view.sequence(k0, used), dv);
    } else {
      if (len_q > 0) problems += expect_zero("dq", dq_.view.sequence(q0, len_q), "its queries see no key");
      for (const auto& [name, g] : {std::pair{"dk", &dk_}, std::pair{"dv", &dv_}})
        if (used > 0) problems += expect_zero(name, g->view.sequence(k0, used), "its keys see no query");
    }
    for (const auto& [name, g] : {std::pair{"dk", &dk_}, std::pair{"dv", &dv_}})
      if (len_k > used) problems += expect_zero(name, g->view.sequence(k0 + used, len_k - used), "keys past seqused_k");
    if (c_.len_q[b] > len_q)
      problems += expect_zero("dq", dq_.view.sequence(q0 + len_q, c_.len_q[b] - len_q), "rows past seqused_q");
    return problems;
  }

  VarlenBackwardCase c_;
  std::vector<int> starts_q_, starts_k_;
  SequenceInputs inputs_;
  RowBuffer dout_, out_;
  RowView q_, k_, v_;
  std::optional<LseBuffer> lse_;
  std::optional<DeviceBuffer> cu_q_, cu_k_, seqused_, seqused_q_;
  RowBuffer dq_, dk_, dv_;
};

}  // namespace

double VarlenBackwardCase::pairs() const {
  double pairs = 0;
  for (int b = 0; b < batch(); ++b) pairs += double(used_q(b)) * used_k(b);
  return pairs * heads_q;
}

VarlenBackwardCase VarlenBackwardCase::prefix(int n) const {
  VarlenBackwardCase c = *this;
  c.len_q.resize(n);
  c.len_k.resize(n);
  if (c.seqused_k) c.seqused_k->resize(n);
  if (c.seqused_q) c.seqused_q->resize(n);
  return c;
}

std::string VarlenBackwardCase::describe() const {
  std::ostringstream s;
  s << (varlen_q ? "varlen q " : "dense q ") << join(len_q) << (varlen_k ? " varlen k " : " dense k ") << join(len_k);
  if (seqused_k) s << " seqused_k " << join(*seqused_k);
  if (seqused_q) s << " seqused_q " << join(*seqused_q);
  describe_to(s);
  s << (packed_qkv ? " packed-qkv" : "") << (deterministic ? " deterministic" : "");
  if (trailing_k_rows) s << " trailing k rows " << trailing_k_rows;
  if (unused_row_value) s << " unused rows " << *unused_row_value;
  return s.str();
}

std::string run_varlen_backward_case(const VarlenBackwardCase& c, std::uint64_t seed) {
  try {
    const VarlenBackwardCall call(c, seed);
    if (std::string why = call.call_backward(); !why.empty()) return why;
    return call.check();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

std::string run_varlen_backward_repeatedly(const VarlenBackwardCase& c, std::uint64_t seed, int runs) {
  try {
    const VarlenBackwardCall call(c, seed);
    GradientValues first;
    for (int run = 0; run < runs; ++run) {
      call.poison_gradients();
      if (std::string why = call.call_backward(); !why.empty()) return why;
      if (run == 0) {
        first = read_gradients(call.args);
      } else if (std::string differs = bitwise_differences(first, read_gradients(call.args)); !differs.empty()) {
        return "call " + std::to_string(run + 1) + " against the first: " + differs;
      }
    }
    return call.check();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

std::vector<std::string> spoiled_gradient_reports(const VarlenBackwardCase& c, std::uint64_t seed) {
  const VarlenBackwardCall call(c, seed);
  std::vector<std::string> reports;
  const auto rerun = [&] {
    call.poison_gradients();
    if (std::string why = call.call_backward(); !why.empty()) throw std::runtime_error(why);
  };
  rerun();
  reports.push_back(call.check());  // unspoiled: must pass

  const RowView& dv = call.dv().view;  // sequence 1's first key row zeroed
  write_view(std::vector<float>(std::size_t(dv.heads) * dv.head_dim, 0.0f), dv.sequence(call.first_k_row(1), 1));
  reports.push_back(call.check());

  rerun();  // the first key past sequence 0's seqused_k gets a gradient
  const RowView& dk = call.dk().view;
  const Tensor unused_key = dk.sequence(call.first_k_row(0) + c.used_k(0), 1);
  std::vector<float> ones(std::size_t(dk.heads) * dk.head_dim, 1.0f);
  write_view(ones, unused_key);
  reports.push_back(call.check());

  rerun();  // one element written into dq's trailing guard
  const RowView& dq = call.dq().view;
  HOPATTN_CUDA_CHECK(cudaMemset(dq.row(prefix_sums(c.len_q).back()), 0, dtype_size(dq.dtype)));
  reports.push_back(call.check());
  return reports;
}

VarlenBackwardCase random_varlen_backward_case(std::mt19937_64& rng, double max_pairs) {
  constexpr int kEdgeLengths[] = {1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300};
  constexpr int kMaxLength = 700;
  VarlenBackwardCase c;
  draw_lengths(rng, c, kEdgeLengths, kMaxLength, 0.3);
  draw_settings(rng, c, *std::max_element(c.len_k.begin(), c.len_k.end()), 256);  // the backward's widest
  c.with_lse = true;
  if (c.softcap > 0.0f) c.amplitude = std::uniform_real_distribution<float>(3.0f, 8.0f)(rng);  // tanh bends

  // Fewer heads first, then every length (used keys too) by a quarter, until it fits.
  while (c.pairs() > max_pairs) {
    if (!shrink_heads(c)) shrink_lengths(c);
  }
  return c;
}

}  // namespace hopattn::test
