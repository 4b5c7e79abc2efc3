// Everything the backward kernels need besides the TMA tensor maps; built on the host by
// src/sm90/bwd/launch.cuh from the validated Problem.
#pragma once

#include <cstdint>

#include "sm90/fwd/attention_chunk.hpp"

namespace hopattn::sm90 {

struct BwdParams {
  int batch;  // sequences
  int heads_q;
  int heads_kv;
  int head_ratio;  // heads_q / heads_kv: the q heads whose gradients a K/V head sums
  int seqlen_q;  // variable lengths: the longest sequence's (max_seqlen_q, max_seqlen_k)
  int seqlen_k;
  // Columns of q and k (and dq, dk), and of v (and out, dout, dv): the kernel's kHeadDim or fewer
  // (backward.cu runs a head dim in the next wider kernel, and q/k and v of different head dims in the
  // kernel of the wider); the row statistics read and the stores write only these.
  int head_dim;
  int head_dim_v;

  // Scores: raw q.k, or t = tanh(q.k * softcap_input_scale) when softcap > 0. P = exp2(score *
  // score_scale_log2 - lse_log2) with score_scale_log2 = softmax_scale * log2(e), or softcap * log2(e).
  float softcap;
  float softcap_input_scale;  // softmax_scale / softcap
  float score_scale_log2;
  float softmax_scale;  // dq and dk are softmax_scale * (dS K) and softmax_scale * (dS^T Q)
  // Visible keys of row i: [i + seqlen_k - seqlen_q - window_left, i + seqlen_k - seqlen_q +
  // window_right], -1 = unbounded on that side (causal is window_right = 0).
  int window_left;
  int window_right;
  int attention_chunk;  // 0 = off; else also only the keys of the diagonal's chunk (fwd/attention_chunk.hpp)

  // Inputs of the row statistics (bwd/row_stats.cuh).
  const void* out;
  std::int64_t out_batch_stride, out_row_stride, out_head_stride;  // elements
  const void* dout;
  std::int64_t dout_batch_stride, dout_row_stride, dout_head_stride;
  const float* lse;
  std::int64_t lse_batch_stride, lse_head_stride, lse_row_stride;
  // BwdArgs::learnable_sink and dsink (sink_grad.cuh), one per q head, contiguous (rank-1 tensors
  // have stride 1); both nullptr when dsink is not asked for.
  const float* sink;
  float* dsink;
  float* sink_partials;  // workspace: kSinkGradParts partial sums per q head (sink_grad.cuh)

  // Workspaces, float32, contiguous. row_stats: per (batch, head, 64-row q block), 64 values of
  // lse * log2(e) (+inf for padding rows, those past the rows the sequence uses, and rows that saw no
  // key: P = 0), then 64 of D_i = sum_c dout_ic out_ic (0 for padding rows): one TMA box per step.
  float* row_stats;
  float* dq_accum;     // dS K summed over key blocks by bulk reductions (zeroed before the main kernel),
                       // each 64-row q block in the main kernel's accumulator order (dq_convert.cuh)

  // Outputs.
  void* dq;
  std::int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
  void* dk;
  std::int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  void* dv;
  std::int64_t dv_batch_stride, dv_row_stride, dv_head_stride;

  // Variable-length batches (bwd/sequence.cuh): int32 device arrays, nullptr when absent (a dense
  // side), as FwdParams has them: sequence b's queries are rows [cu_seqlens_q[b], cu_seqlens_q[b + 1])
  // of the packed q, out, dout and dq (whose batch strides are then 0, as the packed LSE's), of which it
  // uses the first seqused_q[b] (dense q too: of its seqlen_q), its keys likewise of k, v, dk and dv, of
  // which it uses the first seqused_k[b]. q_blocks_per_head: the workspace blocks of each q head
  // (workspace_blocks.hpp).
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  const int* seqused_k;
  const int* seqused_q;
  int q_blocks_per_head;

  // Deterministic kernels (BwdTraits::kDeterministic; bwd/dq_order.cuh): per workspace block and
  // consumer warpgroup, the dQ reductions added into that half of the block so far (int32, zeroed
  // with dq_accum), and how many heads their dispatch order interleaves (bwd/cta_dispatch.hpp). Last,
  // so the other kernels' parameter offsets stay as they were.
  int* dq_order;
  int dq_head_interleave;
};

}  // namespace hopattn::sm90
