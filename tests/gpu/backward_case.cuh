// One backward configuration of the GPU tests: its buffers (fresh inputs, out and lse from
// hopattn::forward on the GPU, dq/dk/dv poisoned with NaN and bracketed by guards), the call to
// hopattn::backward, and the rule that judges each gradient against the float32 GPU reference.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpu/attention_problem.cuh"
#include "gpu/gpu_reference_backward.cuh"
#include "gpu/gpu_test_util.cuh"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {

// Physical arrangement of the (batch, seqlen, heads, d) tensors of a call.
enum class BackwardLayout {
  kContiguous,   // every tensor dense
  kHeadMajor,    // every tensor stored (b, h, s, d), viewed through strides
  kPaddedHeads,  // every tensor's heads d + 8 elements apart (16 bytes of padding); lse rows padded too
  kPacked,       // q, k, v head slices of one (b, s, hq + 2 hkv, d) buffer; dq, dk, dv of one
                 // (b, s, hq + 2 hkv, d + 8) buffer, as flash-attention's qkvpacked backward; sq == sk
};

struct BackwardCase : AttentionProblem {
  float amplitude = 1.0f;  // q (all of a packed qkv buffer) = amplitude * N(0, 1); k, v, dout N(0, 1)
  BackwardLayout layout = BackwardLayout::kContiguous;
  bool deterministic = false;  // BwdArgs::deterministic

  std::string describe() const;
  // (batch, head, query, key) pairs: the reference's scratch takes 16 bytes of each.
  double pairs() const { return double(batch) * heads_q * seqlen_q * seqlen_k; }
};

// gtest prints a parameter with this when a test fails.
inline void PrintTo(const BackwardCase& c, std::ostream* os) { *os << c.describe(); }

// The float32 reference of one gradient: exact, naive and magnitude (gpu_reference_backward.cuh), dense.
struct ReferenceGradient {
  DeviceBuffer exact, naive, magnitude;
  explicit ReferenceGradient(std::int64_t numel);
  GradientBuffers buffers() const;
};

struct ReferenceGradients {
  ReferenceGradient dq, dk, dv;
};

// A gradient's allocation: the elements its view (or a packed dqkv's three views) reach, from `guard`
// on, with poisoned guard elements before and after them.
struct GuardedBuffer {
  DeviceBuffer storage;
  std::int64_t guard = 0;
  std::int64_t elements = 0;  // all of them, guards included
};

// The buffers of one call of `c` on data drawn from a seed: q, k, v and dout fresh, out and lse
// written by hopattn::forward on the GPU, dq, dk and dv poisoned with NaN over their whole storage
// (padding and guards included). Throws std::runtime_error when forward fails.
class BackwardCall {
 public:
  BackwardCall(const BackwardCase& c, std::uint64_t seed);

  BwdArgs args;  // every tensor and scalar of the call

  // Sets every stored element of dq, dk, dv (padding and guards included) to NaN again.
  void poison_gradients() const;
  // How many stored elements of dq, dk and dv (padding and guards included) no longer hold the
  // poison, and how many the three views hold: after a call the two must be equal.
  std::int64_t gradient_elements_written() const;
  std::int64_t gradient_elements() const;
  // The float32 GPU reference on the call's inputs.
  ReferenceGradients reference() const;

 private:
  BackwardCase c_;
  std::vector<DeviceBuffer> inputs_;  // q, k, v (or packed qkv), dout, out, lse
  std::vector<GuardedBuffer> gradients_;  // dq, dk, dv, or one packed dqkv
};

// The rule every gradient g (a strided view of q's dtype) must meet against its reference:
//   no NaN,
//   max |g - exact| <= 3 max |naive - exact| + floor     (nothing anywhere off by more than rounding)
//   rms(g - exact)  <= 2 rms(naive - exact)  + floor     (no systematic error, e.g. a 1.05 scale)
//   floor = 2^-16 max magnitude.
// Why: the kernel rounds out, P, dS and the gradient to the input dtype exactly where `naive` does,
// so its error is of the same kind and size, in different places (its roundings land on slightly
// different float32 values, its dq is summed across key blocks in float32 with atomics, its P comes
// from the forward's lse with ex2.approx, its D from the forward kernel's out). Both errors are sums of
// many independent roundings. A host simulation of such a kernel (its roundings and summation order
// modelled in C++, 6500 random cases of these tests' features) put max(kernel) / max(naive) at median
// 0.7, p99 0.98, worst 1.87, the RMS ratio at median 1.00, p99 1.03, and no case failed the rule. The
// max needs the wider factor because a max over a few dominant elements scatters more; the RMS factor
// of 2 still fails a 5% scale error on any well-conditioned case (simulated naive RMS errors stayed
// under 0.9% of the gradient's RMS at amplitudes <= 2 without softcap; peaky softmaxes, with dq and dk
// small beside the terms they cancel from, have larger ones). The floor covers float32 rounding, the
// reference's own and the kernel's, all that remains where rounding to the input dtype is exact and
// `naive` has no error at all (one key: P = 1, dq = dk = 0): float32 errors are a few 2^-24 times the
// magnitude, and even 4096 of them summed at random stay near 2^-18 of it.
// Returns what is wrong, or an empty string.
std::string check_gradient(const char* name, const Tensor& g, const ReferenceGradient& ref);

// The elements of a strided CUDA view of a floating dtype as dense float32 on the host, row-major; and
// dense float32 values written into such a view, rounded to its dtype.
std::vector<float> read_view(const Tensor& view);
void write_view(const std::vector<float>& values, const Tensor& view);

// dq, dk and dv of a finished call as dense float32 (read_view), and what differs bit for bit between
// two calls' ("" when nothing): the deterministic backward's promise.
using GradientValues = std::array<std::vector<float>, 3>;
GradientValues read_gradients(const BwdArgs& args);
std::string bitwise_differences(const GradientValues& first, const GradientValues& other);

// Runs `c` on data drawn from `seed` and returns what is wrong (empty when it passes): backward must
// return Ok, write every element of dq, dk and dv and nothing outside them, and each gradient must
// pass check_gradient.
std::string run_backward_case(const BackwardCase& c, std::uint64_t seed);

// Lengths the fixed cases and the sweep draw from: 1, odd, both sides of the 64- and 128-row tiles.
constexpr int kBackwardSeqlens[] = {1, 17, 64, 100, 128, 129, 255, 300, 513};

// Draws a case mixing every feature: batch 1-3, GQA ratio 1/2/4/8, d up to 256 (draw_head_dim: padded
// ones too), either dtype, lengths from kBackwardSeqlens or log-uniform in [1, 600], causal, windows,
// softcap with large scores, a scale, any layout; shrunk until pairs() <= max_pairs.
BackwardCase random_backward_case(std::mt19937_64& rng, double max_pairs);

}  // namespace hopattn::test
