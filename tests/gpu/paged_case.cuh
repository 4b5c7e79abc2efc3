// One forward call over a paged KV cache of the GPU tests (test_forward_paged.cu, test_head_dims.cu):
// the case, the buffers of a call built the way a serving engine leaves a cache (shuffled pages, garbage
// or NaN/+Inf in every pool row that is no key, stale or invalid table entries past the used pages), and its
// judgement, sequence by sequence on the keys gathered out of the pool, by check_sequences
// (sequence_checks.cuh).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.cuh"
#include "gpu/sequence_checks.cuh"

namespace hopattn::test {

constexpr float kGarbage = 1e4f;  // in unused pages and tail rows: +kGarbage in k, -kGarbage in v

// One paged call. Dense q (varlen_q false) is (batch, seqlen_q, heads, d) with every len_q equal. The
// dtype is float8_e4m3 only in the refusal tests (out then bf16).
struct PagedCase : CallSettings {
  std::vector<int> len_q;  // query rows of each sequence
  std::vector<int> len_k;  // keys of each sequence (its seqused_k entry)
  bool varlen_q = false;
  // Without seqused_k every sequence has pages_per_seq * page_size keys: len_k all equal, a multiple
  // of page_size, and no extra table columns.
  bool with_seqused_k = true;
  int page_size = 64;
  int extra_columns = 1;  // table columns past the longest sequence's pages (valid, wrong entries)
  int spare_pages = 7;    // pages of the pool past batch * pages_per_seq (garbage, never in use)
  bool padded_table = false;  // the table a (batch, pages_per_seq) view of (batch, pages_per_seq + 3)
  // In every pool row that is no key, k and v both; without it +kGarbage in k and -kGarbage in v.
  std::optional<float> non_key_value;
  // In every table entry past a sequence's used pages (and in a padded table's spare columns) instead
  // of a valid, wrong page id: -1 as serving engines leave such entries, or an id far past the pool,
  // whose page a copy would fault on.
  std::optional<std::int32_t> unused_entry;
  KernelOptions options;

  int batch() const { return static_cast<int>(len_q.size()); }
  int pages_for(int b) const { return (len_k[b] + page_size - 1) / page_size; }
  int pages_per_seq() const {
    if (!with_seqused_k) return len_k[0] / page_size;
    int most = 0;
    for (int b = 0; b < batch(); ++b) most = std::max(most, pages_for(b));
    return std::max(1, most + extra_columns);
  }
  int num_pages() const { return batch() * pages_per_seq() + spare_pages; }
  double work() const {
    double pairs = 0;
    for (int b = 0; b < batch(); ++b) pairs += double(len_q[b]) * len_k[b];
    return pairs * heads_q * head_dim;
  }
  std::string describe() const;
};

// Everything one call needs: the pool, the table, q, poisoned out and LSE, and the FwdArgs over them.
struct PagedCall {
  std::vector<int> starts_q;
  std::vector<std::int32_t> table;  // host copy: batch rows of table_stride entries
  int table_stride = 0;
  RowBuffer q, k, v;
  PoisonedOutputs outputs;
  DeviceBuffer table_dev;
  std::optional<DeviceBuffer> cu_q, seqused;
  FwdArgs args;

  PagedCall(const PagedCase& c, std::uint64_t seed);
  // Sequence b's row of the table on the device.
  const std::int32_t* device_pages(int b) const {
    return table_dev.as<std::int32_t>() + std::int64_t(b) * table_stride;
  }
};

// Runs `c` on data drawn from `seed` and returns what is wrong (empty when nothing is): forward must
// return Ok, and each sequence pass check_sequences on its keys gathered out of the pool.
std::string run_paged_case(const PagedCase& c, std::uint64_t seed);

// A case of dense q (every len_q equal) over seqused_k; the tests then change what they need.
PagedCase paged(std::vector<int> len_q, std::vector<int> len_k, int page_size, int heads_q, int heads_kv,
                int head_dim, Dtype dtype);

inline std::vector<int> same(int count, int value) { return std::vector<int>(count, value); }

}  // namespace hopattn::test
