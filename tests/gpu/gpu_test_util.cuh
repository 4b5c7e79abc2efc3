// CUDA plumbing shared by the GPU tests: error checks, an owning device buffer, strided tensor views,
// fresh random fills, NaN poisoning and on-device comparison statistics. Header-only: every kernel here
// is a template, so each test file may include it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hopattn/hopattn.hpp"

namespace hopattn::test {

// Throws on a CUDA runtime error so that helpers can be used from any function; gtest reports the
// exception as a test failure with the message.
inline void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}
#define HOPATTN_CUDA_CHECK(expr) ::hopattn::test::cuda_check((expr), #expr)

// Queues `enqueue(stream)` (which returns a hopattn::Status) on a fresh stream under CUDA graph
// capture, then instantiates the graph and replays it `replays` times, as inference engines run a
// decoding step. Returns what failed, or an empty string.
template <class Enqueue>
std::string replay_as_graph(Enqueue&& enqueue, int replays) {
  // The fresh stream is non-blocking: it does not wait for the legacy stream, where the tests' fills
  // and NaN poison run. Without this the replays raced them (a capture behind 41M elements of fills
  // differed from the direct call about 1 run in 3: perf-notes, session 69).
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  HOPATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  HOPATTN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const hopattn::Status queued = enqueue(stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  std::string why;
  if (!queued.ok()) why = "queueing under capture failed: " + queued.message();
  else if (ended != cudaSuccess) why = std::string("ending the capture failed: ") + cudaGetErrorString(ended);
  cudaGraphExec_t exec = nullptr;
  if (why.empty()) {
    if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess)
      why = std::string("instantiating the graph failed: ") + cudaGetErrorString(e);
  }
  for (int i = 0; why.empty() && i < replays; ++i) {
    if (const cudaError_t e = cudaGraphLaunch(exec, stream); e != cudaSuccess)
      why = std::string("replaying the graph failed: ") + cudaGetErrorString(e);
  }
  const cudaError_t synced = cudaStreamSynchronize(stream);
  if (why.empty() && synced != cudaSuccess) why = std::string("the replays failed: ") + cudaGetErrorString(synced);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return why;
}

// Base fixture of every GPU test: skips, naming the reason, where no Hopper GPU can run the kernels.
class HopperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hopattn::hopper_available()) GTEST_SKIP() << "no Hopper GPU: " << hopattn::device_description();
  }
};

