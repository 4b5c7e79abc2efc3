#include "gpu/gpu_reference.cuh"

#include <cmath>
#include <string>

#include "gpu/gpu_reference_common.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

using namespace gpu_reference_detail;

struct Params : Problem {
  View q, k, v;
  float* out;
  float* out_naive;
  float* lse;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) reference_forward_kernel(Params p) {
  extern __shared__ float smem[];
  float* q_row = smem;                  // head_dim
  float* scores = smem + p.head_dim;    // seqlen_k: s_j, then P_j
  __shared__ float scratch[kWarps];

  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / (p.heads_q / p.heads_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int c = threadIdx.x; c < p.head_dim; c += kThreads) q_row[c] = load<T>(p.q, b, i, h, c);
  __syncthreads();

  // Pass 1: s_j = softcap(scale * q.k_j), masked to -inf; one warp per key, lanes split the dot product.
  float local_max = -INFINITY;
  for (int j = warp; j < p.seqlen_k; j += kWarps) {
    float dot = 0.0f;
    for (int c = lane; c < p.head_dim; c += 32) dot += q_row[c] * load<T>(p.k, b, j, h_kv, c);
    dot = warp_sum(dot);
    float s = dot * p.scale;
    if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
    if (!visible(p, i, j)) s = -INFINITY;
    if (lane == 0) scores[j] = s;
    local_max = fmaxf(local_max, s);
  }
  const float row_max = block_max(local_max, scratch);

  const std::int64_t out_row = ((std::int64_t(b) * p.seqlen_q + i) * p.heads_q + h) * p.head_dim;
  const std::int64_t lse_index = (std::int64_t(b) * p.heads_q + h) * p.seqlen_q + i;
  if (row_max == -INFINITY) {  // no visible key: output 0, LSE -inf
    for (int c = threadIdx.x; c < p.head_dim; c += kThreads) {
      p.out[out_row + c] = 0.0f;
      if (p.out_naive) p.out_naive[out_row + c] = 0.0f;
    }
    if (p.lse && threadIdx.x == 0) p.lse[lse_index] = -INFINITY;
    return;
  }

  // Pass 2: P_j = exp(s_j - max), the row sum, then O = sum_j P_j v_j / sum.
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < p.seqlen_k; j += kThreads) {
    const float prob = expf(scores[j] - row_max);  // exp(-inf) = 0 for masked keys
    scores[j] = prob;
    local_sum += prob;
  }
  const float row_sum = block_sum(local_sum, scratch);

  for (int c = threadIdx.x; c < p.head_dim; c += kThreads) {
    float acc = 0.0f, acc_naive = 0.0f;
    for (int j = 0; j < p.seqlen_k; ++j) {
      const float value = load<T>(p.v, b, j, h_kv, c);
      acc += scores[j] * value;
      acc_naive += round_to<T>(scores[j]) * value;
    }
    p.out[out_row + c] = acc / row_sum;
    if (p.out_naive) p.out_naive[out_row + c] = round_to<T>(acc_naive / row_sum);
  }
  if (p.lse && threadIdx.x == 0) p.lse[lse_index] = row_max + logf(row_sum);
}

Status invalid(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, "gpu_reference_forward: " + message);
}

}  // namespace

Status gpu_reference_forward(const GpuReferenceArgs& args) {
  const Tensor& q = args.q;
  const Tensor& k = args.k;
  const Tensor& v = args.v;
  for (const Tensor* t : {&q, &k, &v}) {
    if (t->rank != 4 || t->device != DeviceType::kCuda) return invalid("q, k, v must be rank-4 CUDA tensors");
    if (t->dtype != q.dtype) return invalid("q, k, v must share one dtype");
  }
  if (q.dtype != Dtype::kFloat32 && q.dtype != Dtype::kFloat16 && q.dtype != Dtype::kBFloat16)
    return invalid(std::string("dtype must be float32, float16 or bfloat16, got ") + dtype_name(q.dtype));
  if (k.shape[0] != q.shape[0] || v.shape[0] != q.shape[0] || k.shape[3] != q.shape[3] ||
      v.shape[3] != q.shape[3] || v.shape[1] != k.shape[1] || v.shape[2] != k.shape[2])
    return invalid("shapes must be q (b, sq, hq, d), k and v (b, sk, hkv, d)");
  if (k.shape[2] < 1 || q.shape[2] % k.shape[2] != 0) return invalid("heads_q must be a multiple of heads_kv");
  if (args.out == nullptr) return invalid("out is required");

  Params p{problem_of(args)};
  p.q = view_of(q);
  p.k = view_of(k);
  p.v = view_of(v);
  p.out = args.out;
  p.out_naive = args.out_naive;
  p.lse = args.lse;
  if (p.batch == 0 || p.seqlen_q == 0 || p.heads_q == 0) return Status::Ok();
  if (p.seqlen_k < 1) return invalid("seqlen_k must be at least 1");

  const std::size_t smem = (std::size_t(p.head_dim) + p.seqlen_k) * sizeof(float);
  Status status;
  dispatch_float_dtype(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (std::string why = opt_in_shared_memory(reference_forward_kernel<T>, smem, p.seqlen_k); !why.empty()) {
      status = invalid(why);
      return;
    }
    const dim3 grid(p.seqlen_q, p.heads_q, p.batch);
    reference_forward_kernel<T><<<grid, kThreads, smem, args.stream>>>(p);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
      status = Status(StatusCode::kCudaError, std::string("gpu_reference_forward launch: ") + cudaGetErrorString(err));
  });
  return status;
}

}  // namespace hopattn::test
