// What hopattn-bench does without a Hopper GPU: time the CPU reference backend on a small problem (its
// backward when the shapes asked for the backward), so the command works (and checks the library end
// to end) on any machine.
#pragma once

#include "cli.hpp"
#include "report_rows.hpp"

namespace hopattn::bench {

// Prints the time and a checksum of the output (of dq, dk and dv for the backward); returns the
// process exit code (0 unless the reference itself fails or the JSON can't be written).
int run_cpu_reference(const CliOptions& options, RunInfo info);

}  // namespace hopattn::bench