// One cudaMalloc'd allocation, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    HOPATTN_CUDA_CHECK(cudaMalloc(&data_, bytes ? bytes : 1));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    swap(other);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }

  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> host(bytes_ / sizeof(T));
    HOPATTN_CUDA_CHECK(cudaMemcpy(host.data(), data_, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A device copy of `values`.
template <typename T>
DeviceBuffer upload(const std::vector<T>& values) {
  DeviceBuffer buffer(values.size() * sizeof(T));
  HOPATTN_CUDA_CHECK(cudaMemcpy(buffer.data(), values.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

// A rank-4 view of `data` with the given shape and strides (in elements).
inline Tensor strided_tensor(void* data, Dtype dtype, const std::int64_t (&shape)[4],
                             const std::int64_t (&stride)[4], DeviceType device = DeviceType::kCuda) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.rank = 4;
  t.device = device;
  for (int i = 0; i < 4; ++i) {
    t.shape[i] = shape[i];
    t.stride[i] = stride[i];
  }
  return t;
}

// Elements an allocation needs to hold every element of the view (the highest offset + 1).
inline std::int64_t storage_elements(const Tensor& t) {
  std::int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) last += (t.shape[i] - 1) * t.stride[i];
  return last + 1;
}

// SMs of the current device: how many tiles make a round of the persistent launch.
inline int multiprocessor_count() {
  int device = 0, sms = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return sms;
}

// The run's random seed: HOPATTN_TEST_SEED when set (to replay a failure), else fresh from the OS.
inline std::uint64_t run_seed() {
  if (const char* env = std::getenv("HOPATTN_TEST_SEED")) return std::strtoull(env, nullptr, 0);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// Head dims of the 16-bit sm_90a kernels' tiles. Any other multiple of 8 runs in the next wider kernel
// (up to 256 forward, 128 backward), with the columns past d zero-filled by the TMA loads and left out of
// the stores: kPaddedHeadDims are such dims, either side of each tile width and at the smallest.
constexpr int kNativeHeadDims[] = {64, 128, 192, 256};
constexpr int kPaddedHeadDims[] = {8, 32, 40, 72, 80, 96, 112, 136, 160, 184, 200, 248};

// A head dim <= max_dim (>= 64) for a random case: a native one about 3 times in 4, else a padded one,
// so that the sweeps keep their weight on the tiles and still reach the zero-filled columns.
inline int draw_head_dim(std::mt19937_64& rng, int max_dim) {
  if (max_dim < kNativeHeadDims[0]) throw std::invalid_argument("draw_head_dim: max_dim below every native dim");
  const bool native = std::bernoulli_distribution(0.75)(rng);
  const auto draw_from = [&](const auto& dims) {
    int count = 0;  // the lists are ascending: the first `count` are <= max_dim
    while (count < static_cast<int>(std::size(dims)) && dims[count] <= max_dim) ++count;
    return dims[std::uniform_int_distribution<int>(0, count - 1)(rng)];
  };
  return native ? draw_from(kNativeHeadDims) : draw_from(kPaddedHeadDims);
}

__host__ __device__ inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) { return x; }
template <>
__device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Calls f(T{}) with T the device element type of a floating dtype (float32, float16, bfloat16).
template <typename F>
void dispatch_float_dtype(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::kFloat32: f(float{}); return;
    case Dtype::kFloat16: f(__half{}); return;
    case Dtype::kBFloat16: f(__nv_bfloat16{}); return;
    default: throw std::invalid_argument(std::string("unexpected dtype ") + dtype_name(dtype));
  }
}

// Element i = amplitude * N(0, 1), from a counter-based hash of (seed, i): fresh per seed, and the same
// data whatever the launch shape.
template <typename T>
__global__ void fill_normal_kernel(T* data, std::int64_t n, std::uint64_t seed, float amplitude) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t bits = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(i)));
    const float u1 = (static_cast<float>(bits >> 40) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    const float u2 = static_cast<float>((bits >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
    const float normal = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    data[i] = from_float<T>(amplitude * normal);
  }
}

inline dim3 grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + 255) / 256;
  return dim3(static_cast<unsigned>(blocks < 8192 ? (blocks > 0 ? blocks : 1) : 8192));
}

// Fills `n` elements of `dtype` at `data` with fresh normal values.
inline void fill_normal(void* data, Dtype dtype, std::int64_t n, std::uint64_t seed, float amplitude = 1.0f) {
  dispatch_float_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_normal_kernel<T><<<grid_for(n), 256>>>(static_cast<T*>(data), n, seed, amplitude);
  });
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

// Bit pattern of a quiet NaN in each dtype: what outputs are poisoned with before a call.
inline std::uint32_t nan_bits(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32: return 0x7FC00000u;
    case Dtype::kFloat16: return 0x7E00u;
    case Dtype::kBFloat16: return 0x7FC0u;
    default: throw std::invalid_argument(std::string("no NaN poison for dtype ") + dtype_name(dtype));
  }
}

template <typename U>
__global__ void fill_pattern_kernel(U* data, std::int64_t n, U pattern) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    data[i] = pattern;
}

template <typename U>
__global__ void count_not_pattern_kernel(const U* data, std::int64_t n, U pattern, unsigned long long* count) {
  unsigned long long local = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    local += data[i] != pattern;
  if (local) atomicAdd(count, local);
}

// Sets all `n` elements of a 16- or 32-bit dtype at `data` to NaN.
inline void poison_nan(void* data, Dtype dtype, std::int64_t n) {
  if (dtype_size(dtype) == 2) {
    fill_pattern_kernel<<<grid_for(n), 256>>>(static_cast<std::uint16_t*>(data), n,
                                              static_cast<std::uint16_t>(nan_bits(dtype)));
  } else {
    fill_pattern_kernel<<<grid_for(n), 256>>>(static_cast<std::uint32_t*>(data), n, nan_bits(dtype));
  }
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

// How many of the `n` elements at `data` no longer hold the NaN poison: after a call, exactly the
// elements of the output view must have changed (all written, nothing written outside the view).
inline std::int64_t count_unpoisoned(const void* data, Dtype dtype, std::int64_t n) {
  DeviceBuffer count(sizeof(unsigned long long));
  HOPATTN_CUDA_CHECK(cudaMemset(count.data(), 0, sizeof(unsigned long long)));
  if (dtype_size(dtype) == 2) {
    count_not_pattern_kernel<<<grid_for(n), 256>>>(static_cast<const std::uint16_t*>(data), n,
                                                   static_cast<std::uint16_t>(nan_bits(dtype)),
                                                   count.as<unsigned long long>());
  } else {
    count_not_pattern_kernel<<<grid_for(n), 256>>>(static_cast<const std::uint32_t*>(data), n, nan_bits(dtype),
                                                   count.as<unsigned long long>());
  }
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  return static_cast<std::int64_t>(count.to_host<unsigned long long>()[0]);
}

// One element at device address `device_ptr` as a float (float16, bfloat16, else float32): for the
// failure messages that show where the worst element sits.
inline float element_as_float(const void* device_ptr, Dtype dtype) {
  unsigned char bytes[4] = {};
  HOPATTN_CUDA_CHECK(cudaMemcpy(bytes, device_ptr, dtype_size(dtype), cudaMemcpyDeviceToHost));
  switch (dtype) {
    case Dtype::kFloat16: return __half2float(*reinterpret_cast<const __half*>(bytes));
    case Dtype::kBFloat16: return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(bytes));
    default: return *reinterpret_cast<const float*>(bytes);
  }
}

