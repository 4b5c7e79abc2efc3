// What hopattn-bench does without a Hopper GPU: time the CPU reference backend on a small problem, so
// the command works (and checks the library end to end) on any machine.
#pragma once

#include "cli.hpp"
#include "report_rows.hpp"

namespace hopattn::bench {

// Prints the time and a checksum of the output; returns the process exit code (0 unless the
// reference itself fails or the JSON can't be written).
int run_cpu_reference(const CliOptions& options, RunInfo info);

}  // namespace hopattn::bench
