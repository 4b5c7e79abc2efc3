// Host-side construction of BwdParams from a validated problem (every field but the workspace
// pointers, which the launch sets once it has the memory), and the size of the per-row workspaces.
// Plain C++ (no CUDA runtime) so that the CPU tests can check what a launch would pass
// (tests/cpu/test_bwd_params_varlen.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "api/problem.hpp"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/workspace_blocks.hpp"
#include "sm90/host/int_array.hpp"

namespace hopattn::sm90 {

template <int kBlockM>
BwdParams make_bwd_params(const BwdArgs& a, const detail::Problem& pr) {
  BwdParams p{};
  p.batch = pr.batch;
  p.heads_q = pr.heads_q;
  p.heads_kv = pr.heads_kv;
  p.head_ratio = pr.heads_q / pr.heads_kv;
  p.seqlen_q = pr.seqlen_q;
  p.seqlen_k = pr.seqlen_k;
  p.head_dim = pr.head_dim;
  p.head_dim_v = pr.head_dim_v;
  constexpr float kLog2e = 1.4426950408889634f;
  p.softcap = pr.softcap;
  p.softcap_input_scale = pr.softcap > 0.0f ? pr.softmax_scale / pr.softcap : 0.0f;
  p.score_scale_log2 = (pr.softcap > 0.0f ? pr.softcap : pr.softmax_scale) * kLog2e;
  p.softmax_scale = pr.softmax_scale;
  p.window_left = pr.window_left;
  p.window_right = pr.window_right;
  p.attention_chunk = pr.attention_chunk;

  // A packed side, (total, heads, d) with an LSE of (heads_q, total_q), is addressed by row from each
  // sequence's first (bwd/sequence.cuh): batch strides 0.
  const int dense_q = pr.varlen_q ? 0 : 1, dense_k = pr.varlen_k ? 0 : 1;
  const auto strides = [](const Tensor& t, int dense, std::int64_t* batch, std::int64_t* row, std::int64_t* head) {
    *batch = dense ? t.stride[0] : 0;
    *row = t.stride[dense];
    *head = t.stride[dense + 1];
  };
  p.out = a.out.data;
  strides(a.out, dense_q, &p.out_batch_stride, &p.out_row_stride, &p.out_head_stride);
  p.dout = a.dout.data;
  strides(a.dout, dense_q, &p.dout_batch_stride, &p.dout_row_stride, &p.dout_head_stride);
  p.lse = static_cast<const float*>(a.lse.data);
  p.lse_batch_stride = dense_q ? a.lse.stride[0] : 0;
  p.lse_head_stride = a.lse.stride[dense_q];
  p.lse_row_stride = a.lse.stride[dense_q + 1];
  if (a.learnable_sink && a.dsink) {
    p.sink = static_cast<const float*>(a.learnable_sink->data);
    p.dsink = static_cast<float*>(a.dsink->data);
  }
  p.dq = a.dq.data;
  strides(a.dq, dense_q, &p.dq_batch_stride, &p.dq_row_stride, &p.dq_head_stride);
  p.dk = a.dk.data;
  strides(a.dk, dense_k, &p.dk_batch_stride, &p.dk_row_stride, &p.dk_head_stride);
  p.dv = a.dv.data;
  strides(a.dv, dense_k, &p.dv_batch_stride, &p.dv_row_stride, &p.dv_head_stride);

  p.cu_seqlens_q = int_array_or_null(a.cu_seqlens_q);
  p.cu_seqlens_k = int_array_or_null(a.cu_seqlens_k);
  p.seqused_k = int_array_or_null(a.seqused_k);
  p.seqused_q = int_array_or_null(a.seqused_q);
  const std::int64_t q_rows = pr.varlen_q ? a.q.shape[0] : std::int64_t(pr.batch) * pr.seqlen_q;
  const std::int64_t q_blocks = packed_q_blocks<kBlockM>(q_rows, pr.batch);
  p.q_blocks_per_head = static_cast<int>(std::min<std::int64_t>(q_blocks, INT32_MAX));  // more: refused
  return p;
}

// Blocks of kBlockM rows in the per-row workspaces (workspace_blocks.hpp): q_blocks_per_head per q
// head. The kernels index blocks with 32-bit ints (a TMA coordinate among them): the launch refuses more.
inline std::int64_t bwd_workspace_blocks(const BwdParams& p) { return std::int64_t(p.heads_q) * p.q_blocks_per_head; }

}  // namespace hopattn::sm90
