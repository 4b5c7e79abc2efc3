// One forward configuration of the GPU correctness tests: how to draw it at random, run it through
// hopattn::forward on fresh data with poisoned outputs, and judge it against the float32 GPU reference.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "gpu/attention_problem.cuh"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {

// Physical arrangement of a (batch, seqlen, heads, d) tensor.
enum class Layout {
  kContiguous,  // (b, s, h, d) dense
  kHeadMajor,   // stored (b, h, s, d), viewed through strides
  kPaddedRows,  // (b, s, h, d + 8): rows 16 bytes longer than they need to be
};

struct ForwardCase : AttentionProblem {
  bool with_lse = true;
  float amplitude = 1.0f;  // q is drawn from amplitude * N(0, 1): larger = peakier softmax
  Layout layout = Layout::kContiguous;  // q, k, v, out (lse rows are padded with kPaddedRows)
  bool packed_qkv = false;  // q, k, v: head slices of one (b, s, hq + 2 hkv, d) buffer; needs sq == sk
  int num_splits = 0;       // FwdArgs::num_splits (0: the launch's tail-split heuristic)

  std::string describe() const;
  // Part of what the sm_90a forward supports: bf16/fp16, d a multiple of 8 from 8 to 256, causal or
  // not, GQA/MQA, any scale, LSE, any lengths and strides; no window, no softcap.
  bool in_first_supported_set() const;
  double work() const { return double(batch) * heads_q * seqlen_q * seqlen_k * head_dim; }
};

struct CaseResult {
  enum Kind { kPassed, kFailed, kUnsupported } kind = kFailed;
  std::string detail;  // why it failed, or the kUnsupported message
};

// Runs `c` with `options` on data drawn from `seed` and checks: status Ok, no NaN, every output element
// written and nothing outside the views, max|out - ref| within output_bound (2 max|out_naive - ref| +
// 1e-5 + half a rounding step), and |lse - lse_ref| <= 1e-3 with matching -inf. kUnsupported when forward answers kUnsupported.
CaseResult run_forward_case(const ForwardCase& c, const KernelOptions& options, std::uint64_t seed);

// Seqlens every random sweep includes: 1 and either side of the 64- and 128-row tile edges and of 4096.
constexpr int kEdgeSeqlens[] = {1, 63, 65, 127, 129, 4097};

// Draws a case from `rng`: batch 1-4, heads_kv 1-4, GQA ratio 1/2/4/8, seqlens log-uniform in
// [1, 4500] (often an edge length), either dtype, a head dim of draw_head_dim (padded ones too),
// shrunk until work() <= max_work.
// With `extra_features` it sometimes adds a window or a softcap (outside the first supported set).
// A forced seqlen (> 0) is used as given and never shrunk.
ForwardCase random_case(std::mt19937_64& rng, double max_work, bool extra_features, int forced_seqlen_q = 0,
                        int forced_seqlen_k = 0);

}  // namespace hopattn::test
