#include "gpu/backward_case.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace hopattn::test {
namespace {

constexpr int kHeadPad = 8;  // elements between heads with kPaddedHeads and in a packed dqkv (16 bytes)

const char* layout_name(BackwardLayout layout) {
  switch (layout) {
    case BackwardLayout::kContiguous: return "contiguous";
    case BackwardLayout::kHeadMajor: return "head-major";
    case BackwardLayout::kPaddedHeads: return "padded-heads";
    case BackwardLayout::kPacked: return "packed";
  }
  return "?";
}

// Strides of a (b, s, h, d) view stored in `layout`; a packed call's out and dout are contiguous.
void layout_strides(BackwardLayout layout, int s, int h, int d, std::int64_t (&stride)[4]) {
  const std::int64_t head = layout == BackwardLayout::kPaddedHeads ? d + kHeadPad : d;
  if (layout == BackwardLayout::kHeadMajor) {
    stride[0] = std::int64_t(h) * s * d, stride[1] = d, stride[2] = std::int64_t(s) * d, stride[3] = 1;
  } else {
    stride[0] = std::int64_t(s) * h * head, stride[1] = std::int64_t(h) * head, stride[2] = head, stride[3] = 1;
  }
}

char* offset_bytes(void* base, std::int64_t elements, Dtype dtype) {
  return static_cast<char*>(base) + elements * std::int64_t(dtype_size(dtype));
}

// `elements` for views, bracketed by as many poisoned guard elements again on each side (rounded up to
// 16 bytes, so the views stay aligned for TMA): a store up to a whole tensor off either end shows.
GuardedBuffer guarded(Dtype dtype, std::int64_t elements) {
  GuardedBuffer b;
  b.guard = (elements + 7) / 8 * 8;
  b.elements = elements + 2 * b.guard;
  b.storage = DeviceBuffer(b.elements * dtype_size(dtype));
  return b;
}

// Where the worst element of g sits, and its value beside the reference's.
std::string locate(const Tensor& g, const ReferenceGradient& ref, std::int64_t worst) {
  if (worst < 0) return "";
  std::int64_t index[4], rest = worst, offset = 0;
  for (int d = 3; d >= 0; --d) {
    index[d] = rest % g.shape[d];
    rest /= g.shape[d];
    offset += index[d] * g.stride[d];
  }
  std::ostringstream s;
  s << " at (b " << index[0] << ", row " << index[1] << ", head " << index[2] << ", col " << index[3]
    << "): got " << element_as_float(offset_bytes(g.data, offset, g.dtype), g.dtype) << ", exact "
    << element_as_float(ref.exact.as<float>() + worst, Dtype::kFloat32) << ", naive "
    << element_as_float(ref.naive.as<float>() + worst, Dtype::kFloat32);
  return s.str();
}

// Accumulators of gradient_stats_kernel. Non-negative floats order like their bit patterns, so
// integer atomicMax finds float maxima.
struct StatsAccum {
  unsigned long long worst;  // (max |g - exact| bits << 32) | dense index
  unsigned long long nans;   // NaN in g
  double sum_sq_err, sum_sq_naive_err;
  unsigned int max_naive_err, max_magnitude;
};

template <typename T>
__global__ void gradient_stats_kernel(const T* g, Index4 ix, const float* exact, const float* naive,
                                      const float* magnitude, std::int64_t n, StatsAccum* acc) {
  unsigned long long worst = 0, nans = 0;
  double sq_err = 0.0, sq_naive_err = 0.0;
  unsigned int max_naive_err = 0, max_magnitude = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float err = fabsf(to_float(g[dense_index_offset(ix, i)]) - exact[i]);
    const float naive_err = fabsf(naive[i] - exact[i]);
    max_naive_err = max(max_naive_err, __float_as_uint(naive_err));
    max_magnitude = max(max_magnitude, __float_as_uint(magnitude[i]));
    sq_naive_err += double(naive_err) * naive_err;
    if (isnan(err)) {
      ++nans;
      continue;
    }
    worst = max(worst, (static_cast<unsigned long long>(__float_as_uint(err)) << 32) | std::uint32_t(i));
    sq_err += double(err) * err;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    sq_err += __shfl_xor_sync(0xffffffffu, sq_err, offset);
    sq_naive_err += __shfl_xor_sync(0xffffffffu, sq_naive_err, offset);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&acc->sum_sq_err, sq_err);
    atomicAdd(&acc->sum_sq_naive_err, sq_naive_err);
  }
  atomicMax(&acc->worst, worst);
  if (nans) atomicAdd(&acc->nans, nans);
  atomicMax(&acc->max_naive_err, max_naive_err);
  atomicMax(&acc->max_magnitude, max_magnitude);
}

