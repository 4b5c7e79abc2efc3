#include "gpu/gpu_reference_backward.cuh"

#include <cmath>
#include <string>

#include "gpu/gpu_reference_common.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

using namespace gpu_reference_detail;

// Per (batch, head, query, key), written by the row kernel and summed by the key kernel.
struct Scratch {
  float* p;         // P_ij
  float* ds;        // dS_ij (softcap slope included, softmax_scale not)
  float* ds_naive;  // dS_ij from the rounded out, rounded to the input dtype
  float* ds_abs;    // |dS|_ij = P_ij (|dP|_ij + |D|_i) * slope
};

struct Params : Problem {
  View q, k, v, dout;
  Scratch scratch;
  GradientBuffers dq, dk, dv;
};

// One block per (query row i, head h, batch b): the row's P and dS into the scratch, and dq_i.
template <typename T>
__global__ void __launch_bounds__(kThreads) row_kernel(Params p) {
  extern __shared__ float smem[];
  const int d = p.head_dim, sk = p.seqlen_k;
  float* q_row = smem;
  float* dout_row = q_row + d;
  float* out_naive = dout_row + d;
  float* prob = out_naive + d;  // s_j, then exp(s_j - max), then P_j
  float* slope = prob + sk;     // d(capped score)/d(score): 1 - tanh^2, or 1
  float* ds = slope + sk;       // dP_ij, then dS_ij
  float* ds_abs = ds + sk;      // |dP|_ij, then |dS|_ij
  float* ds_naive = ds_abs + sk;
  __shared__ float scratch[kWarps];

  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / (p.heads_q / p.heads_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int c = threadIdx.x; c < d; c += kThreads) {
    q_row[c] = load<T>(p.q, b, i, h, c);
    dout_row[c] = load<T>(p.dout, b, i, h, c);
  }
  __syncthreads();

  // Scores (softcapped, masked to -inf) and dP_ij = dout_i . v_j: one warp per key.
  float local_max = -INFINITY;
  for (int j = warp; j < sk; j += kWarps) {
    float dot = 0.0f, dp = 0.0f, dp_abs = 0.0f;
    for (int c = lane; c < d; c += 32) {
      const float vc = load<T>(p.v, b, j, h_kv, c);
      dot += q_row[c] * load<T>(p.k, b, j, h_kv, c);
      dp += dout_row[c] * vc;
      dp_abs += fabsf(dout_row[c] * vc);
    }
    dot = warp_sum(dot), dp = warp_sum(dp), dp_abs = warp_sum(dp_abs);
    float s = dot * p.scale, cap_slope = 1.0f;
    if (p.softcap > 0.0f) {
      const float t = tanhf(s / p.softcap);
      s = p.softcap * t;
      cap_slope = 1.0f - t * t;
    }
    if (!visible(p, i, j)) s = -INFINITY;
    if (lane == 0) prob[j] = s, slope[j] = cap_slope, ds[j] = dp, ds_abs[j] = dp_abs;
    local_max = fmaxf(local_max, s);
  }
  const float row_max = block_max(local_max, scratch);

  const std::int64_t row = ((std::int64_t(b) * p.heads_q + h) * p.seqlen_q + i) * sk;  // scratch row
  const std::int64_t dq_row = ((std::int64_t(b) * p.seqlen_q + i) * p.heads_q + h) * d;
  if (row_max == -INFINITY) {  // no visible key: no gradient reaches this row or through it
    for (int j = threadIdx.x; j < sk; j += kThreads)
      p.scratch.p[row + j] = p.scratch.ds[row + j] = p.scratch.ds_naive[row + j] = p.scratch.ds_abs[row + j] = 0.0f;
    for (int c = threadIdx.x; c < d; c += kThreads)
      p.dq.exact[dq_row + c] = p.dq.naive[dq_row + c] = p.dq.magnitude[dq_row + c] = 0.0f;
    return;
  }

  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < sk; j += kThreads) {
    prob[j] = expf(prob[j] - row_max);  // 0 for masked keys
    local_sum += prob[j];
  }
  const float row_sum = block_sum(local_sum, scratch);

  // The forward's naive out (gpu_reference.cu): unnormalized P rounded before PV, out rounded.
  float local_d_naive = 0.0f;
  for (int c = threadIdx.x; c < d; c += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < sk; ++j) acc += round_to<T>(prob[j]) * load<T>(p.v, b, j, h_kv, c);
    out_naive[c] = round_to<T>(acc / row_sum);
    local_d_naive += dout_row[c] * out_naive[c];
  }
  // Its syncs also end every read of the unnormalized prob before the loop below rescales it.
  const float d_naive = block_sum(local_d_naive, scratch);

  // D_i = sum_j P_ij dP_ij, as the CPU reference; |D|_i bounds its float32 rounding.
  float local_d = 0.0f, local_d_abs = 0.0f;
  for (int j = threadIdx.x; j < sk; j += kThreads) {
    prob[j] /= row_sum;
    local_d += prob[j] * ds[j];
    local_d_abs += prob[j] * ds_abs[j];
  }
  const float row_d = block_sum(local_d, scratch);
  const float row_d_abs = block_sum(local_d_abs, scratch);

  for (int j = threadIdx.x; j < sk; j += kThreads) {
    const float pj = prob[j];
    ds_naive[j] = round_to<T>(pj * (ds[j] - d_naive) * slope[j]);
    ds[j] = pj * (ds[j] - row_d) * slope[j];
    ds_abs[j] = pj * (ds_abs[j] + row_d_abs) * slope[j];
    p.scratch.p[row + j] = pj;
    p.scratch.ds[row + j] = ds[j];
    p.scratch.ds_naive[row + j] = ds_naive[j];
    p.scratch.ds_abs[row + j] = ds_abs[j];
  }
  __syncthreads();

  // dq_i = scale sum_j dS_ij k_j.
  for (int c = threadIdx.x; c < d; c += kThreads) {
    float exact = 0.0f, naive = 0.0f, magnitude = 0.0f;
    for (int j = 0; j < sk; ++j) {
      const float kc = load<T>(p.k, b, j, h_kv, c);
      exact += ds[j] * kc;
      naive += ds_naive[j] * kc;
      magnitude += ds_abs[j] * fabsf(kc);
    }
    p.dq.exact[dq_row + c] = p.scale * exact;
    p.dq.naive[dq_row + c] = round_to<T>(p.scale * naive);
    p.dq.magnitude[dq_row + c] = p.scale * magnitude;
  }
}

