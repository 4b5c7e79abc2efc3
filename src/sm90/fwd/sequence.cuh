// The sequence a tile belongs to: how long it is (what its masks and K/V block range see) and where
// its rows lie in q/out and k/v (what its TMA loads and stores address).
//
// Dense batches have one length for every sequence: the kernels read it from FwdParams, which has
// the same field names as SequenceBounds, so masks and block ranges take either (a template
// parameter; the dense kernels' code is what it was before variable lengths). Variable-length
// batches (FwdTraits::kVarlen) read each tile's lengths and first rows from the cu_seqlens_q,
// cu_seqlens_k, seqused_k and seqused_q arrays. Every row bound (tiles past the sequence, masks, the
// rows the epilogue stores) reads seqlen_q from here, so rows past seqused_q are neither computed
// nor stored: their out and lse keep what the caller's memory held.
#pragma once

#include "sm90/fwd/params.hpp"

namespace hopattn::sm90 {

// One sequence's lengths, the window (bottom-right aligned to those lengths) and the chunk.
struct SequenceBounds {
  int seqlen_q;
  int seqlen_k;
  int window_left;
  int window_right;
  int attention_chunk;
};

// Row offsets and TMA batch coordinates of a tile's sequence. A dense tensor has the sequence at batch
// coordinate b, row 0; a packed one (total, heads, d), mapped as one batch entry, at batch 0 and the
// sequence's first row.
struct SequenceRows {
  int q_row0;
  int q_batch;
  int k_row0;
  int k_batch;
};

// Where a variable-length tile's valid rows end in the packed out: the epilogue drops rows at or past
// seqlen_q, which for a dense batch it reads from FwdParams (epilogue.cuh).
struct PackedRowEnd {
  int seqlen_q;
};

struct VarlenSequence {
  SequenceBounds bounds;
  SequenceRows rows;
};

// One side (q or k) of sequence `batch`: in a packed tensor (its cu_seqlens given) from row
// cu_seqlens[batch], at TMA batch 0; else in a dense one, from row 0 of batch entry `batch`.
__device__ __forceinline__ void locate_sequence(const int* cu_seqlens, int batch, int dense_length, int* row0,
                                                int* tma_batch, int* length) {
  if (cu_seqlens != nullptr) {
    *row0 = __ldg(cu_seqlens + batch);
    *tma_batch = 0;
    *length = __ldg(cu_seqlens + batch + 1) - *row0;
  } else {
    *row0 = 0;
    *tma_batch = batch;
    *length = dense_length;
  }
}

// Sequence `batch` of a variable-length launch. Every thread that needs it reads the few ints itself
// (one L1/L2 line per tile, shared by the CTA) rather than waiting on a shared-memory hand-over.
// kSequsedQ: the kernel reads seqused_q (FwdTraits::kChunksAndSequsedQ; the others never get it).
template <bool kSequsedQ, class Params>
__device__ __forceinline__ VarlenSequence varlen_sequence(const Params& p, int batch) {
  VarlenSequence s;
  locate_sequence(p.cu_seqlens_q, batch, p.seqlen_q, &s.rows.q_row0, &s.rows.q_batch, &s.bounds.seqlen_q);
  locate_sequence(p.cu_seqlens_k, batch, p.seqlen_k, &s.rows.k_row0, &s.rows.k_batch, &s.bounds.seqlen_k);
  if (p.seqused_k != nullptr) s.bounds.seqlen_k = __ldg(p.seqused_k + batch);
  if (kSequsedQ && p.seqused_q != nullptr) s.bounds.seqlen_q = __ldg(p.seqused_q + batch);
  s.bounds.window_left = p.window_left;
  s.bounds.window_right = p.window_right;
  s.bounds.attention_chunk = p.attention_chunk;
  return s;
}

}  // namespace hopattn::sm90
