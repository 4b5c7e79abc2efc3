// Command line of hopattn-bench: which shapes to time and how.
#pragma once

#include <string>
#include <vector>

#include "shapes.hpp"

namespace hopattn::bench {

struct CliOptions {
  std::vector<Shape> shapes;
  std::string grid = "quick";  // "single" when the shape came from --batch/--seqlen-q/... flags
  int iters = 50;
  int warmup = 10;
  bool write_lse = true;  // a training forward writes the log-sum-exp; --no-lse times inference
  // Each shape's timed calls are all queued before the GPU may start them (TimingOptions::queue_ahead).
  bool queue_ahead = false;
  bool back_to_back = false;  // TimingOptions::back_to_back (and queue_ahead)
  bool list_only = false;  // --list: print (and with --json write) the shapes, time nothing
  std::string json_path;  // empty: no JSON
  bool help = false;
};

// Parses argv into *options. On bad input returns false with *error naming the flag and what it
// accepts.
bool parse_cli(int argc, char** argv, CliOptions* options, std::string* error);

std::string usage_text();

}  // namespace hopattn::bench