// One block per (key j, kv head, batch): dk_j = scale sum dS_ij q_i and dv_j = sum P_ij dout_i over
// the rows i of every q head of the group, one thread per column.
template <typename T>
__global__ void __launch_bounds__(kThreads) key_kernel(Params p) {
  const int j = blockIdx.x, h_kv = blockIdx.y, b = blockIdx.z;
  const int group = p.heads_q / p.heads_kv, sk = p.seqlen_k;
  const std::int64_t kv_row = ((std::int64_t(b) * sk + j) * p.heads_kv + h_kv) * p.head_dim;
  for (int c = threadIdx.x; c < p.head_dim; c += kThreads) {
    float dk = 0.0f, dk_naive = 0.0f, dk_abs = 0.0f, dv = 0.0f, dv_naive = 0.0f, dv_abs = 0.0f;
    for (int h = h_kv * group; h < (h_kv + 1) * group; ++h) {
      for (int i = 0; i < p.seqlen_q; ++i) {
        const std::int64_t at = ((std::int64_t(b) * p.heads_q + h) * p.seqlen_q + i) * sk + j;
        const float qc = load<T>(p.q, b, i, h, c), dout_c = load<T>(p.dout, b, i, h, c);
        const float pij = p.scratch.p[at];
        dk += p.scratch.ds[at] * qc;
        dk_naive += p.scratch.ds_naive[at] * qc;
        dk_abs += p.scratch.ds_abs[at] * fabsf(qc);
        dv += pij * dout_c;
        dv_naive += round_to<T>(pij) * dout_c;
        dv_abs += pij * fabsf(dout_c);
      }
    }
    p.dk.exact[kv_row + c] = p.scale * dk;
    p.dk.naive[kv_row + c] = round_to<T>(p.scale * dk_naive);
    p.dk.magnitude[kv_row + c] = p.scale * dk_abs;
    p.dv.exact[kv_row + c] = dv;
    p.dv.naive[kv_row + c] = round_to<T>(dv_naive);
    p.dv.magnitude[kv_row + c] = dv_abs;
  }
}

