// Times hopattn::forward or hopattn::backward on one shape: fresh random inputs on the GPU, CUDA
// events around each call, warm-up first, median over many calls.
#pragma once

#include <cstdint>
#include <string>

#include "shapes.hpp"

namespace hopattn::bench {

struct TimingOptions {
  int iters = 50;
  int warmup = 10;
  bool write_lse = true;
  // The timed calls all queued behind a LaunchGate before the GPU starts them: each call's time is then
  // its GPU work alone, with no wait for the host to launch it.
  bool queue_ahead = false;
  // With queue_ahead: events around groups of calls instead of each call, so the calls' kernels follow
  // one another as in a model's stream; the time is a group's mean, the median over groups.
  bool back_to_back = false;
  void* stream = nullptr;  // cudaStream_t
  int device = 0;
};

enum class Outcome { kOk, kUnsupported, kError, kNotRun };  // kNotRun: listed (--list), not timed

struct Measurement {
  Outcome outcome = Outcome::kError;
  double median_ms = 0.0;
  int iters = 0;       // timed calls actually made (fewer than asked when one call takes long)
  int input_sets = 0;  // distinct q/k/v/out (and backward) sets rotated through so that L2 never holds them
  std::string message;  // why the row is unsupported or failed; on an ok row, a caveat on its time
};

Measurement time_forward(const Shape& shape, const TimingOptions& options, std::uint64_t seed);

// Times hopattn::backward: per input set, q, k, v and dout random, one hopattn::forward writes out
// and the LSE (whatever options.write_lse says), then the backward calls rotate over the sets as the
// forward's do. dq, dk and dv are checked for NaN/Inf after the warm-up.
Measurement time_backward(const Shape& shape, const TimingOptions& options, std::uint64_t seed);

// time_backward when shape.backward, else time_forward.
Measurement time_shape(const Shape& shape, const TimingOptions& options, std::uint64_t seed);

const char* outcome_name(Outcome outcome);

}  // namespace hopattn::bench
