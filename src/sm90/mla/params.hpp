// Everything the MLA forward kernel (qv: DeepSeek's multi-head latent attention with the projections
// absorbed) needs besides K's and V's tensor maps; built by mla/launch.cuh from the validated Problem.
#pragma once

#include <cstdint>

#include "sm90/tile/fast_divisor.hpp"

namespace hopattn::sm90 {

// One (batch, seqlen, heads, dim) tensor of 16-bit elements as the kernel addresses it (strides in
// elements): q and qv, read, and out, written.
struct MlaRows {
  void* data;
  std::int64_t batch_stride, row_stride, head_stride;
};

struct MlaParams {
  int batch;
  int heads_kv;
  int head_ratio;  // query heads per K/V head
  int seqlen_q;
  int seqlen_k;  // dense: k's rows; paged: pages_per_seq * page_size
  // A tile is 64 packed rows of one K/V head: packed row P is query row P / head_ratio of query head
  // kv_head * head_ratio + P % head_ratio, so a decoding step's query heads share one K/V stream.
  int packed_rows;  // seqlen_q * head_ratio
  int m_blocks;     // tiles per (batch, K/V head)
  FastDivisor head_ratio_divisor;
  // Split-KV: each tile's key blocks go to `splits` CTAs, blocks_per_split each; their normalized
  // partial O and LSE go to partial_o / partial_lse and a combine kernel (mla/combine.cuh) merges them.
  int splits;
  int blocks_per_split;
  float* partial_o;    // [tile][split][64 rows][512] float, tile = (batch * heads_kv + kv_head) * m_blocks + m
  float* partial_lse;  // [tile][split][64 rows], natural log; -inf for a row that saw no key
  float scale_log2;    // softmax_scale * log2(e)
  bool causal;         // bottom-right aligned: query row i sees keys up to i + seqlen_k - seqlen_q
  const int* seqused_k;  // per batch entry, or nullptr: seqlen_k keys
  // Paged cache (k, v: (num_pages, page_size, heads_kv, d)): key j of batch entry b is row j % page_size
  // of page page_table[b * page_table_batch_stride + j / page_size * page_table_page_stride]. nullptr:
  // dense k, v.
  const int* page_table;
  std::int64_t page_table_batch_stride, page_table_page_stride;
  int page_size;
  MlaRows q, qv, out;
  float* lse;  // (batch, heads_q, seqlen_q) at these strides, or nullptr
  std::int64_t lse_batch_stride, lse_head_stride, lse_row_stride;
};

}  // namespace hopattn::sm90
