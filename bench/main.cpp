// hopattn-bench: times hopattn::forward (or hopattn::backward: --backward, --grid bwd) over a grid of
// shapes and prints ms, TFLOP/s and TB/s per shape.
// See usage_text() in cli.cpp, or run with --help.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <random>
#include <vector>

#include "cli.hpp"
#include "cpu_fallback.hpp"
#include "gpu_timing.hpp"
#include "report_rows.hpp"

namespace hopattn::bench {
namespace {

// Writes the rows to --json's path when given; returns 0, or 1 when the file cannot be written.
int write_json_if_asked(const CliOptions& options, const RunInfo& info, const std::vector<Row>& rows) {
  if (options.json_path.empty()) return 0;
  std::string error;
  if (!write_json(options.json_path, info, rows, &error)) {
    std::fprintf(stderr, "hopattn-bench: %s\n", error.c_str());
    return 1;
  }
  std::printf("wrote %s\n", options.json_path.c_str());
  return 0;
}

// --list: the shapes as rows that were not run, on any machine.
int list_shapes(const CliOptions& options, RunInfo info) {
  info.backend = "none";
  std::printf("hopattn-bench --list, grid %s: %zu shapes\n", info.grid.c_str(), options.shapes.size());
  std::vector<Row> rows;
  print_table_header();
  for (const Shape& shape : options.shapes) {
    Measurement not_run;
    not_run.outcome = Outcome::kNotRun;
    rows.push_back(timed_row(shape, not_run));
    print_row(rows.back());
  }
  return write_json_if_asked(options, info, rows);
}

// Times every shape in order; returns the exit code. A failing row is reported and the run goes on,
// unless the failure left the CUDA context unusable (a kernel fault is sticky).
int run_on_gpu(const CliOptions& options, RunInfo info) {
  info.device = device_description();
  info.backend = "sm90";
  std::printf("hopattn-bench on %s, grid %s, %d iters (median), %d warm-up%s%s\n", info.device.c_str(),
              info.grid.c_str(), options.iters, options.warmup, options.write_lse ? "" : ", no LSE",
              options.back_to_back ? ", calls queued ahead and timed back to back in groups"
              : options.queue_ahead ? ", calls queued ahead"
                                    : "");

  TimingOptions timing;
  timing.iters = options.iters;
  timing.warmup = options.warmup;
  timing.write_lse = options.write_lse;
  timing.queue_ahead = options.queue_ahead;
  timing.back_to_back = options.back_to_back;
  cudaStream_t stream = nullptr;
  if (cudaGetDevice(&timing.device) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "hopattn-bench: cannot create a CUDA stream: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  timing.stream = stream;

  std::uint64_t seed = std::random_device{}();
  std::vector<Row> rows;
  int exit_code = 0;
  print_table_header();
  for (const Shape& shape : options.shapes) {
    const Row row = timed_row(shape, time_shape(shape, timing, seed));
    seed += 1000;
    print_row(row);
    rows.push_back(row);
    if (row.measurement.outcome == Outcome::kError && cudaDeviceSynchronize() != cudaSuccess) {
      std::printf("the CUDA context is lost (%s); the remaining shapes are not timed\n",
                  cudaGetErrorString(cudaGetLastError()));
      exit_code = 1;
      break;
    }
  }
  cudaStreamDestroy(stream);
  return write_json_if_asked(options, info, rows) != 0 ? 1 : exit_code;
}

}  // namespace
}  // namespace hopattn::bench

int main(int argc, char** argv) {
  using namespace hopattn::bench;
  CliOptions options;
  std::string error;
  if (!parse_cli(argc, argv, &options, &error)) {
    std::fprintf(stderr, "hopattn-bench: %s\n\n%s", error.c_str(), usage_text().c_str());
    return 2;
  }
  if (options.help) {
    std::printf("%s", usage_text().c_str());
    return 0;
  }
  RunInfo info = current_run_info();
  info.grid = options.grid;
  info.iters = options.iters;
  info.warmup = options.warmup;
  info.write_lse = options.write_lse;
  info.queue_ahead = options.queue_ahead;
  info.back_to_back = options.back_to_back;
  if (options.list_only) {
    info.device = hopattn::device_description();
    return list_shapes(options, info);
  }
  if (!hopattn::hopper_available()) {
    info.device = hopattn::device_description();
    std::printf("No Hopper GPU (%s): timing the CPU reference on a small problem instead.\n", info.device.c_str());
    return run_cpu_reference(options, info);
  }
  return run_on_gpu(options, info);
}
