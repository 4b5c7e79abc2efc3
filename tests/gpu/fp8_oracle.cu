// The FP8 oracle (fp8_oracle.cuh): its kernel, and the comparison of a kernel's out and LSE with it.
#include "gpu/fp8_oracle.cuh"

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.cuh"
#include "sm90/fwd/softmax.cuh"

namespace hopattn::test {
namespace {

__device__ float e4m3_value(std::uint8_t code) {
  __nv_fp8_e4m3 x;
  x.__x = code;
  return static_cast<float>(x);
}

__device__ float block_reduce(float x, float* scratch, bool is_max) {
  for (int o = 16; o > 0; o /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = is_max ? -INFINITY : 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) x = is_max ? fmaxf(x, scratch[w]) : x + scratch[w];
  return x;
}

// One block per (query row, q head, batch); 256 threads.
__global__ void fp8_oracle_kernel(OracleArgs a) {
  extern __shared__ float shared[];
  float* p = shared;                 // P * v scale per key
  float* p8 = shared + a.seqlen_k;   // e4m3(P) * v scale per key
  float* s8 = shared + 2 * a.seqlen_k;  // the score with the kernel's tanh (softcap), else the score
  float* key_magnitude = shared + 3 * a.seqlen_k;  // per key: sum_c |q_c k_jc|, scaled like the score
  float* scratch = shared + 4 * a.seqlen_k;
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (a.heads_q / a.heads_kv);
  const std::uint8_t* q = a.q + ((std::size_t(b) * a.seqlen_q + i) * a.heads_q + h) * a.d;
  const float q_scale = (a.q_head ? a.q_head[b * a.heads_kv + kvh] : 1.0f) *
                        (a.q_block ? a.q_block[(b * a.heads_q + h) * a.blocks_q + i / a.rows_q] : 1.0f);
  const float k_head = a.k_head ? a.k_head[b * a.heads_kv + kvh] : 1.0f;
  const float v_head = a.v_head ? a.v_head[b * a.heads_kv + kvh] : 1.0f;
  // Key j's v descale, and its v code in column c as a value.
  const auto v_scale_of = [&](int j) {
    return v_head * (a.v_block ? a.v_block[(b * a.heads_kv + kvh) * a.blocks_kv + j / a.rows_kv] : 1.0f);
  };
  // What key j's P may be scaled by before its e4m3 rounding: a K block whose keys span several v
  // block scales (the grouped 192- and 96-key kernels' descale groups; a 96-key block lies within an
  // aligned 192-key one) adds its P V in the largest of them, each key's
  // P scaled by its own scale over that largest (fwd_fp8/softmax.cuh, DescaleGroups), which shrinks
  // P, and so grows its subnormal step's share, by up to the inverse.
  const auto p_shrink_of = [&](int j) {
    if (!a.v_block) return 1.0f;
    const float* row = a.v_block + (b * a.heads_kv + kvh) * a.blocks_kv;
    const int first = j / 192 * 192, last = min(a.seqlen_k, first + 192) - 1;
    float top = 0.0f;
    for (int e = first / a.rows_kv; e <= last / a.rows_kv; ++e) top = fmaxf(top, row[e]);
    return top / row[j / a.rows_kv];
  };
  const auto v_at = [&](int j, int c) {
    return e4m3_value(a.v[((std::size_t(b) * a.seqlen_k + j) * a.heads_kv + kvh) * a.dv + c]);
  };
  const int diagonal = i + a.seqlen_k - a.seqlen_q;
  int key_end = a.window_right >= 0 ? min(a.seqlen_k, diagonal + a.window_right + 1) : a.seqlen_k;
  int key_begin = a.window_left >= 0 ? max(0, diagonal - a.window_left) : 0;
  if (a.attention_chunk > 0) {
    const int c = a.attention_chunk;
    const int first = (diagonal >= 0 ? diagonal / c : -((-diagonal + c - 1) / c)) * c;
    key_begin = max(key_begin, first);
    key_end = min(key_end, first + c);
  }
  float local_max = -INFINITY, local_max8 = -INFINITY, local_magnitude = 0.0f;
  for (int j = threadIdx.x; j < a.seqlen_k; j += blockDim.x) {
    float s = -INFINITY, s_approx = -INFINITY;
    if (j >= key_begin && j < key_end) {
      const std::uint8_t* k = a.k + ((std::size_t(b) * a.seqlen_k + j) * a.heads_kv + kvh) * a.d;
      float dot = 0.0f, abs_dot = 0.0f;
      for (int c = 0; c < a.d; ++c) {
        dot += e4m3_value(q[c]) * e4m3_value(k[c]);
        abs_dot += fabsf(e4m3_value(q[c]) * e4m3_value(k[c]));
      }
      const float k_scale = k_head * (a.k_block ? a.k_block[(b * a.heads_kv + kvh) * a.blocks_kv + j / a.rows_kv] : 1.0f);
      s = s_approx = dot * q_scale * k_scale * a.softmax_scale;
      if (a.softcap > 0.0f) {
        s_approx = a.softcap * sm90::fast_tanh(s / a.softcap);  // the kernel's tanh.approx
        s = a.softcap * tanhf(s / a.softcap);
      }
      key_magnitude[j] = abs_dot * q_scale * k_scale * a.softmax_scale;
      local_magnitude = fmaxf(local_magnitude, key_magnitude[j]);
    }
    p[j] = s;
    s8[j] = s_approx;
    local_max = fmaxf(local_max, s);
    local_max8 = fmaxf(local_max8, s_approx);
  }
  const float m = block_reduce(local_max, scratch, true);
  const float m8 = block_reduce(local_max8, scratch, true);
  const float magnitude = block_reduce(local_magnitude, scratch, true);
  float local_sum = 0.0f, local_sum8 = 0.0f;
  for (int j = threadIdx.x; j < a.seqlen_k; j += blockDim.x) {
    const float e = p[j] == -INFINITY ? 0.0f : expf(p[j] - m) * 256.0f;
    const float e8 = s8[j] == -INFINITY ? 0.0f : expf(s8[j] - m8) * 256.0f;
    const float v_scale = v_scale_of(j);
    local_sum += e;
    local_sum8 += e8;
    p[j] = e * v_scale;
    p8[j] = static_cast<float>(__nv_fp8_e4m3(e8)) * v_scale;
  }
  const float l = block_reduce(local_sum, scratch, false);
  const float l8 = block_reduce(local_sum8, scratch, false);
  __syncthreads();
  for (int c = threadIdx.x; c < a.dv; c += blockDim.x) {
    float acc = 0.0f, acc8 = 0.0f;
    for (int j = key_begin; j < key_end; ++j) {
      const float v = v_at(j, c);
      acc += p[j] * v;
      acc8 += p8[j] * v;
    }
    const std::size_t o = ((std::size_t(b) * a.seqlen_q + i) * a.heads_q + h) * a.dv + c;
    const float ref = l > 0.0f ? acc / l : 0.0f;
    a.ref[o] = ref;
    a.emul[o] = l8 > 0.0f ? __bfloat162float(__float2bfloat16_rn(acc8 / l8)) : 0.0f;
    // The header's per-key terms (p[j] = 256 exp(s_j - max) v_scale_j, l = 256 L).
    float sum = 0.0f, sum_squares = 0.0f;
    for (int j = key_begin; j < key_end && l > 0.0f; ++j) {
      if (p[j] == 0.0f) continue;
      const float v = v_at(j, c);
      const float v_scale = v_scale_of(j);
      const float u = v_scale * v, weight = p[j] / v_scale / l;
      const float score_error = 0x1p-9f * key_magnitude[j] + 0x1p-10f * a.softcap;
      const float term = (0x1p-4f + 0x1p-11f) * weight * fabsf(u) + 0x1p-10f * fabsf(u) * p_shrink_of(j) / l +
                         score_error * weight * fabsf(u - ref);
      sum += term;
      sum_squares += term * term;
    }
    a.bound[o] = fminf(sum, 7.0f * sqrtf(sum_squares)) + 3.0f * 0x1p-9f * fabsf(ref) + 1e-5f;
  }
  if (threadIdx.x == 0) {
    const std::size_t row = (std::size_t(b) * a.heads_q + h) * a.seqlen_q + i;
    a.lse[row] = l > 0.0f ? m + logf(l / 256.0f) : -INFINITY;
    // LSE moves by at most the largest score error; a score's QGMMA error is bounded by 2^-9 of its
    // sum of |products| (4x the 5e-4 measured by ArchFp8Wgmma), plus float32 slack.
    a.lse_tolerance[row] = 2e-3f + magnitude / 512.0f + a.softcap / 1024.0f;
  }
}

}  // namespace

std::string check_against_oracle(OracleArgs o, const std::function<double(std::int64_t)>& out_at,
                                 const std::function<float(std::int64_t)>& lse_at) {
  if (o.dv == 0) o.dv = o.d;
  const std::int64_t nq = std::int64_t(o.batch) * o.seqlen_q * o.heads_q * o.dv;
  const std::int64_t nlse = std::int64_t(o.batch) * o.heads_q * o.seqlen_q;
  DeviceBuffer ref(nq * 4), emul(nq * 4), bound(nq * 4), lse_ref(nlse * 4), lse_tolerance(nlse * 4);
  o.ref = ref.as<float>(), o.emul = emul.as<float>(), o.lse = lse_ref.as<float>();
  o.bound = bound.as<float>(), o.lse_tolerance = lse_tolerance.as<float>();
  const std::size_t smem = (4 * std::size_t(o.seqlen_k) + 32) * sizeof(float);
  HOPATTN_CUDA_CHECK(cudaFuncSetAttribute(fp8_oracle_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  fp8_oracle_kernel<<<dim3(o.seqlen_q, o.heads_q, o.batch), 256, smem>>>(o);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());

  const auto ref_h = ref.to_host<float>(), emul_h = emul.to_host<float>(), bound_h = bound.to_host<float>();
  // The element furthest past its bound (as a fraction of it), and how many are past theirs.
  double worst_ratio = 0;
  std::int64_t worst = 0, elements_over = 0;
  for (std::int64_t i = 0; i < nq; ++i) {
    const double x = out_at(i);
    if (std::isnan(x)) return "NaN in out at element " + std::to_string(i);
    const double ratio = std::fabs(x - ref_h[i]) / bound_h[i];
    elements_over += ratio > 1.0;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (elements_over > 0) {
    // What tells a kernel fault (many rows, out far from emul) from a bound the rounding outran (one
    // peaky row): how many elements are past their bounds, and the worst element's row (batch, query,
    // head) with its columns furthest past theirs, beside the emulation.
    const std::int64_t row = worst / o.dv;
    std::ostringstream s;
    s << elements_over << " elements past their bounds, the worst by " << worst_ratio << "x; its row (b "
      << row / (o.seqlen_q * o.heads_q) << ", query " << row / o.heads_q % o.seqlen_q << ", head " << row % o.heads_q
      << "), columns by |out - ref| / bound:";
    std::vector<int> cols(o.dv);
    for (int col = 0; col < o.dv; ++col) cols[col] = col;
    const auto miss = [&](int col) {
      const std::int64_t i = row * o.dv + col;
      return std::fabs(out_at(i) - ref_h[i]) / bound_h[i];
    };
    std::sort(cols.begin(), cols.end(), [&](int a, int b) { return miss(a) > miss(b); });
    for (int n = 0; n < 6 && n < o.dv; ++n) {
      const std::int64_t i = row * o.dv + cols[n];
      s << "\n    col " << cols[n] << ": out " << out_at(i) << " emul " << emul_h[i] << " ref " << ref_h[i]
        << " bound " << bound_h[i];
    }
    return s.str();
  }
  if (lse_at) {
    const auto lse_ref_h = lse_ref.to_host<float>(), tolerance_h = lse_tolerance.to_host<float>();
    for (std::int64_t i = 0; i < nlse; ++i) {
      const float lse = lse_at(i);
      const bool inf = std::isinf(lse_ref_h[i]);
      if (std::isnan(lse) || inf != std::isinf(lse) || (!inf && std::fabs(lse - lse_ref_h[i]) > tolerance_h[i])) {
        return "lse row " + std::to_string(i) + ": " + std::to_string(lse) + " vs reference " +
               std::to_string(lse_ref_h[i]) + " (tolerance " + std::to_string(tolerance_h[i]) + ")";
      }
    }
  }
  return "";
}

}  // namespace hopattn::test
