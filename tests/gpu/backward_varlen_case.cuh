// One variable-length backward call of the GPU tests (test_backward_varlen.cu): cu_seqlens_q,
// cu_seqlens_k and seqused_k alone and combined, with dense q or k where the API allows it. Its buffers
// (fresh inputs, out and lse from hopattn::forward on the GPU, dq/dk/dv poisoned with NaN and bracketed
// by poisoned guard rows), the call to hopattn::backward, and the judgement: each sequence is an
// ordinary attention problem of its own lengths (masks bottom-right aligned per sequence), so its dq,
// dk and dv are judged against the float32 GPU reference backward run on that sequence alone, through
// batch-1 views, by the dense tests' rule (check_gradient, backward_case.cuh); gradients no query or key
// reaches (a sequence without queries or without keys, keys past seqused_k) must be exactly 0; every
// row of the sequences must be written and nothing around or between them. The k and v rows no
// sequence uses (past seqused_k, after the last sequence) may hold NaN or Inf, as memory nobody wrote
// may: key blocks that straddle a sequence's last key load them.
#pragma once

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gpu/sequence_checks.cuh"

namespace hopattn::test {

struct VarlenBackwardCase : CallSettings {  // with_lse unused: the backward always reads the LSE
  std::vector<int> len_q;                     // query rows of each sequence
  std::vector<int> len_k;                     // key rows stored for each sequence
  std::optional<std::vector<int>> seqused_k;  // keys each sequence uses (<= len_k), when given
  // Query rows each sequence uses (<= len_q), when given: its q, dout, out and lse rows past them hold
  // NaN, and their dq must come out 0.
  std::optional<std::vector<int>> seqused_q;
  bool varlen_q = true, varlen_k = true;
  // q, k, v as head slices of one (total, hq + 2 hkv, d) buffer (flash_attn_varlen_qkvpacked_func's
  // inputs); needs varlen q and k with equal lengths.
  bool packed_qkv = false;
  bool deterministic = false;  // BwdArgs::deterministic
  // k and v rows after the last sequence (varlen k): in the tensors (dk and dv have them too, unwritten:
  // they belong to no sequence), in no sequence.
  int trailing_k_rows = 0;
  // In k and v rows no sequence uses (past seqused_k, the trailing rows) when given; else random.
  std::optional<float> unused_row_value;

  int batch() const { return static_cast<int>(len_q.size()); }
  int used_k(int b) const { return seqused_k ? (*seqused_k)[b] : len_k[b]; }
  int used_q(int b) const { return seqused_q ? (*seqused_q)[b] : len_q[b]; }
  // (head, query, key) pairs over the sequences: what the reference's time and scratch grow with.
  double pairs() const;
  // The first `n` sequences as a batch of their own.
  VarlenBackwardCase prefix(int n) const;
  std::string describe() const;
};

// Runs `c` on data drawn from `seed` and returns what is wrong (empty when nothing is): backward must
// return Ok, and every sequence's gradients pass the checks above.
std::string run_varlen_backward_case(const VarlenBackwardCase& c, std::uint64_t seed);

// Calls backward `runs` times on one set of inputs (the gradients poisoned before each) and returns
// what is wrong: any bitwise difference from the first call's dq, dk, dv (bitwise_differences), and
// what run_varlen_backward_case would find in the last call's.
std::string run_varlen_backward_repeatedly(const VarlenBackwardCase& c, std::uint64_t seed, int runs);

// The harness must be able to fail: runs `c`, then spoils its gradients one way at a time (a dv row of
// a sequence zeroed, a nonzero dk entry for a key past seqused_k, a write into dq's trailing guard) and
// returns, for each, what the checks said (each must be non-empty). c needs a second sequence with
// queries and keys and keys past seqused_k in its first.
std::vector<std::string> spoiled_gradient_reports(const VarlenBackwardCase& c, std::uint64_t seed);

// Batch 1-6; varlen q, varlen k and seqused_k drawn independently (at least one); lengths log-uniform
// in [1, 700], often an edge of the 64- and 128-row blocks, sometimes 0 on a varlen side; d up to 256,
// either dtype, GQA ratio 1-8; causal, windows, softcap, scale, padded rows and packed qkv at random;
// heads then lengths shrunk until pairs() <= max_pairs.
VarlenBackwardCase random_varlen_backward_case(std::mt19937_64& rng, double max_pairs);

}  // namespace hopattn::test
