// The validated, normalized description of one attention call. validate_forward/validate_backward
// (src/api/validate.cpp) are the only producers; the backends (reference, sm90) only consume it, so
// they never re-check arguments.
#pragma once

#include "hopattn/hopattn.hpp"

namespace hopattn::detail {

struct Problem {
  int batch = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;    // q and k
  int head_dim_v = 0;  // v, out (and dout, dv): head_dim unless v has its own
  int seqlen_q = 0;  // dense: q.shape[1]; varlen: max_seqlen_q
  int seqlen_k = 0;  // dense: k.shape[1]; varlen: max_seqlen_k; paged: pages_per_seq * page_size
  bool varlen_q = false;  // q, out are (total_q, heads, d), lengths from cu_seqlens_q
  bool varlen_k = false;  // k, v are (total_k, heads_kv, d), lengths from cu_seqlens_k
  bool has_seqused_k = false;
  bool has_seqused_q = false;  // seqused_q given: sequence b uses its first seqused_q[b] query rows
  bool paged = false;  // k, v are (num_pages, page_size, heads_kv, d)
  int page_size = 0;
  int pages_per_seq = 0;
  int num_pages = 0;
  // FP8, dense k/v only: v is given with its keys contiguous (v.stride[1] == 1: V^T in memory, e.g. a
  // (batch, heads_kv, head_dim, seqlen_k padded) buffer viewed as (batch, seqlen_k, heads_kv, head_dim)).
  // The sm_90a kernel then loads V^T tiles directly instead of transposing V in shared memory.
  bool v_keys_contiguous = false;

  float softmax_scale = 0.0f;  // resolved (default 1/sqrt(d) applied)
  bool causal = false;
  // Window with causal folded in (causal => window_right = 0); -1 = unbounded.
  int window_left = -1;
  int window_right = -1;
  // Chunked attention (FwdArgs::attention_chunk), 0 = off: row i sees only keys in the chunk of its
  // diagonal key. Capped at seqlen_q + seqlen_k, and 0 where it could mask nothing.
  int attention_chunk = 0;
  float softcap = 0.0f;

  Dtype in_dtype = Dtype::kBFloat16;   // q, k, v
  Dtype out_dtype = Dtype::kBFloat16;  // out (bf16 for fp8 inputs)
  bool has_lse = false;
  DeviceType device = DeviceType::kHost;
  int device_index = 0;
};

// The wider of q/k's and v's head dims: the tile width a kernel needs (columns past either's in its
// tiles are zeros, which add nothing to q.k or to P V).
inline int widest_head_dim(const Problem& p) { return p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v; }

// Whether a call uses attention_chunk or seqused_q: the sm_90a kernels run such calls in kernels of
// their own (the kChunksAndSequsedQ traits), so that no other kernel carries their tests.
inline bool has_chunks_or_seqused_q(const Problem& p) { return p.attention_chunk > 0 || p.has_seqused_q; }

Status validate_forward(const FwdArgs& args, Problem* problem);
Status validate_backward(const BwdArgs& args, Problem* problem);

}  // namespace hopattn::detail
