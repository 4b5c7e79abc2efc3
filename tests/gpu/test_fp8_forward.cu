// The sm_90a FP8 forward against an on-device oracle on the same e4m3 codes and scales: random
// configurations (head dims 64/128/256, causal or not, sliding windows, softcap, GQA, odd lengths and
// length 1, LSE, per-head and per-block descales, every kernel option, out with padded rows), dense
// and variable-length batches (each sequence checked against the oracle on its own), fresh data per
// run, poisoned outputs.
//
// Tolerance: a bound per output element, computed by the oracle from the same inputs as the sum of
// what each key's rounding can move the output by (the kernel's own arithmetic need not be
// reproduced bit for bit, and is not: it rounds P against a running max, block by block from the last
// key). With p_j the softmax weight of key j, u_j = v_scale_j v_jc and o the exact output:
//  - P rounded to e4m3 (2^8 offset): 2^-4 relative in the normal range, after an f16 step (2^-11):
//    (2^-4 + 2^-11) p_j |u_j|; in the subnormal range 2^-10 absolute of 256: 2^-18 |u_j| / L, where
//    L = sum_j exp(s_j - max) >= 1, times r_j >= 1 where the kernel scales P down by 1 / r_j first
//    (the grouped kernels' v descale groups: r_j = the largest v block scale of key j's aligned
//    192-key block over key j's).
//  - The score itself: the S = Q K^T QGMMA adds the products of each instruction with only ~13-14
//    mantissa bits, truncated (a Hopper FP8 tensor-core property), an error relative to the size of
//    the summed products rather than of the score: 2^-9 sum_c |q_c k_jc| (scaled like the scores; 4x
//    the error ArchFp8Wgmma measured), plus softcap 2^-10 for the kernel's tanh.approx under a
//    softcap. A score off by d moves the output by p_j (u_j - o) d to first order: 2^-9 mag_j p_j |u_j -
//    o|. On peaky rows (q amplitude 4) this is the larger term: an H200 run of 2026-12-02 (HOPATTN_TEST_SEED
//    17340103136352234049) put a two-key row 0.70 off, which a host model of the truncation reproduced
//    to two decimals (perf-notes, session 21).
//  - The bound: min(sum_j b_j, 7 sqrt(sum_j b_j^2)) (rounding errors of many keys add like a random
//    walk) + 3 * 2^-9 |o| (the f16 row sum and the bf16 store) + 1e-5.
// Host models of the kernel put its error at 0.2-0.3 of this bound over 200 seeds of the long-key
// case; a wrong block scale, a dropped key block or a key permutation moves outputs by O(|v|) on peaky
// rows, far past it. The oracle also keeps `emul`, the output with P rounded to e4m3 against the row's
// max, which a failure prints beside the kernel's. LSE does not see the P rounding: |lse - lse_ref| <=
// 2e-3 + 2^-9 max_j mag_j (+ softcap 2^-10), and -inf exactly where a row sees no key.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/attention_problem.cuh"
#include "gpu/gpu_test_util.cuh"
#include "gpu/sequence_checks.cuh"
#include "gpu/transposed_decode_shapes.cuh"
#include "sm90/fwd/softmax.cuh"

namespace hopattn::test {
namespace {

struct Fp8Case {
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 128;
  bool causal = false, with_lse = true;
  int window_left = -1, window_right = -1;  // -1: unbounded; causal is window_right 0
  int attention_chunk = 0;                   // 0: off
  float softcap = 0.0f;                      // 0: off
  int out_pad = 0;  // > 0: out rows padded by this many elements (a multiple of 8: 16-byte strides)
  float q_amplitude = 1.0f;  // larger: peakier softmax
  bool head_scales = false, block_scales = false;
  int rows_q = 128, rows_kv = 128;
  int num_splits = 0;  // the API's: 0 heuristic, 1 never, n pieces per tile
  // v passed keys-contiguous: a (batch, heads_kv, d, seqlen_k rounded up to 16 + v_key_pad) buffer,
  // its padding poisoned with e4m3 NaN, viewed as (batch, seqlen_k, heads_kv, d).
  bool v_keys_contiguous = false;
  int v_key_pad = 0;
  // > 0 (with block_scales): v blocks 1, 4, 7, ... of every (batch, kv head) all zeros, with this v
  // block scale (zero_v_blocks).
  float zero_v_block_scale = 0.0f;
  KernelOptions options;

