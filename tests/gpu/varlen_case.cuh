// One variable-length forward call of the GPU tests (test_forward_varlen.cu, test_head_dims.cu):
// cu_seqlens_q, cu_seqlens_k, seqused_k and seqused_q alone and combined, with dense q or k where the API allows
// it, run through hopattn::forward and judged sequence by sequence by check_sequences
// (sequence_checks.cuh).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/sequence_checks.cuh"

namespace hopattn::test {

// One variable-length call. A dense side (varlen_q or varlen_k false) is (batch, seqlen, heads, d) with
// every length equal; its rows are laid out exactly as a varlen side's, sequence after sequence.
struct VarlenCase : CallSettings {
  std::vector<int> len_q;                     // query rows of each sequence
  std::vector<int> len_k;                     // key rows stored for each sequence
  std::optional<std::vector<int>> seqused_k;  // keys each sequence uses (<= len_k), when given
  std::optional<std::vector<int>> seqused_q;  // query rows each sequence uses (<= len_q), when given
  bool varlen_q = true, varlen_k = true;
  // q, k, v as head slices of one (total, hq + 2 hkv, d) buffer, as flash_attn_varlen_qkvpacked_func
  // takes them; needs varlen q and k with equal lengths.
  bool packed_qkv = false;
  // k and v rows after the last sequence (varlen k): in the tensor, in no sequence.
  int trailing_k_rows = 0;
  // In k and v rows no sequence uses (past seqused_k, the trailing rows) when given; else random.
  std::optional<float> unused_row_value;

  int batch() const { return static_cast<int>(len_q.size()); }
  int used_k(int b) const { return seqused_k ? (*seqused_k)[b] : len_k[b]; }
  int used_q(int b) const { return seqused_q ? (*seqused_q)[b] : len_q[b]; }
  double work() const {
    double pairs = 0;
    for (int b = 0; b < batch(); ++b) pairs += double(used_q(b)) * used_k(b);
    return pairs * heads_q * head_dim;
  }
  // The first `n` sequences as a batch of their own.
  VarlenCase prefix(int n) const {
    VarlenCase c = *this;
    c.len_q.resize(n);
    c.len_k.resize(n);
    if (c.seqused_k) c.seqused_k->resize(n);
    if (c.seqused_q) c.seqused_q->resize(n);
    return c;
  }
  std::string describe() const;
};

// Runs `c` on data drawn from `seed` and returns what is wrong (empty when nothing is): forward must
// return Ok, and each sequence pass check_sequences.
std::string run_varlen_case(const VarlenCase& c, std::uint64_t seed);

// Builds a case of varlen q and k (the common form); the tests then change what they need.
VarlenCase varlen(std::vector<int> len_q, std::vector<int> len_k, int heads_q, int heads_kv, int head_dim,
                  Dtype dtype);

}  // namespace hopattn::test