struct GradientStats {
  float max_err, max_naive_err, max_magnitude;
  double rms_err, rms_naive_err;
  std::int64_t worst, nans;
};

GradientStats gradient_stats(const Tensor& g, const ReferenceGradient& ref) {
  const std::int64_t n = g.numel();
  if (n >= (std::int64_t(1) << 32)) throw std::invalid_argument("gradient_stats: tensor too large");
  DeviceBuffer acc(sizeof(StatsAccum));
  HOPATTN_CUDA_CHECK(cudaMemset(acc.data(), 0, acc.bytes()));
  dispatch_float_dtype(g.dtype, [&](auto tag) {
    using T = decltype(tag);
    gradient_stats_kernel<T><<<grid_for(n), 256>>>(static_cast<const T*>(g.data), index_of(g), ref.exact.as<float>(),
                                                   ref.naive.as<float>(), ref.magnitude.as<float>(), n,
                                                   acc.as<StatsAccum>());
  });
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  StatsAccum a;
  HOPATTN_CUDA_CHECK(cudaMemcpy(&a, acc.data(), sizeof a, cudaMemcpyDeviceToHost));
  const auto as_float = [](std::uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  GradientStats s;
  s.max_err = as_float(static_cast<std::uint32_t>(a.worst >> 32));
  s.worst = a.worst ? static_cast<std::int64_t>(a.worst & 0xFFFFFFFFull) : -1;
  s.max_naive_err = as_float(a.max_naive_err);
  s.max_magnitude = as_float(a.max_magnitude);
  s.rms_err = std::sqrt(a.sum_sq_err / double(n));
  s.rms_naive_err = std::sqrt(a.sum_sq_naive_err / double(n));
  s.nans = static_cast<std::int64_t>(a.nans);
  return s;
}

template <typename T>
__global__ void gather_kernel(const T* view, Index4 ix, std::int64_t n, float* dense) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dense[i] = to_float(view[dense_index_offset(ix, i)]);
}

template <typename T>
__global__ void scatter_kernel(const float* dense, std::int64_t n, T* view, Index4 ix) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    view[dense_index_offset(ix, i)] = from_float<T>(dense[i]);
}

}  // namespace

std::string BackwardCase::describe() const {
  std::ostringstream s;
  s << AttentionProblem::describe() << " amplitude " << amplitude << " " << layout_name(layout)
    << (deterministic ? " deterministic" : "");
  return s.str();
}

ReferenceGradient::ReferenceGradient(std::int64_t numel)
    : exact(numel * sizeof(float)), naive(numel * sizeof(float)), magnitude(numel * sizeof(float)) {}

GradientBuffers ReferenceGradient::buffers() const {
  return {exact.as<float>(), naive.as<float>(), magnitude.as<float>()};
}

std::vector<float> read_view(const Tensor& view) {
  const std::int64_t n = view.numel();
  DeviceBuffer dense(n * sizeof(float));
  dispatch_float_dtype(view.dtype, [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<grid_for(n), 256>>>(static_cast<const T*>(view.data), index_of(view), n, dense.as<float>());
  });
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  return dense.to_host<float>();
}