  std::string describe() const {
    std::ostringstream s;
    s << "b " << batch << " hq " << heads_q << " hkv " << heads_kv << " sq " << seqlen_q << " sk " << seqlen_k
      << " d " << head_dim << (causal ? " causal" : "") << (with_lse ? " lse" : "") << " qamp " << q_amplitude
      << " window (" << window_left << ", " << window_right << ")"
      << (head_scales ? " head-scales" : "");
    if (attention_chunk > 0) s << " chunk " << attention_chunk;
    if (softcap > 0.0f) s << " softcap " << softcap;
    if (out_pad > 0) s << " out-pad " << out_pad;
    if (block_scales) s << " block-scales " << rows_q << "/" << rows_kv;
    if (num_splits != 0) s << " num_splits " << num_splits;
    if (v_keys_contiguous) s << " v keys-contiguous (key pad " << v_key_pad << ")";
    if (zero_v_block_scale > 0.0f) s << " zero v blocks scaled " << zero_v_block_scale;
    s << " pingpong " << options.pingpong << " overlap " << options.intra_wg_overlap << " persistent "
      << options.persistent;
    return s.str();
  }
};

struct OracleArgs {
  const std::uint8_t *q, *k, *v;                            // contiguous (b, s, h, d) e4m3 codes
  const float *q_head, *k_head, *v_head;                    // (batch, heads_kv) or null
  const float *q_block, *k_block, *v_block;                 // (batch, heads, blocks) or null
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, d, rows_q, rows_kv, blocks_q, blocks_kv;
  int window_left, window_right;  // bottom-right aligned, -1 unbounded (causal: window_right 0)
  float softmax_scale, softcap;   // softcap 0: off
  // Outputs (check_against_oracle allocates them):
  float *ref = nullptr, *emul = nullptr, *lse = nullptr;  // dense (b, sq, hq, d) and (b, hq, sq)
  float* bound = nullptr;          // dense (b, sq, hq, d): how far out may be from ref (the header)
  float* lse_tolerance = nullptr;  // (b, hq, sq): what the QGMMA accumulation may move the row's LSE by
  int attention_chunk = 0;  // 0 = off; else only keys in the chunk of the row's diagonal (floor division)
};

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
    return e4m3_value(a.v[((std::size_t(b) * a.seqlen_k + j) * a.heads_kv + kvh) * a.d + c]);
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
  for (int c = threadIdx.x; c < a.d; c += blockDim.x) {
    float acc = 0.0f, acc8 = 0.0f;
    for (int j = key_begin; j < key_end; ++j) {
      const float v = v_at(j, c);
      acc += p[j] * v;
      acc8 += p8[j] * v;
    }
    const std::size_t o = ((std::size_t(b) * a.seqlen_q + i) * a.heads_q + h) * a.d + c;
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

__global__ void to_e4m3_kernel(const float* in, std::uint8_t* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = __nv_fp8_e4m3(in[i]).__x;
}

DeviceBuffer random_e4m3(std::int64_t n, std::uint64_t seed, float amplitude) {
  DeviceBuffer f(n * sizeof(float)), codes(n);
  fill_normal(f.data(), Dtype::kFloat32, n, seed, amplitude);
  to_e4m3_kernel<<<grid_for(n), 256>>>(f.as<float>(), codes.as<std::uint8_t>(), n);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  return codes;
}

DeviceBuffer device_copy(const std::vector<float>& host) {
  DeviceBuffer d(host.size() * sizeof(float));
  HOPATTN_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

DeviceBuffer random_scales(std::int64_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> host(n);
  for (float& x : host) x = dist(rng);
  return device_copy(host);
}

// v block scales in [1/4, 4]: for half of the calls powers of two, as quantize_fp8 writes them (a
// block's v scale equal to the one before leaves O's units exactly as they are), for the other half any
// value (O changes units every block).
DeviceBuffer random_v_block_scales(std::int64_t n, std::mt19937_64& rng) {
  if (rng() % 2) return random_scales(n, rng, 0.25f, 4.0f);
  std::uniform_int_distribution<int> exponent(-2, 2);
  std::vector<float> host(n);
  for (float& x : host) x = std::ldexp(1.0f, exponent(rng));
  return device_copy(host);
}

float bf16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t w = std::uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

// v (batch, keys, heads_kv, d, contiguous) copied keys-contiguous into rows of `row_keys` >= keys
// per (batch, head, dim), the rest of each row e4m3 NaN (0x7f): a view that reads past the keys
// sees NaN.
DeviceBuffer keys_contiguous_copy(const DeviceBuffer& v, int batch, int keys, int heads, int d, int row_keys) {
  const auto src = v.to_host<std::uint8_t>();
  std::vector<std::uint8_t> dst(std::size_t(batch) * heads * d * row_keys, 0x7f);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < keys; ++j)
      for (int h = 0; h < heads; ++h)
        for (int c = 0; c < d; ++c)
          dst[((std::size_t(b) * heads + h) * d + c) * row_keys + j] = src[((std::size_t(b) * keys + j) * heads + h) * d + c];
  DeviceBuffer out(dst.size());
  HOPATTN_CUDA_CHECK(cudaMemcpy(out.data(), dst.data(), dst.size(), cudaMemcpyHostToDevice));
  return out;
}

// Runs the oracle on problem `o` (its output pointers are filled here) and compares: empty when
// every output element is within its bound and every LSE row within its tolerance, else why not.
// out_at(i): the kernel's element i in the dense (batch, seqlen_q, heads_q, d) order; lse_at(r): its
// LSE row r in (batch, heads_q, seqlen_q) order, or empty where the case has no LSE.
std::string check_against_oracle(OracleArgs o, const std::function<double(std::int64_t)>& out_at,
                                 const std::function<float(std::int64_t)>& lse_at) {
  const std::int64_t nq = std::int64_t(o.batch) * o.seqlen_q * o.heads_q * o.d;
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
    const std::int64_t row = worst / o.d;
    std::ostringstream s;
    s << elements_over << " elements past their bounds, the worst by " << worst_ratio << "x; its row (b "
      << row / (o.seqlen_q * o.heads_q) << ", query " << row / o.heads_q % o.seqlen_q << ", head " << row % o.heads_q
      << "), columns by |out - ref| / bound:";
    std::vector<int> cols(o.d);
    for (int col = 0; col < o.d; ++col) cols[col] = col;
    const auto miss = [&](int col) {
      const std::int64_t i = row * o.d + col;
      return std::fabs(out_at(i) - ref_h[i]) / bound_h[i];
    };
    std::sort(cols.begin(), cols.end(), [&](int a, int b) { return miss(a) > miss(b); });
    for (int n = 0; n < 6 && n < o.d; ++n) {
      const std::int64_t i = row * o.d + cols[n];
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

// Makes v blocks 1, 4, 7, ... (of `rows` keys) of every (batch, kv head) all zeros, with v block scale
// `scale`: any scale codes an all-zero block, and quantizers write different ones (quantize_fp8 1,
// others an amax clamped at 1e-12 over 448). Such a block's keys still count in the softmax.
void zero_v_blocks(DeviceBuffer& v, DeviceBuffer& v_block, int batch, int keys, int heads, int d, int rows,
                   int blocks, float scale) {
  auto codes = v.to_host<std::uint8_t>();
  auto scales = v_block.to_host<float>();
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      for (int block = 1; block < blocks; block += 3) {
        scales[(std::size_t(b) * heads + h) * blocks + block] = scale;
        for (int j = block * rows; j < std::min(keys, (block + 1) * rows); ++j) {
          std::fill_n(codes.begin() + ((std::size_t(b) * keys + j) * heads + h) * d, d, std::uint8_t{0});
        }
      }
    }
  }
  HOPATTN_CUDA_CHECK(cudaMemcpy(v.data(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
  v_block = device_copy(scales);
}

// A case's descales, drawn at random where it asks for them: per head, (batch, heads_kv); per block,
// (batch, heads, blocks of rows) for q (heads_q) and k, v (heads_kv). null() where absent.
struct Fp8Descales {
  int batch, heads_q, heads_kv, blocks_q, blocks_kv;
  bool head, block;
  DeviceBuffer q_head, k_head, v_head, q_block, k_block, v_block;

  Fp8Descales(int batch_, int heads_q_, int heads_kv_, int blocks_q_, int blocks_kv_, bool head_, bool block_,
              std::mt19937_64& rng)
      : batch(batch_), heads_q(heads_q_), heads_kv(heads_kv_), blocks_q(blocks_q_), blocks_kv(blocks_kv_),
        head(head_), block(block_) {
    if (head) {
      q_head = random_scales(batch * heads_kv, rng, 0.5f, 2.0f);
      k_head = random_scales(batch * heads_kv, rng, 0.5f, 2.0f);
      v_head = random_scales(batch * heads_kv, rng, 0.5f, 2.0f);
    }
    if (block) {
      q_block = random_scales(std::int64_t(batch) * heads_q * blocks_q, rng, 0.25f, 2.0f);
      k_block = random_scales(std::int64_t(batch) * heads_kv * blocks_kv, rng, 0.25f, 2.0f);
      v_block = random_v_block_scales(std::int64_t(batch) * heads_kv * blocks_kv, rng);
    }
  }

  void attach(FwdArgs& args, int rows_q, int rows_kv) const {
    if (head) {
      args.q_descale = make_tensor(q_head.data(), Dtype::kFloat32, {batch, heads_kv}, DeviceType::kCuda);
      args.k_descale = make_tensor(k_head.data(), Dtype::kFloat32, {batch, heads_kv}, DeviceType::kCuda);
      args.v_descale = make_tensor(v_head.data(), Dtype::kFloat32, {batch, heads_kv}, DeviceType::kCuda);
    }
    if (block) {
      args.q_block_descale = make_tensor(q_block.data(), Dtype::kFloat32, {batch, heads_q, blocks_q}, DeviceType::kCuda);
      args.k_block_descale = make_tensor(k_block.data(), Dtype::kFloat32, {batch, heads_kv, blocks_kv}, DeviceType::kCuda);
      args.v_block_descale = make_tensor(v_block.data(), Dtype::kFloat32, {batch, heads_kv, blocks_kv}, DeviceType::kCuda);
      args.descale_block_rows_q = rows_q;
      args.descale_block_rows_kv = rows_kv;
    }
  }

  // Sequence b's entries (the oracle's pointers for a batch of one), or null where absent.
  const float* per_head(const DeviceBuffer& x, int b) const { return head ? x.as<float>() + b * heads_kv : nullptr; }
  const float* per_block(const DeviceBuffer& x, int b, int heads, int blocks) const {
    return block ? x.as<float>() + std::size_t(b) * heads * blocks : nullptr;
  }
};

// The mask, softcap, kernel options and split count every case type carries.
template <class Case>
void set_mask_and_options(FwdArgs& args, const Case& c) {
  set_mask(args, c);
  args.options = c.options;
  args.num_splits = c.num_splits;
}

// Empty string when the case passes, else why it failed.
std::string run_fp8_case(const Fp8Case& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t nq = std::int64_t(c.batch) * c.seqlen_q * c.heads_q * c.head_dim;
  const std::int64_t nkv = std::int64_t(c.batch) * c.seqlen_k * c.heads_kv * c.head_dim;
  const std::int64_t nlse = std::int64_t(c.batch) * c.heads_q * c.seqlen_q;
  const int blocks_q = (c.seqlen_q + c.rows_q - 1) / c.rows_q, blocks_kv = (c.seqlen_k + c.rows_kv - 1) / c.rows_kv;
  DeviceBuffer q = random_e4m3(nq, rng(), c.q_amplitude), k = random_e4m3(nkv, rng(), 1.0f),
               v = random_e4m3(nkv, rng(), 1.0f);
  Fp8Descales scales(c.batch, c.heads_q, c.heads_kv, blocks_q, blocks_kv, c.head_scales, c.block_scales, rng);
  if (c.zero_v_block_scale > 0.0f && c.block_scales) {
    zero_v_blocks(v, scales.v_block, c.batch, c.seqlen_k, c.heads_kv, c.head_dim, c.rows_kv, blocks_kv,
                  c.zero_v_block_scale);
  }
  // out: (b, sq, hq, d) in rows of d + out_pad elements; the padding must stay poisoned.
  const int out_row = c.head_dim + c.out_pad;
  const std::int64_t nout = nq / c.head_dim * out_row;
  DeviceBuffer out(nout * 2), lse(nlse * 4);
  poison_nan(out.data(), Dtype::kBFloat16, nout);
  poison_nan(lse.data(), Dtype::kFloat32, nlse);

  FwdArgs args;
  args.q = make_tensor(q.data(), Dtype::kFloat8E4M3, {c.batch, c.seqlen_q, c.heads_q, c.head_dim}, DeviceType::kCuda);
  args.k = make_tensor(k.data(), Dtype::kFloat8E4M3, {c.batch, c.seqlen_k, c.heads_kv, c.head_dim}, DeviceType::kCuda);
  args.v = make_tensor(v.data(), Dtype::kFloat8E4M3, {c.batch, c.seqlen_k, c.heads_kv, c.head_dim}, DeviceType::kCuda);
  DeviceBuffer v_keys_contiguous;
  if (c.v_keys_contiguous) {
    const int row_keys = (c.seqlen_k + 15) / 16 * 16 + c.v_key_pad;
    v_keys_contiguous = keys_contiguous_copy(v, c.batch, c.seqlen_k, c.heads_kv, c.head_dim, row_keys);
    const std::int64_t strides[4] = {std::int64_t(c.heads_kv) * c.head_dim * row_keys, 1,
                                     std::int64_t(c.head_dim) * row_keys, row_keys};
    args.v = strided_tensor(v_keys_contiguous.data(), Dtype::kFloat8E4M3,
                            {c.batch, c.seqlen_k, c.heads_kv, c.head_dim}, strides);
  }
  const std::int64_t out_strides[4] = {std::int64_t(c.seqlen_q) * c.heads_q * out_row,
                                       std::int64_t(c.heads_q) * out_row, out_row, 1};
  args.out = strided_tensor(out.data(), Dtype::kBFloat16, {c.batch, c.seqlen_q, c.heads_q, c.head_dim}, out_strides);
  if (c.with_lse) args.lse = make_tensor(lse.data(), Dtype::kFloat32, {c.batch, c.heads_q, c.seqlen_q}, DeviceType::kCuda);
  scales.attach(args, c.rows_q, c.rows_kv);
  set_mask_and_options(args, c);
  const Status status = forward(args);
  if (!status.ok()) return "forward failed: " + status.message();
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  if (count_unpoisoned(out.data(), Dtype::kBFloat16, nout) != nq)
    return "out not written exactly (NaN left in the view, or the padding overwritten)";
  if (c.with_lse && count_unpoisoned(lse.data(), Dtype::kFloat32, nlse) != nlse) return "lse not fully written";

  OracleArgs o{q.as<std::uint8_t>(), k.as<std::uint8_t>(), v.as<std::uint8_t>(),
               scales.per_head(scales.q_head, 0), scales.per_head(scales.k_head, 0), scales.per_head(scales.v_head, 0),
               scales.per_block(scales.q_block, 0, c.heads_q, blocks_q),
               scales.per_block(scales.k_block, 0, c.heads_kv, blocks_kv),
               scales.per_block(scales.v_block, 0, c.heads_kv, blocks_kv),
               c.batch, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k, c.head_dim, c.rows_q, c.rows_kv,
               blocks_q, blocks_kv, c.window_left, c.causal ? 0 : c.window_right,
               1.0f / std::sqrt(static_cast<float>(c.head_dim)), c.softcap};
  o.attention_chunk = c.attention_chunk;
  const auto out_h = out.to_host<std::uint16_t>();
  const auto lse_h = lse.to_host<float>();
  return check_against_oracle(
      o, [&](std::int64_t i) { return double(bf16_bits_to_float(out_h[i / c.head_dim * out_row + i % c.head_dim])); },
      c.with_lse ? [&](std::int64_t row) { return lse_h[row]; } : std::function<float(std::int64_t)>());
}

// A variable-length FP8 batch (cu_seqlens_q / cu_seqlens_k / seqused_k / a paged cache): sequence b
// has lens_q[b] queries and lens_k[b] keys, of which it uses used_k[b] (seqused_k; empty: all of
// them). The k and v rows past the keys in use are e4m3 NaN (0x7f), as a cache's unwritten rows may
// be. dense_q / dense_k pass equal-length q or k/v as (batch, seqlen, heads, d) without cu_seqlens
// instead; page_size > 0 passes k/v as a paged cache of that page size instead (shuffled pages of
// max(lens_k) keys per sequence, spare pages, everything but the keys in use NaN; seqused_k given).
// used_q (seqused_q; empty: all): the queries each sequence uses; its q rows past them are NaN, and
// its out and lse rows there must keep their poison.
struct Fp8VarlenCase {
  std::vector<int> lens_q, lens_k, used_k, used_q;
  bool dense_q = false, dense_k = false;
  int page_size = 0;
  int heads_q = 4, heads_kv = 2, head_dim = 128;
  bool causal = false, with_lse = true;
  int window_left = -1, window_right = -1;
  int attention_chunk = 0;
  float softcap = 0.0f, q_amplitude = 2.0f;
  bool head_scales = true, block_scales = false;
  int rows_q = 128, rows_kv = 128;
  int num_splits = 0;  // the API's: 0 heuristic (decoding steps split), 1 never, n pieces per tile
  KernelOptions options;

  std::string describe() const {
    const auto list = [](const std::vector<int>& xs) {
      std::ostringstream s;
      for (std::size_t i = 0; i < xs.size(); ++i) s << (i ? "," : "") << xs[i];
      return s.str();
    };
    std::ostringstream s;
    s << "varlen sq {" << list(lens_q) << "} sk {" << list(lens_k) << "}";
    if (!used_k.empty()) s << " seqused_k {" << list(used_k) << "}";
    if (!used_q.empty()) s << " seqused_q {" << list(used_q) << "}";
    if (dense_q) s << " dense q";
    if (dense_k) s << " dense k/v";
    if (page_size > 0) s << " paged " << page_size;
    s << " hq " << heads_q << " hkv " << heads_kv << " d " << head_dim << (causal ? " causal" : "")
      << (with_lse ? " lse" : "") << " qamp " << q_amplitude << " window (" << window_left << ", " << window_right
      << ")" << (head_scales ? " head-scales" : "");
    if (attention_chunk > 0) s << " chunk " << attention_chunk;
    if (softcap > 0.0f) s << " softcap " << softcap;
    if (block_scales) s << " block-scales " << rows_q << "/" << rows_kv;
    if (num_splits != 0) s << " num_splits " << num_splits;
    s << " pingpong " << options.pingpong << " overlap " << options.intra_wg_overlap << " persistent "
      << options.persistent << " pack_gqa " << static_cast<int>(options.pack_gqa);
    return s.str();
  }
};

// Empty string when every sequence of the case matches the oracle, run on that sequence alone (its
// rows of the packed tensors are a dense batch of one), else why not.
std::string run_fp8_varlen_case(const Fp8VarlenCase& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int batch = static_cast<int>(c.lens_q.size()), hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const std::vector<int> starts_q = prefix_sums(c.lens_q), starts_k = prefix_sums(c.lens_k);
  const std::vector<int>& used = c.used_k.empty() ? c.lens_k : c.used_k;
  const std::vector<int>& used_q = c.used_q.empty() ? c.lens_q : c.used_q;
  const int total_q = starts_q.back(), total_k = starts_k.back();
  const int max_q = *std::max_element(c.lens_q.begin(), c.lens_q.end());
  const int max_k = *std::max_element(c.lens_k.begin(), c.lens_k.end());
  const int pages_per_seq = c.page_size > 0 ? (max_k + c.page_size - 1) / c.page_size : 0;
  const int kv_len = c.page_size > 0 ? pages_per_seq * c.page_size : max_k;  // the launch's seqlen_k
  const int blocks_q = (max_q + c.rows_q - 1) / c.rows_q, blocks_kv = (kv_len + c.rows_kv - 1) / c.rows_kv;
  DeviceBuffer q = random_e4m3(std::int64_t(total_q) * hq * d, rng(), c.q_amplitude);
  DeviceBuffer k = random_e4m3(std::int64_t(total_k) * hkv * d, rng(), 1.0f);
  DeviceBuffer v = random_e4m3(std::int64_t(total_k) * hkv * d, rng(), 1.0f);
  for (int b = 0; b < batch; ++b) {  // the rows past the keys in use: e4m3 NaN
    const std::size_t row_bytes = std::size_t(hkv) * d, first = std::size_t(starts_k[b] + used[b]) * row_bytes;
    const std::size_t bytes = std::size_t(c.lens_k[b] - used[b]) * row_bytes;
    HOPATTN_CUDA_CHECK(cudaMemset(k.as<std::uint8_t>() + first, 0x7f, bytes));
    HOPATTN_CUDA_CHECK(cudaMemset(v.as<std::uint8_t>() + first, 0x7f, bytes));
    const std::size_t q_row_bytes = std::size_t(hq) * d;  // and the query rows past those in use
    HOPATTN_CUDA_CHECK(cudaMemset(q.as<std::uint8_t>() + (starts_q[b] + used_q[b]) * q_row_bytes, 0x7f,
                                  (c.lens_q[b] - used_q[b]) * q_row_bytes));
  }
  const Fp8Descales scales(batch, hq, hkv, blocks_q, blocks_kv, c.head_scales, c.block_scales, rng);
  const std::int64_t nq = std::int64_t(total_q) * hq * d, nlse = std::int64_t(total_q) * hq;
  DeviceBuffer out(nq * 2), lse(nlse * 4);
  poison_nan(out.data(), Dtype::kBFloat16, nq);
  poison_nan(lse.data(), Dtype::kFloat32, nlse);
  const DeviceBuffer cu_q = upload(starts_q), cu_k = upload(starts_k);

  FwdArgs args;
  const auto rows = [&](const DeviceBuffer& x, Dtype dtype, int total, int heads, bool dense, int len) {
    return dense ? make_tensor(x.data(), dtype, {batch, len, heads, d}, DeviceType::kCuda)
                 : make_tensor(x.data(), dtype, {total, heads, d}, DeviceType::kCuda);
  };
  args.q = rows(q, Dtype::kFloat8E4M3, total_q, hq, c.dense_q, max_q);
  args.k = rows(k, Dtype::kFloat8E4M3, total_k, hkv, c.dense_k, max_k);
  args.v = rows(v, Dtype::kFloat8E4M3, total_k, hkv, c.dense_k, max_k);
  DeviceBuffer k_pages, v_pages, page_table;
  if (c.page_size > 0) {
    const int num_pages = batch * pages_per_seq + 3;
    std::vector<int> order(num_pages), table(std::size_t(batch) * pages_per_seq);
    for (int i = 0; i < num_pages; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = order[i];
    const std::size_t row_bytes = std::size_t(hkv) * d;
    const auto paged = [&](const DeviceBuffer& rows_buffer) {
      const auto host = rows_buffer.to_host<std::uint8_t>();
      std::vector<std::uint8_t> pages(std::size_t(num_pages) * c.page_size * row_bytes, 0x7f);
      for (int b = 0; b < batch; ++b)
        for (int j = 0; j < used[b]; ++j) {
          const std::size_t page = table[std::size_t(b) * pages_per_seq + j / c.page_size];
          std::memcpy(&pages[(page * c.page_size + j % c.page_size) * row_bytes],
                      &host[(std::size_t(starts_k[b]) + j) * row_bytes], row_bytes);
        }
      DeviceBuffer out(pages.size());
      HOPATTN_CUDA_CHECK(cudaMemcpy(out.data(), pages.data(), pages.size(), cudaMemcpyHostToDevice));
      return out;
    };
    k_pages = paged(k), v_pages = paged(v), page_table = upload(table);
    args.k = make_tensor(k_pages.data(), Dtype::kFloat8E4M3, {num_pages, c.page_size, hkv, d}, DeviceType::kCuda);
    args.v = make_tensor(v_pages.data(), Dtype::kFloat8E4M3, {num_pages, c.page_size, hkv, d}, DeviceType::kCuda);
    args.page_table = make_tensor(page_table.data(), Dtype::kInt32, {batch, pages_per_seq}, DeviceType::kCuda);
  }
  args.out = rows(out, Dtype::kBFloat16, total_q, hq, c.dense_q, max_q);
  if (c.with_lse) {
    args.lse = c.dense_q ? make_tensor(lse.data(), Dtype::kFloat32, {batch, hq, max_q}, DeviceType::kCuda)
                         : make_tensor(lse.data(), Dtype::kFloat32, {hq, total_q}, DeviceType::kCuda);
  }
  if (!c.dense_q) args.cu_seqlens_q = make_tensor(cu_q.data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
  if (!c.dense_k && c.page_size == 0)
    args.cu_seqlens_k = make_tensor(cu_k.data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
  const DeviceBuffer used_all = upload(used);  // a paged cache takes its key counts from seqused_k
  if (!c.used_k.empty() || c.page_size > 0)
    args.seqused_k = make_tensor(used_all.data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
  const DeviceBuffer used_q_all = upload(used_q);
  if (!c.used_q.empty()) args.seqused_q = make_tensor(used_q_all.data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
  args.max_seqlen_q = max_q;
  args.max_seqlen_k = max_k;
  scales.attach(args, c.rows_q, c.rows_kv);
  set_mask_and_options(args, c);
  const Status status = forward(args);
  if (!status.ok()) return "forward failed: " + status.message();
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  // Exactly the rows in use written (all of them without seqused_q).
  const std::int64_t rows_used = std::int64_t(prefix_sums(used_q).back()) * hq;
  if (count_unpoisoned(out.data(), Dtype::kBFloat16, nq) != rows_used * d) return "out not written exactly";
  if (c.with_lse && count_unpoisoned(lse.data(), Dtype::kFloat32, nlse) != rows_used)
    return "lse not written exactly";

  const auto out_h = out.to_host<std::uint16_t>();
  const auto lse_h = lse.to_host<float>();
  for (int b = 0; b < batch; ++b) {
    const int len_q = used_q[b];
    if (len_q == 0) continue;
    const std::size_t q_row = starts_q[b], k_row = starts_k[b];
    OracleArgs o{q.as<std::uint8_t>() + q_row * hq * d, k.as<std::uint8_t>() + k_row * hkv * d,
                 v.as<std::uint8_t>() + k_row * hkv * d,
                 scales.per_head(scales.q_head, b), scales.per_head(scales.k_head, b), scales.per_head(scales.v_head, b),
                 scales.per_block(scales.q_block, b, hq, blocks_q), scales.per_block(scales.k_block, b, hkv, blocks_kv),
                 scales.per_block(scales.v_block, b, hkv, blocks_kv),
                 1, hq, hkv, len_q, used[b], d, c.rows_q, c.rows_kv, blocks_q, blocks_kv,
                 c.window_left, c.causal ? 0 : c.window_right, 1.0f / std::sqrt(static_cast<float>(d)), c.softcap};
    o.attention_chunk = c.attention_chunk;
    const std::string why = check_against_oracle(
        o, [&](std::int64_t i) { return double(bf16_bits_to_float(out_h[q_row * hq * d + i])); },
        c.with_lse ? [&](std::int64_t r) {
          // r: (head, query) of this sequence; the kernel's LSE is (batch, hq, max_q) dense, else (hq, total_q).
          const std::int64_t h = r / len_q, i = r % len_q;
          return c.dense_q ? lse_h[(std::int64_t(b) * hq + h) * max_q + i] : lse_h[h * total_q + q_row + i];
        } : std::function<float(std::int64_t)>());
    if (!why.empty()) return "sequence " + std::to_string(b) + ": " + why;
  }
  return "";
}

int log_uniform(std::mt19937_64& rng, int lo, int hi) {
  std::uniform_real_distribution<double> d(std::log(double(lo)), std::log(double(hi) + 1));
  return std::min(hi, static_cast<int>(std::exp(d(rng))));
}

std::string run_case(const Fp8Case& c, std::uint64_t seed) { return run_fp8_case(c, seed); }
std::string run_case(const Fp8VarlenCase& c, std::uint64_t seed) { return run_fp8_varlen_case(c, seed); }

// Runs each case (seeded from `seed` and its index) and reports every one that misses the oracle.
template <class Case>
void expect_cases_match_oracle(const std::vector<Case>& cases, std::uint64_t seed) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string why = run_case(cases[i], splitmix64(seed + i));
    EXPECT_TRUE(why.empty()) << cases[i].describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << why;
  }
}

// A sweep of `count` random cases, make_case(i) the i-th: each one that misses the oracle is reported,
// up to 10 (then the sweep stops), and a summary line printed.
template <class MakeCase>
void expect_random_cases_match_oracle(int count, std::uint64_t seed, MakeCase make_case) {
  std::cout << "[ seed     ] HOPATTN_TEST_SEED=" << seed << std::endl;
  int passed = 0, failed = 0;
  for (int i = 0; i < count && failed < 10; ++i) {
    const auto c = make_case(i);
    const std::string why = run_case(c, splitmix64(seed + i));
    if (why.empty()) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << "case " << i << " (HOPATTN_TEST_SEED=" << seed << "): " << c.describe() << "\n  " << why;
    }
  }
  std::cout << "[ sweep    ] passed " << passed << ", failed " << failed << std::endl;
}

// The draws both random case generators share: mask (causal, a sliding window), softcap, LSE, q's
// amplitude, descales (block descales one case in block_scales_one_in) and the kernel options.
template <class Case>
void draw_mask_scales_and_options(std::mt19937_64& rng, Case& c, int block_scales_one_in) {
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  c.causal = rng() % 2;
  if (rng() % 4 == 0) {  // a sliding window: left, right or both (with causal, a local causal window)
    c.window_left = rng() % 3 != 0 ? int(rng() % 400) : -1;
    if (!c.causal) c.window_right = rng() % 2 ? int(rng() % 200) : -1;
  }
  if (rng() % 6 == 0) c.attention_chunk = 1 + int(rng() % 300);  // chunked attention, on top of the rest
  // A softcap from 1 (nearly every score capped) to 30 (only the peaks of q amplitude 4).
  if (rng() % 4 == 0) c.softcap = std::uniform_real_distribution<float>(1.0f, 30.0f)(rng);
  c.with_lse = rng() % 4 != 0;
  c.q_amplitude = static_cast<float>(pick({1, 2, 4}));
  c.head_scales = rng() % 2;
  c.block_scales = rng() % block_scales_one_in == 0;
  c.rows_q = pick({64, 128, 256});
  c.rows_kv = pick({128, 256});
  if (rng() % 4 == 0) {
    c.options.pingpong = rng() % 2;
    c.options.intra_wg_overlap = rng() % 2;
    c.options.persistent = rng() % 2;
  }
}

Fp8Case random_fp8_case(std::mt19937_64& rng, int forced_q, int forced_k) {
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  Fp8Case c;
  c.batch = 1 + int(rng() % 3);
  c.heads_kv = 1 + int(rng() % 3);
  c.heads_q = c.heads_kv * pick({1, 2, 4});
  c.head_dim = pick({64, 128, 256});
  c.seqlen_q = forced_q > 0 ? forced_q : log_uniform(rng, 1, 3000);
  c.seqlen_k = forced_k > 0 ? forced_k : log_uniform(rng, 1, 3000);
  draw_mask_scales_and_options(rng, c, 2);
  if (rng() % 8 == 0) c.out_pad = 8;  // the O store must leave the padding alone
  // Chunks need v in the ordinary layout (launch_forward_fp8_chunked).
  c.v_keys_contiguous = rng() % 2 && c.attention_chunk == 0;
  c.v_key_pad = c.v_keys_contiguous && rng() % 2 ? 16 * int(1 + rng() % 4) : 0;
  // Keep the oracle's work (one block per query row) bounded; forced lengths stay as given.
  while (double(c.batch) * c.heads_q * c.seqlen_q * c.seqlen_k * c.head_dim > 1.5e9) {
    if (c.batch > 1) --c.batch;
    else if (c.heads_q > c.heads_kv) c.heads_q = c.heads_kv;
    else if (c.heads_kv > 1) c.heads_q = --c.heads_kv;
    else if (forced_q == 0 && c.seqlen_q > 1) c.seqlen_q /= 2;
    else c.seqlen_k /= 2;
  }
  return c;
}

class Fp8Forward : public HopperTest {};

TEST_F(Fp8Forward, RandomConfigurationsMatchTheOracle) {
  const std::uint64_t seed = run_seed();
  std::mt19937_64 rng(seed);
  constexpr int kEdges[] = {1, 63, 65, 127, 129, 257};
  constexpr int kEdgeCount = static_cast<int>(sizeof(kEdges) / sizeof(kEdges[0]));
  expect_random_cases_match_oracle(120, seed, [&](int i) {
    const int fq = i < kEdgeCount ? kEdges[i] : 0;
    const int fk = i >= kEdgeCount && i < 2 * kEdgeCount ? kEdges[i - kEdgeCount] : 0;
    return random_fp8_case(rng, fq, fk);
  });
}

// Fixed corners: every head dim with the tail of a K block, causal with more queries than keys (rows
// that see nothing), MQA, block scales at the smallest supported granularity, sliding windows
// (narrower than a K block, rows whose window holds no key), softcap with and without block scales.
TEST_F(Fp8Forward, CornerCases) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8Case> cases;
  for (int d : {64, 128, 256}) {
    Fp8Case c;
    c.head_dim = d, c.batch = 2, c.heads_q = 4, c.heads_kv = 1, c.seqlen_q = 200, c.seqlen_k = 333;
    c.q_amplitude = 4.0f, c.head_scales = true, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
    cases.push_back(c);
    c.causal = true, c.seqlen_q = 300, c.seqlen_k = 100, c.block_scales = false;
    cases.push_back(c);
    c.seqlen_q = 1, c.seqlen_k = 1, c.causal = false;
    cases.push_back(c);
    c.seqlen_q = 333, c.seqlen_k = 517, c.window_left = 37, c.window_right = 5;
    cases.push_back(c);
    c.window_left = 100, c.window_right = -1, c.causal = true;  // local causal window
    cases.push_back(c);
    c.seqlen_q = 600, c.seqlen_k = 200, c.window_left = 3, c.causal = false, c.window_right = -1;  // empty rows
    cases.push_back(c);
    c.seqlen_q = 259, c.seqlen_k = 391, c.window_left = -1, c.softcap = 2.5f;  // most scores capped
    cases.push_back(c);
    c.block_scales = true, c.causal = true, c.softcap = 12.0f;
    cases.push_back(c);
    c.softcap = 0.0f, c.block_scales = false, c.out_pad = 8;  // the O store must leave the padding alone
    cases.push_back(c);
    // Chunked attention: causal chunks of 100 (a tile spans two), chunks of 7 with a window and block
    // descales, and chunks of 64 where diagonals fall before key 0 (those rows see no key).
    c.out_pad = 0, c.attention_chunk = 100;
    cases.push_back(c);
    c.causal = false, c.attention_chunk = 7, c.window_left = 20, c.block_scales = true;
    cases.push_back(c);
    c.seqlen_q = 500, c.seqlen_k = 300, c.window_left = -1, c.attention_chunk = 64, c.block_scales = false;
    cases.push_back(c);
    c.attention_chunk = 0, c.seqlen_q = 259, c.seqlen_k = 391;
  }
  // 192-row k/v descales at head dim 128: the 192-key block-descale kernel at a short length (also
  // under the device script's sanitizers), v in both layouts; at head dim 64 (ordinary v layout) the
  // same kernel and its grouped form (64-row scales: three descale groups a block).
  Fp8Case c;
  c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.seqlen_q = 200, c.seqlen_k = 533;
  c.block_scales = true, c.rows_q = 64, c.rows_kv = 192;
  cases.push_back(c);
  c.head_dim = 64;
  cases.push_back(c);
  c.rows_kv = 64, c.causal = true;
  cases.push_back(c);
  c.head_dim = 128, c.rows_kv = 192;
  c.v_keys_contiguous = true;
  cases.push_back(c);
  // ... and at head dim 256 the 96-key block-descale kernel (ordinary v layout only), and its grouped
  // form for 128- and 32-row scales (32-key descale groups; at 1111 keys the last block's third group
  // lies past the keys).
  c.head_dim = 256, c.v_keys_contiguous = false;
  cases.push_back(c);
  c.causal = false, c.seqlen_k = 1111, c.options.intra_wg_overlap = false;
  cases.push_back(c);
  c.rows_kv = 128;
  cases.push_back(c);
  c.options.intra_wg_overlap = true, c.causal = true;
  cases.push_back(c);
  c.rows_kv = 32, c.seqlen_k = 2100, c.seqlen_q = 70;
  cases.push_back(c);
  expect_cases_match_oracle(cases, seed);
}

// Head dims 128 and 64 switch to 192-key blocks from 2048 keys on (fwd_fp8/traits.cuh): both sides of
// the switch, a partial last block of either width, a last block that is exactly full (8448 = 44 x
// 192), causal, MQA, the kernel options and block descales in 192- and 384-row blocks (128- and 64-row:
// the grouped kernel); each with v in both layouts (keys-contiguous: the 192-key kernel's V^T loads
// and permuted K rows; head dim 64 keeps 128-key blocks there, which take only rows of 128s).
TEST_F(Fp8Forward, LongKeySequencesAcrossTheBlockWidthSwitch) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8Case> cases;
  for (int d : {128, 64}) {
    for (int seqlen_k : {2047, 2048, 8333, 8448}) {
      Fp8Case c;
      c.head_dim = d, c.heads_q = 3, c.heads_kv = 1, c.seqlen_q = 201, c.seqlen_k = seqlen_k;
      c.q_amplitude = 4.0f, c.head_scales = true;
      cases.push_back(c);
      c.causal = true, c.with_lse = false, c.seqlen_q = 77;
      cases.push_back(c);
    }
  }
  Fp8Case c = cases.back();
  c.options.pingpong = false;
  cases.push_back(c);
  c.options.intra_wg_overlap = false;
  cases.push_back(c);
  // Block descales whose k/v rows are whole 64-key descale groups take the 192-key kernel too
  // (fwd_fp8/launch.cuh): 192 or 64 rows at any length, 384 and 128 from 2048 keys on. 128 and 64
  // rows change scale inside a block; at 8300 keys the last block's third group lies past the keys
  // (its entry would be past the descales').
  const Fp8Case first_of_head_dim[] = {cases[0], cases[8]};  // d 128, d 64
  for (const Fp8Case& first : first_of_head_dim) {
    c = first;
    c.block_scales = true, c.rows_q = 64, c.rows_kv = 192;
    cases.push_back(c);
    c.rows_kv = 384, c.seqlen_k = 8333, c.causal = true, c.seqlen_q = 77;
    cases.push_back(c);
    c.rows_kv = 128, c.seqlen_k = 8300;
    cases.push_back(c);
    c.causal = false, c.seqlen_k = 2100, c.seqlen_q = 130;
    cases.push_back(c);
    c.rows_kv = 64, c.seqlen_k = 333, c.options.intra_wg_overlap = false;
    cases.push_back(c);
    c.rows_kv = 192;
    cases.push_back(c);
  }
  const std::size_t key_ordered = cases.size();
  for (std::size_t i = 0; i < key_ordered; ++i) {
    c = cases[i];
    if (c.head_dim == 64 && c.block_scales && c.rows_kv % 128 != 0) continue;  // refused there (above)
    c.v_keys_contiguous = true;
    cases.push_back(c);
  }
  expect_cases_match_oracle(cases, seed);
}

// All-zero v blocks (1, 4, 7, ...) with the scales quantizers write for them: 1 (quantize_fp8's), and
// an amax clamped at 1e-12 over 448 (2^-48.7), far below its neighbours' [1/4, 4]. Their keys keep
// their weight in the row sums, which the output's scale shows (a key left out of l scales every
// output of its row up). The grouped kernels (128- and 64-row scales at head dims 128 and 64 from
// 2048 keys, 128- and 32-row at 256) take such a block's P down by its scale over its neighbour's:
// below 2^-10 their f16 row sums would lose it. The one-group kernels (192-row at 128 and 64, 96-row at 256, and
// the 128-key kernels at 1111 keys) change O's v units to the tiny scale and back.
TEST_F(Fp8Forward, ZeroVBlocksKeepTheirKeysInTheRowSums) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8Case> cases;
  for (float scale : {1.0f, 1e-12f / 448.0f}) {
    for (int d : {128, 256, 64}) {
      for (int rows_kv : {128, d == 256 ? 32 : 64, d == 256 ? 96 : 192}) {
        Fp8Case c;
        c.head_dim = d, c.heads_q = 2, c.heads_kv = 1, c.seqlen_q = 130, c.seqlen_k = 2100;
        c.block_scales = true, c.rows_q = 64, c.rows_kv = rows_kv, c.zero_v_block_scale = scale;
        cases.push_back(c);
        c.causal = true, c.q_amplitude = 4.0f, c.seqlen_k = 1111;
        cases.push_back(c);
      }
    }
  }
  expect_cases_match_oracle(cases, seed);
}

// The tail split (sm90/fwd/split_plan.hpp; the FP8 kernels merge pieces in a second kernel,
// fwd_fp8/split_combine.cuh): one round of tiles and a few more, so the last rounds are cut along the
// keys, at every head dim (d 256 never splits) and both d 128 block widths; explicit pieces;
// single-row decoding over every SM; head descales (the pieces' O carries the v descale, their LSE
// must combine); a softcap; block descales with a softcap (pieces end in different v block scales)
// and alone (that kernel never splits).
TEST_F(Fp8Forward, TailSplitPiecesMergeToTheOracle) {
  const std::uint64_t seed = run_seed();
  const int sms = multiprocessor_count();
  std::vector<Fp8Case> cases;
  for (int d : {64, 128, 256}) {
    for (int seqlen_k : {700, 8333}) {
      if (seqlen_k > 700 && d == 256) continue;  // d 64 and 128 change block width with the keys
      Fp8Case c;
      c.head_dim = d, c.heads_q = 3, c.heads_kv = 1, c.seqlen_k = seqlen_k, c.q_amplitude = 3.0f;
      c.head_scales = true;
      c.seqlen_q = 128 * ((sms + 5) / 3) - 37;  // 3 * ceil(sq / 128) tiles: one round and a few more
      cases.push_back(c);
      c.seqlen_q = 300, c.num_splits = 3, c.with_lse = false;  // 9 tiles in 3 pieces
      cases.push_back(c);
      c.num_splits = 0, c.seqlen_q = 1, c.heads_q = 2, c.with_lse = true;  // decoding
      cases.push_back(c);
    }
  }
  Fp8Case c = cases.front();
  c.softcap = 20.0f, c.num_splits = 4;
  cases.push_back(c);
  c.block_scales = true;
  cases.push_back(c);
  c.softcap = 0.0f;
  cases.push_back(c);
  expect_cases_match_oracle(cases, seed);
}

// v given keys-contiguous (V^T in memory): the kernel loads V^T tiles by TMA and K's rows permuted
// within each 16-key group, except in the K block that reaches the end of the keys, which comes in
// key order and packs P with shuffles (fwd_fp8/fp8_layout.hpp). Key counts around 16-key groups
// (both K maps: two boxes per group for two batches of a length not a multiple of 16, one box per
// block otherwise, including one batch of any length) and 128-key blocks (one block, a partial
// last block, a last block that is exactly full), every head dim, causal and windows (masks over permuted columns), GQA, block scales, softcap, the tail split, and
// the schedules without intra-warpgroup overlap or ping-pong; padded V^T rows whose padding is NaN.
TEST_F(Fp8Forward, KeysContiguousVMatchesTheOracle) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8Case> cases;
  for (int d : {64, 128, 256}) {
    for (int seqlen_k : {1, 15, 17, 128, 333, 1024}) {
      Fp8Case c;
      // One batch at 333 keys: the one-box K map over whole 16-key groups only (20 of them).
      c.head_dim = d, c.batch = seqlen_k == 333 ? 1 : 2, c.heads_q = 4, c.heads_kv = 2, c.seqlen_q = 150;
      c.seqlen_k = seqlen_k;
      c.q_amplitude = 4.0f, c.head_scales = true, c.v_keys_contiguous = true, c.v_key_pad = seqlen_k % 2 ? 0 : 32;
      cases.push_back(c);
    }
    Fp8Case c;
    c.head_dim = d, c.heads_q = 2, c.heads_kv = 1, c.seqlen_q = 333, c.seqlen_k = 517, c.q_amplitude = 4.0f;
    c.v_keys_contiguous = true, c.causal = true;
    cases.push_back(c);
    c.causal = false, c.window_left = 37, c.window_right = 5;
    cases.push_back(c);
    c.window_left = c.window_right = -1, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
    cases.push_back(c);
    c.softcap = 2.5f;
    cases.push_back(c);
    c.block_scales = false, c.softcap = 0.0f, c.options.intra_wg_overlap = false;
    cases.push_back(c);
    c.options.intra_wg_overlap = true, c.options.pingpong = false, c.num_splits = 3;
    cases.push_back(c);
  }
  expect_cases_match_oracle(cases, seed);
}

// Inference engines capture decoding steps in CUDA graphs: a split launch (the forward kernel, the
// combine kernel with its programmatic-serialization launch, the stream-ordered workspace) must
// capture, and its replays must write what a direct call writes, bit for bit; captured before and
// after a direct call (run alone, as scripts/device_tests.sh does, the first capture is the
// process's first call). Decoding with split-KV, and a tail split of the last round.
TEST_F(Fp8Forward, CudaGraphReplayMatchesTheDirectCall) {
  const std::uint64_t seed = run_seed();
  const int sms = multiprocessor_count();
  const DenseExtents shapes[] = {{2, 8, 2, 1, 8333, 128}, {1, 3, 1, 128 * ((sms + 5) / 3) - 37, 700, 64}};
  int index = 0;
  for (const DenseExtents& sh : shapes) {
    const std::int64_t nq = std::int64_t(sh.batch) * sh.seqlen_q * sh.heads_q * sh.head_dim;
    const std::int64_t nkv = std::int64_t(sh.batch) * sh.seqlen_k * sh.heads_kv * sh.head_dim;
    DeviceBuffer q = random_e4m3(nq, splitmix64(seed + index++), 3.0f);
    DeviceBuffer k = random_e4m3(nkv, splitmix64(seed + index++), 1.0f);
    DeviceBuffer v = random_e4m3(nkv, splitmix64(seed + index++), 1.0f);
    DeviceBuffer out(nq * 2), lse(std::int64_t(sh.batch) * sh.heads_q * sh.seqlen_q * 4);
    const FwdArgs args = dense_cuda_args(sh, Dtype::kFloat8E4M3, Dtype::kBFloat16, q.data(), k.data(), v.data(),
                                         out.data(), lse.data());
    for (bool capture_first : {true, false}) {
      const std::string why = graph_replay_mismatch(args, capture_first);
      EXPECT_TRUE(why.empty()) << "b " << sh.batch << " hq " << sh.heads_q << " sq " << sh.seqlen_q << " sk "
                               << sh.seqlen_k << " d " << sh.head_dim << (capture_first ? " captured first" : "")
                               << " (HOPATTN_TEST_SEED=" << seed << "): " << why;
    }
    if (sh.head_dim != 128) continue;
    // 128-row k/v block descales at d 128 over 2048 keys: the grouped 192-key kernel, whose descale
    // plan is computed in stream-ordered scratch memory before it (fwd_fp8/launch.cuh).
    std::mt19937_64 rng(splitmix64(seed + index++));
    const int blocks_kv = (sh.seqlen_k + 127) / 128;
    DeviceBuffer k_block = random_scales(std::int64_t(sh.batch) * sh.heads_kv * blocks_kv, rng, 0.25f, 2.0f);
    DeviceBuffer v_block = random_v_block_scales(std::int64_t(sh.batch) * sh.heads_kv * blocks_kv, rng);
    FwdArgs blocked = args;
    blocked.k_block_descale =
        make_tensor(k_block.data(), Dtype::kFloat32, {sh.batch, sh.heads_kv, blocks_kv}, DeviceType::kCuda);
    blocked.v_block_descale =
        make_tensor(v_block.data(), Dtype::kFloat32, {sh.batch, sh.heads_kv, blocks_kv}, DeviceType::kCuda);
    for (bool capture_first : {true, false}) {
      const std::string why = graph_replay_mismatch(blocked, capture_first);
      EXPECT_TRUE(why.empty()) << "128-row k/v block descales, sk " << sh.seqlen_k
                               << (capture_first ? " captured first" : "") << " (HOPATTN_TEST_SEED=" << seed
                               << "): " << why;
    }
  }
}

Fp8VarlenCase random_fp8_varlen_case(std::mt19937_64& rng) {
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  Fp8VarlenCase c;
  const int batch = 1 + int(rng() % 5);
  const bool seqused = rng() % 2;
  for (int b = 0; b < batch; ++b) {
    c.lens_q.push_back(rng() % 10 == 0 ? 0 : log_uniform(rng, 1, 1200));
    c.lens_k.push_back(log_uniform(rng, 1, 3000));
    if (seqused) c.used_k.push_back(int(rng() % (c.lens_k.back() + 1)));
  }
  c.heads_kv = 1 + int(rng() % 2);
  c.heads_q = c.heads_kv * pick({1, 2, 4});
  c.head_dim = pick({64, 128, 256});
  draw_mask_scales_and_options(rng, c, 3);
  // GQA packing: by default where it saves tiles (few query rows), forced on (head dims up to 128,
  // no q block descale: what packs), or off.
  const int pack = int(rng() % 4);
  if (pack == 1 && c.head_dim <= 128 && !c.block_scales) c.options.pack_gqa = KernelOptions::PackGqa::kOn;
  if (pack == 2) c.options.pack_gqa = KernelOptions::PackGqa::kOff;
  c.num_splits = pick({0, 0, 1, 3});
  if (rng() % 4 == 0) c.page_size = pick({16, 32, 64, 128, 256});
  // Keep the oracle's work bounded.
  const auto work = [&] {
    double w = 0;
    for (int b = 0; b < batch; ++b) w += double(c.lens_q[b]) * c.lens_k[b];
    return w * c.heads_q * c.head_dim;
  };
  while (work() > 1.5e9) {
    for (int b = 0; b < batch; ++b) c.lens_q[b] /= 2;
  }
  // At least one query row: CUDA tensors must not be empty (validation refuses them).
  if (*std::max_element(c.lens_q.begin(), c.lens_q.end()) == 0) c.lens_q[0] = 1;
  // Neither chunks nor seqused_q at d 256 with variable lengths (launch_forward_fp8_chunks_seqused_q).
  if (c.head_dim == 256) c.attention_chunk = 0;
  if (c.head_dim != 256 && rng() % 5 == 0)  // seqused_q: the queries in use, none to all
    for (int len : c.lens_q) c.used_q.push_back(int(rng() % (len + 1)));
  return c;
}

// Variable-length batches (cu_seqlens_q / cu_seqlens_k / seqused_k / seqused_q) against the oracle run
// on each sequence alone: random lengths (empty query sequences, keys and queries in use from none to
// all, the unused rows NaN), every head dim, masks, softcap, GQA, per-head and per-block descales, the kernel options.
TEST_F(Fp8Forward, VariableLengthBatchesMatchTheOracle) {
  const std::uint64_t seed = run_seed();
  std::mt19937_64 rng(seed);
  expect_random_cases_match_oracle(40, seed, [&](int) { return random_fp8_varlen_case(rng); });
}

// Fixed corners of the variable-length kernels: per head dim, a sequence of one query, one with no key
// in use and ragged ones (the NaN rows past seqused_k in a last block's V, which the transposers zero);
// causal with more queries than keys; decoding steps over caches with seqused_k; d 128 from 2048 keys
// (192-key blocks), with and without block descales; q or k/v dense beside the other packed; a softcap
// and a window; the schedules without overlap, ping-pong or the persistent hand-out; GQA packing (by
// default in decoding steps, forced on for longer queries and a dense batch, with a window, softcap,
// MQA, and off; not over q block descales); split pieces merged by the combine kernel (decoding steps
// by default, explicit counts over longer queries, with block descales and a softcap: pieces that end
// in different v block scales); paged caches of 16-256 keys a page (d 128 past 2048 keys: pages take
// 128-key blocks, never the 192-key ones).
TEST_F(Fp8Forward, VariableLengthCornerCases) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  for (int d : {64, 128, 256}) {
    Fp8VarlenCase c;
    c.head_dim = d, c.lens_q = {1, 200, 77}, c.lens_k = {333, 1, 700}, c.used_k = {300, 0, 517};
    c.q_amplitude = 4.0f;
    cases.push_back(c);
    c.causal = true, c.lens_q = {300, 129, 64}, c.lens_k = {100, 129, 65}, c.used_k = {};
    cases.push_back(c);
    c.causal = false, c.lens_q = {1, 1, 1, 1}, c.lens_k = {1000, 1000, 1000, 1000}, c.used_k = {1, 999, 128, 0};
    c.dense_q = c.dense_k = true;  // a decoding step over a dense cache with seqused_k
    cases.push_back(c);
    c.dense_q = c.dense_k = false, c.lens_q = {259, 0, 130}, c.lens_k = {391, 17, 260}, c.used_k = {};
    c.softcap = 2.5f, c.window_left = 37, c.window_right = 5;
    cases.push_back(c);
    c.softcap = 0.0f, c.window_left = c.window_right = -1, c.block_scales = true, c.rows_q = 64;
    cases.push_back(c);
  }
  for (int d : {64, 128}) {  // seqused_q: none, one, a block edge, all (d 256: refused)
    Fp8VarlenCase c;
    c.head_dim = d, c.causal = true, c.lens_q = {200, 129, 64, 7}, c.lens_k = {300, 129, 64, 7};
    c.used_q = {129, 0, 63, 7};
    cases.push_back(c);
    c.causal = false, c.dense_q = c.dense_k = true, c.lens_q = {4, 4}, c.lens_k = {900, 900}, c.used_q = {1, 3};
    c.used_k = {899, 64}, c.block_scales = true, c.rows_q = 64;
    cases.push_back(c);
  }
  Fp8VarlenCase c;
  c.lens_q = {201, 5, 64}, c.lens_k = {2500, 100, 4000}, c.used_k = {2311, 100, 3999};
  cases.push_back(c);
  c.causal = true, c.block_scales = true, c.rows_q = 64, c.rows_kv = 192;
  cases.push_back(c);
  c.head_dim = 64;  // the 192-key one-group block-descale kernel at d 64 too (v134)
  cases.push_back(c);
  c.head_dim = 128, c.rows_kv = 128, c.options.intra_wg_overlap = false;
  cases.push_back(c);
  c.options.intra_wg_overlap = true, c.options.pingpong = false, c.options.persistent = false, c.block_scales = false;
  cases.push_back(c);
  c = Fp8VarlenCase{};
  c.lens_q = {150, 150}, c.dense_q = true, c.lens_k = {700, 33}, c.causal = true;  // dense q, packed k/v
  cases.push_back(c);
  c.dense_q = false, c.lens_q = {150, 7}, c.lens_k = {700, 700}, c.dense_k = true, c.used_k = {650, 700};
  cases.push_back(c);
  for (int d : {64, 128}) {
    c = Fp8VarlenCase{};
    c.head_dim = d, c.heads_q = 8, c.heads_kv = 2, c.q_amplitude = 4.0f;
    c.lens_q = {1, 1, 1}, c.lens_k = {3000, 700, 129}, c.used_k = {2999, 1, 128};  // decoding: packs by default
    cases.push_back(c);
    // Warpgroup 1 of a decoding tile has no live row (mainloop_idle), under either mainloop and without
    // ping-pong turns.
    c.options.intra_wg_overlap = false;
    cases.push_back(c);
    c.options.intra_wg_overlap = true, c.options.pingpong = false;
    cases.push_back(c);
    c.options.pingpong = true;
    c.lens_q = {4, 2, 3}, c.causal = true, c.options.pack_gqa = KernelOptions::PackGqa::kOn;  // speculative rows
    cases.push_back(c);
    c.lens_q = {77, 200, 1}, c.lens_k = {500, 333, 64}, c.used_k = {}, c.causal = false;  // 32 query rows a tile
    c.window_left = 50, c.window_right = 3, c.softcap = 5.0f;
    cases.push_back(c);
    c.window_left = c.window_right = -1, c.softcap = 0.0f, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
    c.lens_q = {2, 1, 1}, c.options.pack_gqa = KernelOptions::PackGqa::kAuto;  // q block descales: never packed
    cases.push_back(c);
    c.block_scales = false, c.heads_q = 32, c.heads_kv = 1, c.options.pack_gqa = KernelOptions::PackGqa::kOn;  // MQA
    c.lens_q = {3, 1}, c.lens_k = {900, 900}, c.dense_q = false, c.dense_k = true;
    cases.push_back(c);
    c.lens_q = {1, 1}, c.dense_q = true;  // a dense FP8 batch packed on request (the variable-length kernels)
    cases.push_back(c);
    c.options.pack_gqa = KernelOptions::PackGqa::kOff, c.used_k = {17, 900};
    cases.push_back(c);
    c = Fp8VarlenCase{};
    c.head_dim = d, c.heads_q = 8, c.heads_kv = 2, c.lens_q = {1, 1}, c.lens_k = {5000, 333}, c.used_k = {4999, 200};
    c.num_splits = 7;  // explicit pieces of a decoding step
    cases.push_back(c);
    c.lens_q = {150, 20, 3}, c.lens_k = {900, 1000, 5}, c.used_k = {}, c.num_splits = 3, c.causal = true;
    cases.push_back(c);
    c.causal = false, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128, c.softcap = 10.0f, c.num_splits = 4;
    cases.push_back(c);
  }
  for (int d : {64, 128, 256}) {
    for (int page_size : {16, 64, 256}) {
      c = Fp8VarlenCase{};
      c.head_dim = d, c.heads_q = 8, c.heads_kv = 2, c.page_size = page_size, c.q_amplitude = 3.0f;
      c.lens_q = {1, 1, 1}, c.lens_k = {900, 900, 900}, c.used_k = {899, 1, 300};  // decoding
      cases.push_back(c);
      c.lens_q = {77, 200}, c.lens_k = {333, 517}, c.used_k = {333, 400}, c.causal = true;  // chunked prefill
      c.block_scales = page_size == 64, c.rows_q = 64, c.rows_kv = 128;
      cases.push_back(c);
    }
  }
  c = Fp8VarlenCase{};
  c.page_size = 64, c.lens_q = {100, 1}, c.lens_k = {2600, 2600}, c.used_k = {2600, 2100};  // past 2048 keys
  cases.push_back(c);
  expect_cases_match_oracle(cases, seed);
}

// Tiles of at most 8 live rows run transposed in the d 64 decoding kernels
// (fwd_fp8/transposed_decode.cuh), tiles of 9 or more the ordinary loop; d 128 runs the same shapes
// through the ordinary loop alone. Batches with tiles of exactly 8 and 9 rows side by side
// (transposed_decode_shapes.cuh, the 16-bit suite's too), caches of 1 key to several blocks with
// ragged ends (2500 keys take 192-key blocks but when paged, block-scaled or softcapped), split or not,
// causal, windowed, softcapped, per-block k/v scales (whose v scale changes between a tile's blocks),
// paged, and the schedules without overlap or ping-pong.
TEST_F(Fp8Forward, TransposedDecodeCornerCases) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  int index = 0;
  for (const TransposedDecodeShape& shape : transposed_decode_shapes()) {
    for (const int d : {64, 128}) {
      for (const int num_splits : {0, 3}) {
        Fp8VarlenCase c;
        c.head_dim = d, c.heads_q = shape.heads_q, c.heads_kv = shape.heads_kv, c.lens_q = shape.len_q;
        c.lens_k = {2500, 1, 193, 1100}, c.used_k = {2499, 1, 193, 1000};
        c.options.pack_gqa = shape.pack;
        c.num_splits = num_splits;
        c.q_amplitude = 4.0f;
        c.causal = index % 3 == 0;
        if (index % 4 == 1) c.window_left = 300, c.window_right = 0;
        if (index % 5 == 3) c.softcap = 15.0f;
        if (index % 6 == 2) c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
        if (index % 7 == 4) c.page_size = index % 2 == 0 ? 16 : 256;
        if (index % 8 == 5) c.options.intra_wg_overlap = false;
        if (index % 8 == 6) c.options.pingpong = false;
        cases.push_back(c);
        ++index;
      }
    }
  }
  expect_cases_match_oracle(cases, seed);
}

// The transposed loop on small shapes, for compute-sanitizer (scripts/device_tests.sh): tiles of 8
// live rows and of 1, split and not, a softcap, block scales, a page size, 192-key blocks (2100 keys);
// d 128 (the ordinary loop) beside them.
TEST_F(Fp8Forward, TransposedDecodeSmall) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  for (const int d : {64, 128}) {
    Fp8VarlenCase c;
    c.head_dim = d, c.heads_q = 8, c.heads_kv = 1, c.lens_q = {1, 1}, c.lens_k = {300, 5}, c.num_splits = 2;
    cases.push_back(c);
    c.heads_kv = 8, c.num_splits = 1, c.softcap = 5.0f, c.causal = true;  // MHA: one live row a tile
    cases.push_back(c);
    c.softcap = 0.0f, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128, c.page_size = d == 64 ? 16 : 0;
    cases.push_back(c);
    c.heads_kv = 2, c.block_scales = false, c.page_size = 0, c.lens_k = {2100, 40}, c.num_splits = 0;
    cases.push_back(c);
  }
  expect_cases_match_oracle(cases, seed);
}

// Keys-contiguous v (V^T in memory) is a dense-only layout: with cu_seqlens_q the kernel refuses it,
// naming what it takes, before anything is written.
TEST_F(Fp8Forward, KeysContiguousVWithVariableLengthsIsUnsupported) {
  const int batch = 2, sq = 70, sk = 100, h = 2, d = 128;
  DeviceBuffer q = random_e4m3(std::int64_t(batch) * sq * h * d, run_seed(), 1.0f);
  DeviceBuffer k = random_e4m3(std::int64_t(batch) * sk * h * d, run_seed() + 1, 1.0f);
  DeviceBuffer vt = keys_contiguous_copy(k, batch, sk, h, d, sk + 12);
  DeviceBuffer out(std::int64_t(batch) * sq * h * d * 2);
  poison_nan(out.data(), Dtype::kBFloat16, std::int64_t(batch) * sq * h * d);
  const DeviceBuffer cu_q = upload(std::vector<int>{0, sq, 2 * sq});
  FwdArgs args;
  args.q = make_tensor(q.data(), Dtype::kFloat8E4M3, {batch * sq, h, d}, DeviceType::kCuda);
  args.k = make_tensor(k.data(), Dtype::kFloat8E4M3, {batch, sk, h, d}, DeviceType::kCuda);
  const std::int64_t strides[4] = {std::int64_t(h) * d * (sk + 12), 1, std::int64_t(d) * (sk + 12), sk + 12};
  args.v = strided_tensor(vt.data(), Dtype::kFloat8E4M3, {batch, sk, h, d}, strides);
  args.out = make_tensor(out.data(), Dtype::kBFloat16, {batch * sq, h, d}, DeviceType::kCuda);
  args.cu_seqlens_q = make_tensor(cu_q.data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
  args.max_seqlen_q = sq;
  const Status status = forward(args);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.message();
  EXPECT_NE(status.message().find("keys-contiguous"), std::string::npos) << status.message();
  EXPECT_EQ(count_unpoisoned(out.data(), Dtype::kBFloat16, std::int64_t(batch) * sq * h * d), 0) << "out written";
}

// Chunks and seqused_q run in kernels of their own (launch_forward_fp8_chunks_seqused_q), which take v in
// the ordinary layout, and at head dim 256 dense batches only (the d 256 variable-length kernel spilled
// with chunks and seqused_q): refused, naming the argument and what takes it.
TEST_F(Fp8Forward, ChunksOrSequsedQWithKeysContiguousVOrD256VariableLengthsAreRefused) {
  for (int d : {64, 256}) {
    Fp8Case dense;  // lengths past the chunk: a chunk that masks nothing is turned off before the kernels
    dense.head_dim = d, dense.seqlen_q = 100, dense.seqlen_k = 200, dense.attention_chunk = 64;
    dense.v_keys_contiguous = true;
    const std::string why = run_fp8_case(dense, run_seed());
    EXPECT_NE(why.find("attention_chunk"), std::string::npos) << why;
    EXPECT_NE(why.find("head dim contiguous"), std::string::npos) << why;
  }
  Fp8VarlenCase varlen;
  varlen.head_dim = 256, varlen.lens_q = {70, 30}, varlen.lens_k = {100, 50}, varlen.attention_chunk = 64;
  std::string why = run_fp8_varlen_case(varlen, run_seed());
  EXPECT_NE(why.find("attention_chunk"), std::string::npos) << why;
  EXPECT_NE(why.find("dense batches"), std::string::npos) << why;
  varlen.attention_chunk = 0, varlen.used_q = {50, 30};
  why = run_fp8_varlen_case(varlen, run_seed());
  EXPECT_NE(why.find("seqused_q"), std::string::npos) << why;
  EXPECT_NE(why.find("at d 64 and 128"), std::string::npos) << why;
}

TEST_F(Fp8Forward, UnsupportedBlockGranularityIsRefusedNotMiscomputed) {
  Fp8Case c;
  c.block_scales = true, c.rows_q = 32;  // the kernel needs multiples of 64
  std::string why = run_fp8_case(c, run_seed());
  EXPECT_NE(why.find("not supported"), std::string::npos) << why;
  // k/v rows: at head dim 128 multiples of 64 (the 192-key kernel's descale groups), not of 32.
  c.head_dim = 128, c.rows_q = 64, c.rows_kv = 32;
  why = run_fp8_case(c, run_seed());
  EXPECT_NE(why.find("not supported"), std::string::npos) << why;
}

}  // namespace
}  // namespace hopattn::test
