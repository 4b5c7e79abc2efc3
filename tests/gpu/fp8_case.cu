// The FP8 forward cases (fp8_case.cuh): their random e4m3 inputs and descales, the calls to
// hopattn::forward (dense, variable-length, paged), each judged by the oracle (fp8_oracle.cuh), and the
// random case generators.
#include "gpu/fp8_case.cuh"

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu/attention_problem.cuh"
#include "gpu/fp8_oracle.cuh"
#include "gpu/gpu_test_util.cuh"
#include "gpu/sequence_checks.cuh"

namespace hopattn::test {
namespace {

__global__ void to_e4m3_kernel(const float* in, std::uint8_t* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = __nv_fp8_e4m3(in[i]).__x;
}

DeviceBuffer device_copy(const std::vector<float>& host) {
  DeviceBuffer d(host.size() * sizeof(float));
  HOPATTN_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

float bf16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t w = std::uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
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

int log_uniform(std::mt19937_64& rng, int lo, int hi) {
  std::uniform_real_distribution<double> d(std::log(double(lo)), std::log(double(hi) + 1));
  return std::min(hi, static_cast<int>(std::exp(d(rng))));
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

// Head dims: one of the kernels' widths (64, 128, 192, 256) in most cases, else a narrower multiple of 16,
// which runs in the next wider kernel (its loads zero-fill the columns past it); and in one case in
// five a v of its own head dim (the kernel of the wider of the two; DeepSeek's 192 / 128 among them).
template <class Case>
void draw_head_dims(std::mt19937_64& rng, Case& c) {
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  c.head_dim = rng() % 4 != 0 ? pick({64, 128, 192, 256}) : pick({16, 48, 80, 96, 112, 144, 160, 208, 240});
  if (rng() % 5 == 0) c.head_dim_v = c.head_dim == 192 && rng() % 2 ? 128 : pick({32, 64, 96, 128, 160, 256});
}

// The widest of a case's head dims: the FP8 kernel's width is the narrowest of 64, 128, 192, 256 that holds it.
template <class Case>
int widest_head_dim(const Case& c) {
  return std::max(c.head_dim, c.head_dim_v);
}

}  // namespace

DeviceBuffer random_e4m3(std::int64_t n, std::uint64_t seed, float amplitude) {
  DeviceBuffer f(n * sizeof(float)), codes(n);
  fill_normal(f.data(), Dtype::kFloat32, n, seed, amplitude);
  to_e4m3_kernel<<<grid_for(n), 256>>>(f.as<float>(), codes.as<std::uint8_t>(), n);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  return codes;
}

DeviceBuffer random_scales(std::int64_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> host(n);
  for (float& x : host) x = dist(rng);
  return device_copy(host);
}

DeviceBuffer random_v_block_scales(std::int64_t n, std::mt19937_64& rng) {
  if (rng() % 2) return random_scales(n, rng, 0.25f, 4.0f);
  std::uniform_int_distribution<int> exponent(-2, 2);
  std::vector<float> host(n);
  for (float& x : host) x = std::ldexp(1.0f, exponent(rng));
  return device_copy(host);
}

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

std::string run_fp8_case(const Fp8Case& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t nq = std::int64_t(c.batch) * c.seqlen_q * c.heads_q * c.head_dim;
  const int dv = c.head_dim_v > 0 ? c.head_dim_v : c.head_dim;
  const std::int64_t nkv = std::int64_t(c.batch) * c.seqlen_k * c.heads_kv * c.head_dim;
  const std::int64_t nv = nkv / c.head_dim * dv;
  const std::int64_t nlse = std::int64_t(c.batch) * c.heads_q * c.seqlen_q;
  const int blocks_q = (c.seqlen_q + c.rows_q - 1) / c.rows_q, blocks_kv = (c.seqlen_k + c.rows_kv - 1) / c.rows_kv;
  DeviceBuffer q = random_e4m3(nq, rng(), c.q_amplitude), k = random_e4m3(nkv, rng(), 1.0f),
               v = random_e4m3(nv, rng(), 1.0f);
  Fp8Descales scales(c.batch, c.heads_q, c.heads_kv, blocks_q, blocks_kv, c.head_scales, c.block_scales, rng);
  if (c.zero_v_block_scale > 0.0f && c.block_scales) {
    zero_v_blocks(v, scales.v_block, c.batch, c.seqlen_k, c.heads_kv, dv, c.rows_kv, blocks_kv,
                  c.zero_v_block_scale);
  }
  // out: (b, sq, hq, dv) in rows of dv + out_pad elements; the padding must stay poisoned.
  const int out_row = dv + c.out_pad;
  const std::int64_t nout = nq / c.head_dim * out_row;
  const std::int64_t nout_view = nq / c.head_dim * dv;
  DeviceBuffer out(nout * 2), lse(nlse * 4);
  poison_nan(out.data(), Dtype::kBFloat16, nout);
  poison_nan(lse.data(), Dtype::kFloat32, nlse);

  FwdArgs args;
  args.q = make_tensor(q.data(), Dtype::kFloat8E4M3, {c.batch, c.seqlen_q, c.heads_q, c.head_dim}, DeviceType::kCuda);
  args.k = make_tensor(k.data(), Dtype::kFloat8E4M3, {c.batch, c.seqlen_k, c.heads_kv, c.head_dim}, DeviceType::kCuda);
  args.v = make_tensor(v.data(), Dtype::kFloat8E4M3, {c.batch, c.seqlen_k, c.heads_kv, dv}, DeviceType::kCuda);
  DeviceBuffer v_keys_contiguous;
  if (c.v_keys_contiguous) {
    const int row_keys = (c.seqlen_k + 15) / 16 * 16 + c.v_key_pad;
    v_keys_contiguous = keys_contiguous_copy(v, c.batch, c.seqlen_k, c.heads_kv, dv, row_keys);
    const std::int64_t strides[4] = {std::int64_t(c.heads_kv) * dv * row_keys, 1, std::int64_t(dv) * row_keys,
                                     row_keys};
    args.v = strided_tensor(v_keys_contiguous.data(), Dtype::kFloat8E4M3, {c.batch, c.seqlen_k, c.heads_kv, dv},
                            strides);
  }
  const std::int64_t out_strides[4] = {std::int64_t(c.seqlen_q) * c.heads_q * out_row,
                                       std::int64_t(c.heads_q) * out_row, out_row, 1};
  args.out = strided_tensor(out.data(), Dtype::kBFloat16, {c.batch, c.seqlen_q, c.heads_q, dv}, out_strides);
  if (c.with_lse) args.lse = make_tensor(lse.data(), Dtype::kFloat32, {c.batch, c.heads_q, c.seqlen_q}, DeviceType::kCuda);
  scales.attach(args, c.rows_q, c.rows_kv);
  set_mask_and_options(args, c);
  const Status status = forward(args);
  if (!status.ok()) return "forward failed: " + status.message();
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  if (count_unpoisoned(out.data(), Dtype::kBFloat16, nout) != nout_view)
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
  o.dv = dv;
  const auto out_h = out.to_host<std::uint16_t>();
  const auto lse_h = lse.to_host<float>();
  return check_against_oracle(
      o, [&](std::int64_t i) { return double(bf16_bits_to_float(out_h[i / dv * out_row + i % dv])); },
      c.with_lse ? [&](std::int64_t row) { return lse_h[row]; } : std::function<float(std::int64_t)>());
}

std::string run_fp8_varlen_case(const Fp8VarlenCase& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int batch = static_cast<int>(c.lens_q.size()), hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const int dv = c.head_dim_v > 0 ? c.head_dim_v : d;
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
  DeviceBuffer v = random_e4m3(std::int64_t(total_k) * hkv * dv, rng(), 1.0f);
  for (int b = 0; b < batch; ++b) {  // the rows past the keys in use: e4m3 NaN
    const std::size_t unused = std::size_t(c.lens_k[b] - used[b]), first = std::size_t(starts_k[b] + used[b]);
    HOPATTN_CUDA_CHECK(cudaMemset(k.as<std::uint8_t>() + first * hkv * d, 0x7f, unused * hkv * d));
    HOPATTN_CUDA_CHECK(cudaMemset(v.as<std::uint8_t>() + first * hkv * dv, 0x7f, unused * hkv * dv));
    const std::size_t q_row_bytes = std::size_t(hq) * d;  // and the query rows past those in use
    HOPATTN_CUDA_CHECK(cudaMemset(q.as<std::uint8_t>() + (starts_q[b] + used_q[b]) * q_row_bytes, 0x7f,
                                  (c.lens_q[b] - used_q[b]) * q_row_bytes));
  }
  const Fp8Descales scales(batch, hq, hkv, blocks_q, blocks_kv, c.head_scales, c.block_scales, rng);
  const std::int64_t nout = std::int64_t(total_q) * hq * dv, nlse = std::int64_t(total_q) * hq;
  DeviceBuffer out(nout * 2), lse(nlse * 4);
  poison_nan(out.data(), Dtype::kBFloat16, nout);
  poison_nan(lse.data(), Dtype::kFloat32, nlse);
  const DeviceBuffer cu_q = upload(starts_q), cu_k = upload(starts_k);

  FwdArgs args;
  const auto rows = [&](const DeviceBuffer& x, Dtype dtype, int total, int heads, bool dense, int len, int cols) {
    return dense ? make_tensor(x.data(), dtype, {batch, len, heads, cols}, DeviceType::kCuda)
                 : make_tensor(x.data(), dtype, {total, heads, cols}, DeviceType::kCuda);
  };
  args.q = rows(q, Dtype::kFloat8E4M3, total_q, hq, c.dense_q, max_q, d);
  args.k = rows(k, Dtype::kFloat8E4M3, total_k, hkv, c.dense_k, max_k, d);
  args.v = rows(v, Dtype::kFloat8E4M3, total_k, hkv, c.dense_k, max_k, dv);
  DeviceBuffer k_pages, v_pages, page_table;
  if (c.page_size > 0) {
    const int num_pages = batch * pages_per_seq + 3;
    std::vector<int> order(num_pages), table(std::size_t(batch) * pages_per_seq);
    for (int i = 0; i < num_pages; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = order[i];
    const auto paged = [&](const DeviceBuffer& rows_buffer, int cols) {
      const std::size_t row_bytes = std::size_t(hkv) * cols;
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
    k_pages = paged(k, d), v_pages = paged(v, dv), page_table = upload(table);
    args.k = make_tensor(k_pages.data(), Dtype::kFloat8E4M3, {num_pages, c.page_size, hkv, d}, DeviceType::kCuda);
    args.v = make_tensor(v_pages.data(), Dtype::kFloat8E4M3, {num_pages, c.page_size, hkv, dv}, DeviceType::kCuda);
    args.page_table = make_tensor(page_table.data(), Dtype::kInt32, {batch, pages_per_seq}, DeviceType::kCuda);
  }
  args.out = rows(out, Dtype::kBFloat16, total_q, hq, c.dense_q, max_q, dv);
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
  if (count_unpoisoned(out.data(), Dtype::kBFloat16, nout) != rows_used * dv) return "out not written exactly";
  if (c.with_lse && count_unpoisoned(lse.data(), Dtype::kFloat32, nlse) != rows_used)
    return "lse not written exactly";

  const auto out_h = out.to_host<std::uint16_t>();
  const auto lse_h = lse.to_host<float>();
  for (int b = 0; b < batch; ++b) {
    const int len_q = used_q[b];
    if (len_q == 0) continue;
    const std::size_t q_row = starts_q[b], k_row = starts_k[b];
    OracleArgs o{q.as<std::uint8_t>() + q_row * hq * d, k.as<std::uint8_t>() + k_row * hkv * d,
                 v.as<std::uint8_t>() + k_row * hkv * dv,
                 scales.per_head(scales.q_head, b), scales.per_head(scales.k_head, b), scales.per_head(scales.v_head, b),
                 scales.per_block(scales.q_block, b, hq, blocks_q), scales.per_block(scales.k_block, b, hkv, blocks_kv),
                 scales.per_block(scales.v_block, b, hkv, blocks_kv),
                 1, hq, hkv, len_q, used[b], d, c.rows_q, c.rows_kv, blocks_q, blocks_kv,
                 c.window_left, c.causal ? 0 : c.window_right, 1.0f / std::sqrt(static_cast<float>(d)), c.softcap};
    o.attention_chunk = c.attention_chunk;
    o.dv = dv;
    const std::string why = check_against_oracle(
        o, [&](std::int64_t i) { return double(bf16_bits_to_float(out_h[q_row * hq * dv + i])); },
        c.with_lse ? [&](std::int64_t r) {
          // r: (head, query) of this sequence; the kernel's LSE is (batch, hq, max_q) dense, else (hq, total_q).
          const std::int64_t h = r / len_q, i = r % len_q;
          return c.dense_q ? lse_h[(std::int64_t(b) * hq + h) * max_q + i] : lse_h[h * total_q + q_row + i];
        } : std::function<float(std::int64_t)>());
    if (!why.empty()) return "sequence " + std::to_string(b) + ": " + why;
  }
  return "";
}

Fp8Case random_fp8_case(std::mt19937_64& rng, int forced_q, int forced_k) {
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  Fp8Case c;
  c.batch = 1 + int(rng() % 3);
  c.heads_kv = 1 + int(rng() % 3);
  c.heads_q = c.heads_kv * pick({1, 2, 4});
  draw_head_dims(rng, c);
  c.seqlen_q = forced_q > 0 ? forced_q : log_uniform(rng, 1, 3000);
  c.seqlen_k = forced_k > 0 ? forced_k : log_uniform(rng, 1, 3000);
  draw_mask_scales_and_options(rng, c, 2);
  if (rng() % 8 == 0) c.out_pad = 8;  // the O store must leave the padding alone
  // Chunks need v in the ordinary layout (launch_forward_fp8_chunked).
  c.v_keys_contiguous = rng() % 2 && c.attention_chunk == 0;
  c.v_key_pad = c.v_keys_contiguous && rng() % 2 ? 16 * int(1 + rng() % 4) : 0;
  // Keep the oracle's work (one block per query row) bounded; forced lengths stay as given.
  while (double(c.batch) * c.heads_q * c.seqlen_q * c.seqlen_k * widest_head_dim(c) > 1.5e9) {
    if (c.batch > 1) --c.batch;
    else if (c.heads_q > c.heads_kv) c.heads_q = c.heads_kv;
    else if (c.heads_kv > 1) c.heads_q = --c.heads_kv;
    else if (forced_q == 0 && c.seqlen_q > 1) c.seqlen_q /= 2;
    else c.seqlen_k /= 2;
  }
  return c;
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
  draw_head_dims(rng, c);
  draw_mask_scales_and_options(rng, c, 3);
  // GQA packing: by default where it saves tiles (few query rows), forced on (head dims up to 128,
  // no q block descale: what packs), or off.
  const int pack = int(rng() % 4);
  if (pack == 1 && widest_head_dim(c) <= 128 && !c.block_scales) c.options.pack_gqa = KernelOptions::PackGqa::kOn;
  if (pack == 2) c.options.pack_gqa = KernelOptions::PackGqa::kOff;
  c.num_splits = pick({0, 0, 1, 3});
  if (rng() % 4 == 0) c.page_size = pick({16, 32, 64, 128, 256});
  // Keep the oracle's work bounded.
  const auto work = [&] {
    double w = 0;
    for (int b = 0; b < batch; ++b) w += double(c.lens_q[b]) * c.lens_k[b];
    return w * c.heads_q * widest_head_dim(c);
  };
  while (work() > 1.5e9) {
    for (int b = 0; b < batch; ++b) c.lens_q[b] /= 2;
  }
  // At least one query row: CUDA tensors must not be empty (validation refuses them).
  if (*std::max_element(c.lens_q.begin(), c.lens_q.end()) == 0) c.lens_q[0] = 1;
  // Neither chunks nor seqused_q in the 192- or 256-wide kernels with variable lengths
  // (launch_forward_fp8_chunks_seqused_q).
  if (widest_head_dim(c) > 128) c.attention_chunk = 0;
  if (widest_head_dim(c) <= 128 && rng() % 5 == 0)  // seqused_q: the queries in use, none to all
    for (int len : c.lens_q) c.used_q.push_back(int(rng() % (len + 1)));
  return c;
}

}  // namespace hopattn::test
