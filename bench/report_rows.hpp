// The bench's output: one table line per shape on stdout, and all rows with run metadata as JSON.
#pragma once

#include <string>
#include <vector>

#include "gpu_timing.hpp"
#include "shapes.hpp"

namespace hopattn::bench {

struct Row {
  Shape shape;
  Measurement measurement;
  double tflops = 0.0;   // 0 unless the measurement is ok
  double kv_tbps = 0.0;  // timed_bytes / time in TB/s; 0 unless ok (and for backward rows)
};

// The row of a measurement, its rates computed from the median time when it is ok.
Row timed_row(const Shape& shape, const Measurement& measurement);

struct RunInfo {
  std::string tool = "hopattn-bench";
  std::string device;
  std::string date;        // UTC, ISO 8601
  std::string git_commit;  // of the build; "-dirty" when the tree had uncommitted changes
  std::string grid;
  std::string backend;  // "sm90" or "cpu_reference"
  int iters = 0;
  int warmup = 0;
  bool write_lse = true;
  bool queue_ahead = false;
  bool back_to_back = false;
};

// Date and git commit filled in; the rest left to the caller.
RunInfo current_run_info();

void print_table_header();
void print_row(const Row& row);

// Writes {"tool", "device", ..., "rows": [...]} to path; false (with *error) if the file can't be written.
// Each row has the shape, "variant", "page_size", "cache_seqlen_k" and "padded_seqlen_q" (0: not paged,
// no cache, q not padded), "backward" (true: the row timed hopattn::backward, its TFLOP/s counting
// backward_flops), the kernel options, "status", "flops", "bytes" (timed_bytes; null for a backward
// row), "ms", "tflops", "kv_tbps" (bytes / time), "iters", "input_sets" and "message".
bool write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows, std::string* error);

}  // namespace hopattn::bench