Status invalid(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, "gpu_reference_backward: " + message);
}

Status cuda_failure(const char* what, cudaError_t err) {
  return Status(StatusCode::kCudaError,
                std::string("gpu_reference_backward: ") + what + ": " + cudaGetErrorString(err));
}

bool complete(const GradientBuffers& g) { return g.exact && g.naive && g.magnitude; }

}  // namespace

Status gpu_reference_backward(const GpuReferenceBackwardArgs& args) {
  const Tensor &q = args.q, &k = args.k, &v = args.v, &dout = args.dout;
  for (const Tensor* t : {&q, &k, &v, &dout}) {
    if (t->rank != 4 || t->device != DeviceType::kCuda) return invalid("q, k, v, dout must be rank-4 CUDA tensors");
    if (t->dtype != q.dtype) return invalid("q, k, v, dout must share one dtype");
    for (int i = 0; i < 4; ++i)
      if (t->shape[i] < 1) return invalid("every extent must be >= 1");
  }
  if (q.dtype != Dtype::kFloat32 && q.dtype != Dtype::kFloat16 && q.dtype != Dtype::kBFloat16)
    return invalid(std::string("dtype must be float32, float16 or bfloat16, got ") + dtype_name(q.dtype));
  for (int i = 0; i < 4; ++i)
    if (dout.shape[i] != q.shape[i]) return invalid("dout must have q's shape");
  if (k.shape[0] != q.shape[0] || v.shape[0] != q.shape[0] || k.shape[3] != q.shape[3] ||
      v.shape[3] != q.shape[3] || v.shape[1] != k.shape[1] || v.shape[2] != k.shape[2])
    return invalid("shapes must be q (b, sq, hq, d), k and v (b, sk, hkv, d)");
  if (q.shape[2] % k.shape[2] != 0) return invalid("heads_q must be a multiple of heads_kv");
  if (!complete(args.dq) || !complete(args.dk) || !complete(args.dv))
    return invalid("every exact, naive and magnitude buffer of dq, dk and dv is required");

  Params p{problem_of(args)};
  p.q = view_of(q), p.k = view_of(k), p.v = view_of(v), p.dout = view_of(dout);
  p.dq = args.dq, p.dk = args.dk, p.dv = args.dv;

  const std::size_t smem = (3 * std::size_t(p.head_dim) + 5 * std::size_t(p.seqlen_k)) * sizeof(float);
  const std::int64_t entries = std::int64_t(p.batch) * p.heads_q * p.seqlen_q * p.seqlen_k;
  float* scratch = nullptr;
  if (cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&scratch), 4 * entries * sizeof(float), args.stream);
      err != cudaSuccess)
    return cuda_failure("scratch allocation", err);
  p.scratch = {scratch, scratch + entries, scratch + 2 * entries, scratch + 3 * entries};

  Status status;
  dispatch_float_dtype(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (std::string why = opt_in_shared_memory(row_kernel<T>, smem, p.seqlen_k); !why.empty()) {
      status = invalid(why);
      return;
    }
    row_kernel<T><<<dim3(p.seqlen_q, p.heads_q, p.batch), kThreads, smem, args.stream>>>(p);
    key_kernel<T><<<dim3(p.seqlen_k, p.heads_kv, p.batch), kThreads, 0, args.stream>>>(p);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) status = cuda_failure("launch", err);
  });
  if (cudaError_t err = cudaFreeAsync(scratch, args.stream); err != cudaSuccess && status.ok())
    status = cuda_failure("scratch release", err);
  return status;
}

}  // namespace hopattn::test