// Statistics of an output tensor against two dense float32 tensors of the same logical shape.
struct OutputDiff {
  float max_err = 0.0f;        // max |out - ref|
  std::int64_t worst = -1;     // dense (row-major) index of that element
  float max_naive_err = 0.0f;  // max |naive - ref|
  std::int64_t nan_count = 0;  // NaN in out (or in ref)
};

// Half the output dtype's rounding step at magnitude |x| (16-bit outputs: 7 or 10 stored fraction
// bits); 0 at x = 0, which rounds exactly.
inline float half_rounding_step(Dtype dtype, float x) {
  if (x == 0.0f) return 0.0f;
  const int fraction_bits = dtype == Dtype::kBFloat16 ? 7 : 10;
  int exponent = 0;
  std::frexp(std::fabs(x), &exponent);  // |x| in [2^(exponent - 1), 2^exponent)
  return std::ldexp(1.0f, exponent - 1 - fraction_bits - 1);
}

// The bound a 16-bit output is held to against the float32 reference: 2 max|naive - ref| + 1e-5 and
// half a rounding step at the worst element's |ref|. The kernel and `naive` each round their float32
// result to the output dtype once. Over few elements (a decoding step: heads x d of one row) naive's
// largest error can fall short of a rounding step, and a value within float32 error of a midpoint then
// rounds to the other neighbour (H200, session 22: 0.000361 against 0.000336 at |ref| 0.0714, whose
// bf16 step is 0.00049; the same seed on two builds).
inline float output_bound(const OutputDiff& diff, Dtype out_dtype, const float* ref) {
  const float worst_ref = diff.worst >= 0 ? element_as_float(ref + diff.worst, Dtype::kFloat32) : 0.0f;
  return 2.0f * diff.max_naive_err + 1e-5f + half_rounding_step(out_dtype, worst_ref);
}

struct Index4 {
  std::int64_t shape[4];
  std::int64_t stride[4];
};

inline Index4 index_of(const Tensor& t) {
  Index4 ix{};
  for (int i = 0; i < 4; ++i) {
    ix.shape[i] = i < t.rank ? t.shape[i] : 1;
    ix.stride[i] = i < t.rank ? t.stride[i] : 0;
  }
  return ix;
}

// Strided offset of the dense index i in a rank-4 view.
__device__ inline std::int64_t dense_index_offset(const Index4& ix, std::int64_t i) {
  std::int64_t offset = 0;
  for (int d = 3; d >= 0; --d) {
    offset += (i % ix.shape[d]) * ix.stride[d];
    i /= ix.shape[d];
  }
  return offset;
}

// stats[0]: (max |out-ref| float bits << 32) | dense index; stats[1]: max |naive-ref| bits; stats[2]: NaNs.
// Non-negative floats order like their bit patterns, so integer atomicMax finds the float maximum.
template <typename T>
__global__ void output_diff_kernel(const T* out, Index4 ix, const float* ref, const float* naive, std::int64_t n,
                                   unsigned long long* stats) {
  unsigned long long worst = 0, worst_naive = 0, nans = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float o = to_float(out[dense_index_offset(ix, i)]);
    const float err = fabsf(o - ref[i]);
    if (isnan(err)) {
      ++nans;
      continue;
    }
    const unsigned long long key = (static_cast<unsigned long long>(__float_as_uint(err)) << 32) | std::uint32_t(i);
    if (key > worst) worst = key;
    if (naive) {
      const unsigned long long naive_bits = __float_as_uint(fabsf(naive[i] - ref[i]));
      if (naive_bits > worst_naive) worst_naive = naive_bits;
    }
  }
  atomicMax(&stats[0], worst);
  atomicMax(&stats[1], worst_naive);
  if (nans) atomicAdd(&stats[2], nans);
}

