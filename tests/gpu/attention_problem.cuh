// What a forward and a backward test case (forward_case.cuh, backward_case.cuh) have in common: the
// problem itself, its extents, dtype, mask, softcap and scale, and how a drawn one shrinks.
#pragma once

#include <cmath>
#include <optional>
#include <sstream>
#include <string>

#include "hopattn/hopattn.hpp"

namespace hopattn::test {

struct AttentionProblem {
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 64;
  Dtype dtype = Dtype::kBFloat16;
  bool causal = false;
  int window_left = -1, window_right = -1;
  int attention_chunk = 0;
  float softcap = 0.0f;
  std::optional<float> softmax_scale;

  // What the kernels use: softmax_scale, or 1/sqrt(d) where it is unset.
  float resolved_scale() const { return softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(head_dim))); }

  // "batch .. heads_q .. d .. bf16 causal window (l, r) ...": the start of a case's describe().
  std::string describe() const {
    std::ostringstream s;
    s << "batch " << batch << " heads_q " << heads_q << " heads_kv " << heads_kv << " seqlen_q " << seqlen_q
      << " seqlen_k " << seqlen_k << " d " << head_dim << " " << dtype_name(dtype) << (causal ? " causal" : "");
    if (window_left >= 0 || window_right >= 0) s << " window (" << window_left << ", " << window_right << ")";
    if (attention_chunk > 0) s << " chunk " << attention_chunk;
    if (softcap > 0.0f) s << " softcap " << softcap;
    if (softmax_scale) s << " scale " << *softmax_scale;
    return s.str();
  }
};

// Hands c's mask and softcap to a call's arguments, which name them alike (FwdArgs, BwdArgs and the GPU
// references' arguments; c: an AttentionProblem, or another test's case with those fields). The scale
// is the caller's: hopattn takes it unresolved, a reference resolved.
template <typename Args, typename Problem>
void set_mask(Args& a, const Problem& c) {
  a.causal = c.causal;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.attention_chunk = c.attention_chunk;
  a.softcap = c.softcap;
}

// One step of shrinking a drawn case that is too large: batch, then the GQA ratio (a power of two),
// then heads_kv. False when all three are down to 1, and the caller's sequences must shrink instead.
inline bool shrink_batch_or_heads(AttentionProblem& c) {
  if (c.batch > 1) {
    --c.batch;
  } else if (c.heads_q > c.heads_kv) {
    c.heads_q /= 2;
  } else if (c.heads_kv > 1) {
    c.heads_q = --c.heads_kv;
  } else {
    return false;
  }
  return true;
}

}  // namespace hopattn::test
