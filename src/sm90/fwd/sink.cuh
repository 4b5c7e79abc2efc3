// Attention sinks (FwdArgs::learnable_sink): a q head's sink is one more logit in each of its rows'
// softmax, with no value. The kernels fold it in where a row is finished, its O factor and its LSE over
// the keys known, rather than into the running softmax: a split tile's pieces are merged after that
// (split_merge.cuh, combine_rows.cuh), so a sink there would count once per piece. Joining the sink:
//   lse' = log(exp(lse) + exp(sink)),  out = O_keys * exp(lse - lse'),
// so a row that saw no key (lse -inf, factor 0) stores 0 and LSE sink.
#pragma once

#include <cmath>

#include "sm90/fwd/params.hpp"

namespace hopattn::sm90 {

// With e = exp(low - high) of the two logits: lse' = high + log(1 + e), and the keys' share
// exp(lse - lse') = (lse the higher ? 1 : e) / (1 + e). One exponential, then the reciprocal and the
// log side by side: the join sits on each tile's last stretch, where a chain of three MUFU ops
// (exp, log, exp) cost d 64 3.5% at 128-key windows (perf-notes v108). 1 + e lies in [1, 2], so
// the fast exp, reciprocal and log suffice.
__device__ __forceinline__ void join_sink(float sink, float& out_scale, float& lse) {
  const float high = fmaxf(lse, sink), low = fminf(lse, sink);
  if (high == -INFINITY) return;  // no key and no sink
  const float e = __expf(low - high);
  const float total = 1.0f + e;
  out_scale *= (lse >= sink ? 1.0f : e) * __fdividef(1.0f, total);
  lse = high + __logf(total);
}

// Both row halves of a thread whose rows all belong to q head `head`.
__device__ __forceinline__ void join_head_sink(const FwdParams& p, int head, float (&out_scale)[2], float (&lse)[2]) {
  if (p.sink == nullptr) return;
  const float sink = p.sink[head];
#pragma unroll
  for (int r = 0; r < 2; ++r) join_sink(sink, out_scale[r], lse[r]);
}

}  // namespace hopattn::sm90