// Compares the strided output `out` with dense float32 `ref` (and `naive`, when given). The dense
// index must fit 32 bits; the tests bound their sizes far below that.
inline OutputDiff output_diff(const Tensor& out, const float* ref, const float* naive) {
  const std::int64_t n = out.numel();
  if (n >= (std::int64_t(1) << 32)) throw std::invalid_argument("output_diff: tensor too large");
  DeviceBuffer stats(3 * sizeof(unsigned long long));
  HOPATTN_CUDA_CHECK(cudaMemset(stats.data(), 0, stats.bytes()));
  dispatch_float_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    output_diff_kernel<T><<<grid_for(n), 256>>>(static_cast<const T*>(out.data), index_of(out), ref, naive, n,
                                                stats.as<unsigned long long>());
  });
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  const std::vector<unsigned long long> host = stats.to_host<unsigned long long>();
  OutputDiff diff;
  const auto as_float = [](unsigned long long bits) {
    const std::uint32_t b = static_cast<std::uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  };
  diff.max_err = as_float(host[0] >> 32);
  diff.worst = host[0] ? static_cast<std::int64_t>(host[0] & 0xFFFFFFFFull) : -1;
  diff.max_naive_err = as_float(host[1]);
  diff.nan_count = static_cast<std::int64_t>(host[2]);
  return diff;
}

struct LseDiff {
  float max_err = 0.0f;             // max |lse - ref| over rows where ref is finite
  std::int64_t inf_mismatch = 0;    // rows where exactly one of lse, ref is -inf (or lse is +inf)
  std::int64_t nan_count = 0;
};

// stats[0]: max |lse-ref| bits; stats[1]: -inf mismatches; stats[2]: NaNs.
// A template only so that every test file may include its definition.
template <typename F>
__global__ void lse_diff_kernel(const F* lse, Index4 ix, const F* ref, std::int64_t n, unsigned long long* stats) {
  unsigned long long worst = 0, mismatch = 0, nans = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const F l = lse[dense_index_offset(ix, i)];
    const F r = ref[i];
    if (isnan(l) || isnan(r)) {
      ++nans;
    } else if (isinf(l) || isinf(r)) {
      mismatch += !(l == r && r < 0.0f);
    } else {
      const unsigned long long bits = __float_as_uint(fabsf(l - r));
      if (bits > worst) worst = bits;
    }
  }
  atomicMax(&stats[0], worst);
  if (mismatch) atomicAdd(&stats[1], mismatch);
  if (nans) atomicAdd(&stats[2], nans);
}

// Compares a strided float32 LSE view with a dense float32 reference.
inline LseDiff lse_diff(const Tensor& lse, const float* ref) {
  const std::int64_t n = lse.numel();
  DeviceBuffer stats(3 * sizeof(unsigned long long));
  HOPATTN_CUDA_CHECK(cudaMemset(stats.data(), 0, stats.bytes()));
  lse_diff_kernel<float><<<grid_for(n), 256>>>(static_cast<const float*>(lse.data), index_of(lse), ref, n,
                                               stats.as<unsigned long long>());
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  const std::vector<unsigned long long> host = stats.to_host<unsigned long long>();
  LseDiff diff;
  const std::uint32_t bits = static_cast<std::uint32_t>(host[0]);
  std::memcpy(&diff.max_err, &bits, sizeof bits);
  diff.inf_mismatch = static_cast<std::int64_t>(host[1]);
  diff.nan_count = static_cast<std::int64_t>(host[2]);
  return diff;
}

// Extents of a dense call: q and out (batch, seqlen_q, heads_q, head_dim), k and v (batch, seqlen_k,
// heads_kv, head_dim), lse (batch, heads_q, seqlen_q).
struct DenseExtents {
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
};