void write_view(const std::vector<float>& values, const Tensor& view) {
  const std::int64_t n = view.numel();
  if (std::int64_t(values.size()) != n) throw std::invalid_argument("write_view: size mismatch");
  DeviceBuffer dense(n * sizeof(float));
  HOPATTN_CUDA_CHECK(cudaMemcpy(dense.data(), values.data(), dense.bytes(), cudaMemcpyHostToDevice));
  dispatch_float_dtype(view.dtype, [&](auto tag) {
    using T = decltype(tag);
    scatter_kernel<T><<<grid_for(n), 256>>>(dense.as<float>(), n, static_cast<T*>(view.data), index_of(view));
  });
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

BackwardCall::BackwardCall(const BackwardCase& c, std::uint64_t seed) : c_(c) {
  const int b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const Dtype dt = c.dtype;
  const std::int64_t q_shape[4] = {b, sq, hq, d}, kv_shape[4] = {b, sk, hkv, d};
  // A view over a fresh allocation (kept in inputs_) filled with amplitude * N(0, 1), padding included.
  const auto filled = [&](const std::int64_t (&shape)[4], const std::int64_t (&stride)[4], std::uint64_t stream,
                          float amplitude) {
    Tensor t = strided_tensor(nullptr, dt, shape, stride);
    const std::int64_t elements = storage_elements(t);
    inputs_.emplace_back(elements * dtype_size(dt));
    t.data = inputs_.back().data();
    fill_normal(t.data, dt, elements, splitmix64(seed ^ stream), amplitude);
    return t;
  };

  const bool packed = c.layout == BackwardLayout::kPacked;
  if (packed && sq != sk) throw std::invalid_argument("the packed layout needs seqlen_q == seqlen_k");
  const int packed_heads = hq + 2 * hkv;
  std::int64_t stride_q[4], stride_kv[4];
  layout_strides(c.layout, sq, hq, d, stride_q);
  layout_strides(c.layout, sk, hkv, d, stride_kv);
  if (packed) {
    const std::int64_t stride[4] = {std::int64_t(sk) * packed_heads * d, std::int64_t(packed_heads) * d, d, 1};
    const Tensor qkv = filled({b, sk, packed_heads, d}, stride, 1, c.amplitude);
    args.q = strided_tensor(qkv.data, dt, q_shape, stride);
    args.k = strided_tensor(offset_bytes(qkv.data, std::int64_t(hq) * d, dt), dt, kv_shape, stride);
    args.v = strided_tensor(offset_bytes(qkv.data, std::int64_t(hq + hkv) * d, dt), dt, kv_shape, stride);
  } else {
    args.q = filled(q_shape, stride_q, 1, c.amplitude);
    args.k = filled(kv_shape, stride_kv, 2, 1.0f);
    args.v = filled(kv_shape, stride_kv, 3, 1.0f);
  }
  std::int64_t stride_out[4];
  layout_strides(packed ? BackwardLayout::kContiguous : c.layout, sq, hq, d, stride_out);
  args.dout = filled(q_shape, stride_out, 4, 1.0f);
  args.out = filled(q_shape, stride_out, 5, 1.0f);  // overwritten by forward

  // The LSE (b, hq, sq); with kPaddedHeads its rows padded to a multiple of 16 bytes, plus 16.
  const std::int64_t lse_row = c.layout == BackwardLayout::kPaddedHeads ? (sq + 3) / 4 * 4 + 4 : sq;
  inputs_.emplace_back(std::int64_t(b) * hq * lse_row * sizeof(float));
  args.lse = make_tensor(inputs_.back().data(), Dtype::kFloat32, {b, hq, sq}, DeviceType::kCuda);
  args.lse.stride[0] = hq * lse_row, args.lse.stride[1] = lse_row;

  args.softmax_scale = c.softmax_scale;
  args.deterministic = c.deterministic;
  set_mask(args, c);

  FwdArgs fwd;
  fwd.q = args.q, fwd.k = args.k, fwd.v = args.v, fwd.out = args.out, fwd.lse = args.lse;
  fwd.softmax_scale = c.softmax_scale;
  set_mask(fwd, c);
  const Status status = forward(fwd);
  if (!status.ok()) throw std::runtime_error("forward (for out and lse) failed: " + status.message());

  // dq, dk, dv inside guards: one packed (b, s, hq + 2 hkv, d + 8) buffer, or each in the layout.
  if (packed) {
    const std::int64_t head = d + kHeadPad;
    const std::int64_t stride[4] = {std::int64_t(sk) * packed_heads * head, packed_heads * head, head, 1};
    gradients_.push_back(guarded(dt, std::int64_t(b) * sk * packed_heads * head));
    char* base = offset_bytes(gradients_[0].storage.data(), gradients_[0].guard, dt);
    args.dq = strided_tensor(base, dt, q_shape, stride);
    args.dk = strided_tensor(offset_bytes(base, hq * head, dt), dt, kv_shape, stride);
    args.dv = strided_tensor(offset_bytes(base, (hq + hkv) * head, dt), dt, kv_shape, stride);
  } else {
    args.dq = strided_tensor(nullptr, dt, q_shape, stride_q);
    args.dk = strided_tensor(nullptr, dt, kv_shape, stride_kv);
    args.dv = strided_tensor(nullptr, dt, kv_shape, stride_kv);
    for (Tensor* t : {&args.dq, &args.dk, &args.dv}) {
      gradients_.push_back(guarded(dt, storage_elements(*t)));
      t->data = offset_bytes(gradients_.back().storage.data(), gradients_.back().guard, dt);
    }
  }
  poison_gradients();
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

void BackwardCall::poison_gradients() const {
  for (const GuardedBuffer& g : gradients_) poison_nan(g.storage.data(), c_.dtype, g.elements);
}

std::int64_t BackwardCall::gradient_elements_written() const {
  std::int64_t written = 0;
  for (const GuardedBuffer& g : gradients_) written += count_unpoisoned(g.storage.data(), c_.dtype, g.elements);
  return written;
}

std::int64_t BackwardCall::gradient_elements() const { return args.dq.numel() + args.dk.numel() + args.dv.numel(); }

ReferenceGradients BackwardCall::reference() const {
  ReferenceGradients r{ReferenceGradient(args.dq.numel()), ReferenceGradient(args.dk.numel()),
                       ReferenceGradient(args.dv.numel())};
  GpuReferenceBackwardArgs a;
  a.q = args.q, a.k = args.k, a.v = args.v, a.dout = args.dout;
  a.softmax_scale = c_.resolved_scale();
  set_mask(a, c_);
  a.dq = r.dq.buffers(), a.dk = r.dk.buffers(), a.dv = r.dv.buffers();
  if (const Status s = gpu_reference_backward(a); !s.ok()) throw std::runtime_error("reference: " + s.message());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  return r;
}

std::string check_gradient(const char* name, const Tensor& g, const ReferenceGradient& ref) {
  const GradientStats s = gradient_stats(g, ref);
  const float floor = std::ldexp(s.max_magnitude, -16);
  std::ostringstream problems;
  if (s.nans) problems << name << ": " << s.nans << " NaN; ";
  const float max_bound = 3.0f * s.max_naive_err + floor;
  if (!(s.max_err <= max_bound))
    problems << name << ": max|g - exact| " << s.max_err << " > 3 max|naive - exact| + 2^-16 max magnitude = "
             << max_bound << locate(g, ref, s.worst) << "; ";
  const double rms_bound = 2.0 * s.rms_naive_err + floor;
  if (!(s.rms_err <= rms_bound))
    problems << name << ": rms(g - exact) " << s.rms_err << " > 2 rms(naive - exact) + 2^-16 max magnitude = "
             << rms_bound << "; ";
  return problems.str();
}

GradientValues read_gradients(const BwdArgs& args) {
  return {read_view(args.dq), read_view(args.dk), read_view(args.dv)};
}

std::string bitwise_differences(const GradientValues& first, const GradientValues& other) {
  const char* names[] = {"dq", "dk", "dv"};
  std::ostringstream problems;
  for (int t = 0; t < 3; ++t) {
    if (first[t].size() != other[t].size()) {
      problems << names[t] << ": " << other[t].size() << " elements, first call " << first[t].size() << "; ";
      continue;
    }
    std::size_t differing = 0, first_index = 0;
    for (std::size_t i = 0; i < first[t].size(); ++i) {
      if (std::memcmp(&first[t][i], &other[t][i], sizeof(float)) != 0 && differing++ == 0) first_index = i;
    }
    if (differing > 0)
      problems << names[t] << ": " << differing << " elements differ bitwise, the first at " << first_index << " ("
               << first[t][first_index] << " vs " << other[t][first_index] << "); ";
  }
  return problems.str();
}

std::string run_backward_case(const BackwardCase& c, std::uint64_t seed) {
  try {
    BackwardCall call(c, seed);
    const Status status = backward(call.args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    if (!status.ok())
      return "backward returned code " + std::to_string(int(status.code())) + ": " + status.message();
    std::ostringstream problems;
    const std::int64_t written = call.gradient_elements_written(), expected = call.gradient_elements();
    if (written != expected)
      problems << "dq, dk, dv: " << written << " stored elements changed, expected the " << expected
               << " of the views (padding and guards must keep the poison); ";
    const ReferenceGradients ref = call.reference();
    problems << check_gradient("dq", call.args.dq, ref.dq) << check_gradient("dk", call.args.dk, ref.dk)
             << check_gradient("dv", call.args.dv, ref.dv);
    return problems.str();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

BackwardCase random_backward_case(std::mt19937_64& rng, double max_pairs) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const auto uniform = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  const auto seqlen = [&] {
    if (chance(0.5)) return kBackwardSeqlens[pick(0, static_cast<int>(std::size(kBackwardSeqlens)) - 1)];
    return std::clamp(static_cast<int>(std::lround(std::exp(uniform(0.0f, std::log(600.0f))))), 1, 600);
  };
  constexpr int kRatios[] = {1, 2, 4, 8};

  BackwardCase c;
  c.batch = pick(1, 3);
  c.heads_kv = pick(1, 3);
  c.heads_q = c.heads_kv * kRatios[pick(0, 3)];
  c.head_dim = draw_head_dim(rng, 256);  // the backward's widest kernel
  c.dtype = chance(0.5) ? Dtype::kBFloat16 : Dtype::kFloat16;
  c.seqlen_q = seqlen();
  c.seqlen_k = chance(0.25) ? c.seqlen_q : seqlen();
  c.causal = chance(0.4);
  c.amplitude = uniform(0.5f, 2.5f);
  if (chance(0.3)) {  // a window: left, right or both (right is 0 under causal)
    const int kind = pick(0, 2);
    if (kind != 1) c.window_left = pick(0, c.seqlen_k);
    if (kind != 0 && !c.causal) c.window_right = pick(0, 64);
  }
  if (chance(0.15)) c.attention_chunk = pick(1, c.seqlen_k + 64);  // chunked attention
  if (chance(0.25)) {  // softcap, with scores large enough that tanh bends them
    c.softcap = chance(0.5) ? 30.0f : uniform(5.0f, 50.0f);
    c.amplitude = uniform(3.0f, 8.0f);
  }
  if (chance(0.2)) c.softmax_scale = uniform(0.03f, 0.3f);
  const int layout = pick(0, 9);
  c.layout = layout < 6 ? BackwardLayout::kContiguous
             : layout < 8 ? BackwardLayout::kHeadMajor
                          : BackwardLayout::kPaddedHeads;

  // Shrink batch, then the GQA ratio, then heads_kv, then the longer sequence until it fits.
  while (c.pairs() > max_pairs) {
    if (!shrink_batch_or_heads(c)) {
      int& longer = c.seqlen_q >= c.seqlen_k ? c.seqlen_q : c.seqlen_k;
      longer = std::max(1, longer * 3 / 4);
    }
  }
  if (c.seqlen_q == c.seqlen_k && chance(0.4)) c.layout = BackwardLayout::kPacked;
  return c;
}

}  // namespace hopattn::test
