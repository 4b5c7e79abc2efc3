// The sequence a backward CTA (or a row-statistics or dq-conversion block) works on: its lengths (what
// its step list and masks see), where its rows lie (TMA coordinates, dq/dk/dv rows) and where its q
// blocks lie in the per-row workspaces (workspace_blocks.hpp).
//
// Every batch is read through the forward's locate_sequence (fwd/sequence.cuh): a side without
// cu_seqlens is dense (batch entry b from row 0), one with them packed (sequence b from its first row).
#pragma once

#include <cstdint>

#include "sm90/bwd/params.hpp"
#include "sm90/bwd/workspace_blocks.hpp"
#include "sm90/fwd/sequence.cuh"

namespace hopattn::sm90 {

struct BwdSequence {
  // seqlen_q, seqlen_k: the q rows and keys it uses (seqused_q[b], seqused_k[b] when given).
  SequenceBounds bounds;
  SequenceRows rows;
  int q_rows;    // the q rows stored for it: its rows of dq (those past bounds.seqlen_q get 0)
  int key_rows;  // the keys stored for it: its rows of dk and dv (those past bounds.seqlen_k get 0)
  int q_block0;  // its first workspace block in each q head's range
};

// kSequsedQ: whether the kernel reads seqused_q (the kernels of calls that may give it:
// BwdTraits::kChunksAndSequsedQ).
template <int kBlockM, bool kSequsedQ>
__device__ __forceinline__ BwdSequence backward_sequence(const BwdParams& p, int batch) {
  BwdSequence s;
  locate_sequence(p.cu_seqlens_q, batch, p.seqlen_q, &s.rows.q_row0, &s.rows.q_batch, &s.q_rows);
  locate_sequence(p.cu_seqlens_k, batch, p.seqlen_k, &s.rows.k_row0, &s.rows.k_batch, &s.key_rows);
  s.bounds.seqlen_q = kSequsedQ && p.seqused_q != nullptr ? __ldg(p.seqused_q + batch) : s.q_rows;
  s.bounds.seqlen_k = p.seqused_k != nullptr ? __ldg(p.seqused_k + batch) : s.key_rows;
  s.bounds.window_left = p.window_left;
  s.bounds.window_right = p.window_right;
  s.bounds.attention_chunk = p.attention_chunk;
  // A dense q (cu_seqlens_q absent) is addressed as if packed: batch entry b from row b * seqlen_q.
  s.q_block0 = first_q_block<kBlockM>(s.rows.q_batch * p.seqlen_q + s.rows.q_row0, batch);
  return s;
}

// The workspace block (row of row_stats; 64 x d floats of dq_accum) of q block m of q head `head`.
__device__ __forceinline__ int workspace_block(const BwdParams& p, const BwdSequence& seq, int head, int m) {
  return head * p.q_blocks_per_head + seq.q_block0 + m;
}

// The (q head, q block) of a row statistics or dq conversion CTA: blockIdx.x = q block * heads_q +
// head, so that consecutive CTAs take the heads of the same rows and their reads of out and dout and
// writes of dq fill whole rows of the (row, head, dim) layout together (with q blocks first, the CTAs
// that write one row ran heads-many q blocks apart; the conversion ran at a third of the DRAM rate).
struct HeadBlock {
  int head;
  int m;  // q block of kBlockM rows
};
__device__ __forceinline__ HeadBlock head_block_of_cta(const BwdParams& p) {
  return HeadBlock{static_cast<int>(blockIdx.x) % p.heads_q, static_cast<int>(blockIdx.x) / p.heads_q};
}

// The workspace row of q row m0 (a multiple of kBlockM) of q head `head`: workspace_block * kBlockM.
template <int kBlockM>
__device__ __forceinline__ std::int64_t workspace_row(const BwdParams& p, const BwdSequence& seq, int head, int m0) {
  return std::int64_t(workspace_block(p, seq, head, 0)) * kBlockM + m0;
}

}  // namespace hopattn::sm90