// FwdArgs over dense CUDA buffers: q, k, v of dtype `in`, out of dtype `out_dtype`, float32 lse.
inline FwdArgs dense_cuda_args(const DenseExtents& e, Dtype in, Dtype out_dtype, void* q, void* k, void* v,
                               void* out, void* lse) {
  FwdArgs args;
  args.q = make_tensor(q, in, {e.batch, e.seqlen_q, e.heads_q, e.head_dim}, DeviceType::kCuda);
  args.k = make_tensor(k, in, {e.batch, e.seqlen_k, e.heads_kv, e.head_dim}, DeviceType::kCuda);
  args.v = make_tensor(v, in, {e.batch, e.seqlen_k, e.heads_kv, e.head_dim}, DeviceType::kCuda);
  args.out = make_tensor(out, out_dtype, {e.batch, e.seqlen_q, e.heads_q, e.head_dim}, DeviceType::kCuda);
  args.lse = make_tensor(lse, Dtype::kFloat32, {e.batch, e.heads_q, e.seqlen_q}, DeviceType::kCuda);
  return args;
}

// A tensor's storage (every element its strides reach) in bytes, NaN-poisoned, and copied to the host.
inline std::size_t storage_bytes(const Tensor& t) { return std::size_t(storage_elements(t)) * dtype_size(t.dtype); }
inline void poison_storage(const Tensor& t) { poison_nan(t.data, t.dtype, storage_elements(t)); }
inline std::vector<std::uint8_t> storage_to_host(const Tensor& t) {
  std::vector<std::uint8_t> host(storage_bytes(t));
  HOPATTN_CUDA_CHECK(cudaMemcpy(host.data(), t.data, host.size(), cudaMemcpyDeviceToHost));
  return host;
}

// Empty where the storage of `graph` and `direct` (same layout) holds the same bits; else how many
// elements differ and how many of `graph`'s still hold the NaN poison (never written, or poisoned late).
inline std::string element_differences(const Tensor& graph, const Tensor& direct) {
  const std::vector<std::uint8_t> g = storage_to_host(graph), d = storage_to_host(direct);
  const std::size_t e = dtype_size(graph.dtype);
  const std::uint32_t poison = nan_bits(graph.dtype);
  std::int64_t differ = 0, poisoned = 0;
  for (std::size_t i = 0; i + e <= g.size(); i += e) {
    differ += std::memcmp(&g[i], &d[i], e) != 0;
    std::uint32_t bits = 0;  // little-endian: a 16-bit element fills the low half
    std::memcpy(&bits, &g[i], e);
    poisoned += bits == poison;
  }
  if (differ == 0) return "";
  return std::to_string(differ) + " of " + std::to_string(g.size() / e) + " elements differ, " +
         std::to_string(poisoned) + " of the graph's hold the NaN poison";
}

// Runs forward(args) twice into NaN-poisoned outputs: directly into args' (dense) out and lse, and
// captured into a CUDA graph, replayed twice, into fresh out and lse of the same layout; by default
// the direct call first (as engines warm up before capturing), with capture_first the capture first
// (the first call of a process on a device sets up per-device memory under capture). Returns what
// is wrong: the direct call must write every element, and the replays bit for bit the same (the
// kernels are deterministic, split merges included). An empty string when all holds.
inline std::string graph_replay_mismatch(FwdArgs args, bool capture_first = false) {
  if (storage_elements(args.out) != args.out.numel()) return "graph_replay_mismatch wants a dense out";
  DeviceBuffer graph_out(storage_bytes(args.out)), graph_lse(args.lse ? storage_bytes(*args.lse) : 0);
  FwdArgs captured = args;
  captured.out.data = graph_out.data();
  if (captured.lse) captured.lse->data = graph_lse.data();
  for (const FwdArgs* a : {&args, &captured}) {
    poison_storage(a->out);
    if (a->lse) poison_storage(*a->lse);
  }
  const auto call_directly = [&]() -> std::string {
    const hopattn::Status direct = forward(args);
    if (!direct.ok()) return "direct call failed: " + direct.message();
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    return "";
  };
  const auto call_from_graph = [&]() {
    return replay_as_graph(
        [&](cudaStream_t stream) {
          captured.stream = stream;
          return forward(captured);
        },
        2);
  };
  if (std::string why = capture_first ? call_from_graph() : call_directly(); !why.empty()) return why;
  if (std::string why = capture_first ? call_directly() : call_from_graph(); !why.empty()) return why;
  if (count_unpoisoned(args.out.data, args.out.dtype, args.out.numel()) != args.out.numel())
    return "the direct call left out elements unwritten";
  if (std::string diff = element_differences(captured.out, args.out); !diff.empty())
    return "out from the graph differs from the direct call's: " + diff;
  if (args.lse) {
    if (std::string diff = element_differences(*captured.lse, *args.lse); !diff.empty())
      return "lse from the graph differs from the direct call's: " + diff;
  }
  return "";
}

}  // namespace hopattn::test
