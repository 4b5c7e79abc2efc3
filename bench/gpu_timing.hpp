// Times hopattn::forward on one shape: fresh random inputs on the GPU, CUDA events around each call,
// warm-up first, median over many calls.
#pragma once

#include <cstdint>
#include <string>

#include "shapes.hpp"

namespace hopattn::bench {

struct TimingOptions {
  int iters = 50;
  int warmup = 10;
  bool write_lse = true;
  void* stream = nullptr;  // cudaStream_t
  int device = 0;
};

enum class Outcome { kOk, kUnsupported, kError };

struct Measurement {
  Outcome outcome = Outcome::kError;
  double median_ms = 0.0;
  int iters = 0;       // timed calls actually made (fewer than asked when one call takes long)
  int input_sets = 0;  // distinct q/k/v/out sets rotated through so that L2 never holds the inputs
  std::string message;  // why the row is unsupported or failed
};

Measurement time_forward(const Shape& shape, const TimingOptions& options, std::uint64_t seed);

const char* outcome_name(Outcome outcome);

}  // namespace hopattn::bench
