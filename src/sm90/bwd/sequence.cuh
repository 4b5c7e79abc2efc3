// The sequence a backward CTA (or a row-statistics or dq-conversion block) works on: its lengths (what
// its step list and masks see), where its rows lie (TMA coordinates, dq/dk/dv rows) and where its q
// blocks lie in the per-row workspaces (workspace_blocks.hpp).
//
// Dense batches (BwdTraits::kVarlen false) take everything from BwdParams and the batch index, by the
// expressions the dense kernels always used; variable-length batches read cu_seqlens_q, cu_seqlens_k and
// seqused_k through the forward's varlen_sequence (fwd/sequence.cuh).
#pragma once

#include <cstdint>

#include "sm90/bwd/params.hpp"
#include "sm90/bwd/workspace_blocks.hpp"
#include "sm90/fwd/sequence.cuh"

namespace hopattn::sm90 {

struct BwdSequence {
  SequenceBounds bounds;  // seqlen_k: the keys it uses (seqused_k[b] when given)
  SequenceRows rows;
  int key_rows;  // the keys stored for it: its rows of dk and dv (those past bounds.seqlen_k get 0)
  int q_block0;  // variable lengths: its first workspace block in each q head's range
};

template <int kBlockM, bool kVarlen>
__device__ __forceinline__ BwdSequence backward_sequence(const BwdParams& p, int batch) {
  BwdSequence s;
  if constexpr (kVarlen) {
    const VarlenSequence v = varlen_sequence(p, batch);
    s.bounds = v.bounds, s.rows = v.rows;
    s.key_rows = v.bounds.seqlen_k;
    if (p.seqused_k != nullptr) {
      int row0, tma_batch;
      locate_sequence(p.cu_seqlens_k, batch, p.seqlen_k, &row0, &tma_batch, &s.key_rows);
    }
    // A dense q (cu_seqlens_q absent) is addressed as if packed: batch entry b from row b * seqlen_q.
    s.q_block0 = first_q_block<kBlockM>(s.rows.q_batch * p.seqlen_q + s.rows.q_row0, batch);
  } else {
    s.bounds = SequenceBounds{p.seqlen_q, p.seqlen_k, p.window_left, p.window_right};
    s.rows = SequenceRows{0, batch, 0, batch};
    s.key_rows = p.seqlen_k;
    s.q_block0 = 0;
  }
  return s;
}

// What step lists and masks see: BwdParams itself for a dense batch (the dense kernels read its fields
// as they always did), the sequence's bounds for a variable-length one; both name the fields alike.
template <bool kVarlen>
__device__ __forceinline__ const auto& sequence_bounds(const BwdParams& p, const BwdSequence& seq) {
  if constexpr (kVarlen) return seq.bounds;
  else return p;
}

// The workspace block (row of row_stats; 64 x d floats of dq_accum) of q block m of q head `head`.
template <bool kVarlen>
__device__ __forceinline__ int workspace_block(const BwdParams& p, const BwdSequence& seq, int head, int m) {
  if constexpr (kVarlen) return head * p.q_blocks_per_head + seq.q_block0 + m;
  else return row_stats_block(p, seq.rows.q_batch, head, m);
}

// The workspace row of q row m0 (a multiple of kBlockM) of q head `head`: workspace_block * kBlockM.
template <int kBlockM, bool kVarlen>
__device__ __forceinline__ std::int64_t workspace_row(const BwdParams& p, const BwdSequence& seq, int head, int m0) {
  if constexpr (kVarlen) return std::int64_t(workspace_block<true>(p, seq, head, 0)) * kBlockM + m0;
  else return (std::int64_t(seq.rows.q_batch) * p.heads_q + head) * p.seqlen_q_padded + m0;
}

}  // namespace hopattn::sm90
