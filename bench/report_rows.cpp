#include "report_rows.hpp"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "git_commit.hpp"  // generated at build time: HOPATTN_BENCH_GIT_COMMIT

namespace hopattn::bench {
namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

const char* json_bool(bool value) { return value ? "true" : "false"; }

}  // namespace

Row timed_row(const Shape& shape, const Measurement& measurement) {
  Row row{shape, measurement};
  if (measurement.outcome == Outcome::kOk) {
    row.tflops = timed_flops(shape) / (measurement.median_ms * 1e9);
    row.kv_tbps = timed_bytes(shape) / (measurement.median_ms * 1e9);
  }
  return row;
}

RunInfo current_run_info() {
  RunInfo info;
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  info.date = date;
  info.git_commit = HOPATTN_BENCH_GIT_COMMIT;
  return info;
}

void print_table_header() {
  std::printf("%-5s %5s %7s %7s %7s %4s %6s %-20s %10s %8s %6s  %s\n", "dtype", "batch", "hq/hkv", "seq_q", "seq_k",
              "hdim", "causal", "variant", "ms(med)", "TFLOP/s", "TB/s", "status");
  std::fflush(stdout);
}

void print_row(const Row& row) {
  const Shape& s = row.shape;
  const Measurement& m = row.measurement;
  char heads[24];
  std::snprintf(heads, sizeof heads, "%d/%d", s.heads_q, s.heads_kv);
  std::printf("%-5s %5d %7s %7d %7d %4d %6s %-20s ", dtype_short_name(s.dtype), s.batch, heads, s.seqlen_q,
              s.seqlen_k, s.hdim, s.causal ? "yes" : "no", s.variant.c_str());
  if (m.outcome == Outcome::kOk) {
    std::printf("%10.4f %8.1f ", m.median_ms, row.tflops);
    if (row.kv_tbps > 0.0) std::printf("%6.2f", row.kv_tbps);
    else std::printf("%6s", "-");
  } else {
    std::printf("%10s %8s %6s", "-", "-", "-");
  }
  std::printf("  %s%s%s\n", outcome_name(m.outcome), m.message.empty() ? "" : ": ", m.message.c_str());
  std::fflush(stdout);
}

bool write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows, std::string* error) {
  std::ostringstream js;
  js.precision(6);
  js << "{\n"
     << "  \"tool\": " << json_string(info.tool) << ",\n"
     << "  \"device\": " << json_string(info.device) << ",\n"
     << "  \"date\": " << json_string(info.date) << ",\n"
     << "  \"git_commit\": " << json_string(info.git_commit) << ",\n"
     << "  \"grid\": " << json_string(info.grid) << ",\n"
     << "  \"backend\": " << json_string(info.backend) << ",\n"
     << "  \"iters\": " << info.iters << ",\n"
     << "  \"warmup\": " << info.warmup << ",\n"
     << "  \"write_lse\": " << json_bool(info.write_lse) << ",\n"
     << "  \"queue_ahead\": " << json_bool(info.queue_ahead) << ",\n"
     << "  \"back_to_back\": " << json_bool(info.back_to_back) << ",\n"
     << "  \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Shape& s = rows[i].shape;
    const Measurement& m = rows[i].measurement;
    js << (i == 0 ? "\n" : ",\n") << "    {\"dtype\": " << json_string(dtype_short_name(s.dtype))
       << ", \"batch\": " << s.batch << ", \"heads_q\": " << s.heads_q << ", \"heads_kv\": " << s.heads_kv
       << ", \"seqlen_q\": " << s.seqlen_q << ", \"seqlen_k\": " << s.seqlen_k << ", \"hdim\": " << s.hdim
       << ", \"hdim_v\": " << head_dim_v(s)
       << ", \"causal\": " << json_bool(s.causal) << ", \"variant\": " << json_string(s.variant)
       << ", \"page_size\": " << s.page_size << ", \"pages_in_order\": " << json_bool(s.pages_in_order)
       << ", \"cache_seqlen_k\": " << s.cache_seqlen_k
       << ", \"padded_seqlen_q\": " << s.padded_seqlen_q << ", \"kv_heads_major\": " << json_bool(s.kv_heads_major)
       << ", \"backward\": " << json_bool(s.backward) << ", \"deterministic\": " << json_bool(s.deterministic)
       << ", \"warp_specialized\": " << json_bool(s.options.warp_specialized)
       << ", \"pingpong\": " << json_bool(s.options.pingpong)
       << ", \"intra_wg_overlap\": " << json_bool(s.options.intra_wg_overlap)
       << ", \"persistent\": " << json_bool(s.options.persistent)
       << ", \"status\": " << json_string(outcome_name(m.outcome))
       << ", \"flops\": " << static_cast<long long>(timed_flops(s));  // whole numbers: exact as integers
    const double bytes = timed_bytes(s);
    if (bytes > 0.0) js << ", \"bytes\": " << static_cast<long long>(bytes);
    else js << ", \"bytes\": null";
    if (m.outcome == Outcome::kOk) {
      js << ", \"ms\": " << m.median_ms << ", \"tflops\": " << rows[i].tflops;
      if (bytes > 0.0) js << ", \"kv_tbps\": " << rows[i].kv_tbps;
      else js << ", \"kv_tbps\": null";
    } else {
      js << ", \"ms\": null, \"tflops\": null, \"kv_tbps\": null";
    }
    js << ", \"iters\": " << m.iters << ", \"input_sets\": " << m.input_sets
       << ", \"message\": " << json_string(m.message) << "}";
  }
  js << (rows.empty() ? "]\n}\n" : "\n  ]\n}\n");
  std::ofstream file(path);
  file << js.str();
  file.close();
  if (!file) {
    *error = "cannot write --json file '" + path + "'";
    return false;
  }
  return true;
}

}  // namespace hopattn::bench
