// The sm_90a forward with a paged KV cache (FwdArgs::page_table), bf16 and fp16. k and v are pools of
// (num_pages, page_size, heads_kv, d); key j of sequence b lives at page page_table[b][j / page_size],
// row j % page_size; sequence b has seqused_k[b] keys, or pages_per_seq * page_size without seqused_k.
// q is dense or varlen (cu_seqlens_q). The caches are built the way a serving engine leaves them: more
// pages than the table can reach, each sequence's pages distinct and shuffled, the pages nobody uses
// and the unused tail rows of each sequence's last page full of large finite garbage, or of NaN or
// +Inf as a cache allocated with torch.empty may be (the kernel loads the tail rows with a sequence's
// last K/V block: they must not reach out), table entries past a sequence's used pages valid but wrong,
// and sometimes table rows padded (a view of a wider table). Each sequence is an ordinary attention
// problem of its own lengths (masks bottom-right aligned with its key count): its keys are gathered
// into contiguous buffers and the float32 GPU reference runs on batch-1 views, judged by the rule of
// the dense tests (forward_case.cu), with outputs poisoned with NaN and bracketed by poisoned guards
// (the helpers and checks of sequence_checks.cuh, shared with test_forward_varlen.cu). Page sizes other
// than powers of two >= 16, FP8 and the warp_specialized = false ablation are refused with kUnsupported.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.cuh"
#include "gpu/sequence_checks.cuh"

namespace hopattn::test {
namespace {

constexpr int kTablePad = 3;     // entries after each row of a padded page table (outside its view)
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

std::string PagedCase::describe() const {
  std::ostringstream s;
  s << (varlen_q ? "varlen q " : "dense q ") << join(len_q) << (with_seqused_k ? " seqused_k " : " full pages ")
    << join(len_k) << " page_size " << page_size << " pages_per_seq " << pages_per_seq() << " num_pages "
    << num_pages() << (padded_table ? " padded-table" : "");
  if (non_key_value) s << " non-key rows " << *non_key_value;
  describe_to(s);
  if (!options.warp_specialized) s << " no-warp-specialized";
  return s.str();
}

void check_case_shape(const PagedCase& c) {
  if (c.batch() < 1 || c.len_k.size() != c.len_q.size())
    throw std::invalid_argument("test case: one length per sequence on each side");
  if (c.page_size < 1 || c.spare_pages < 0 || c.extra_columns < 0)
    throw std::invalid_argument("test case: page_size >= 1, spare_pages and extra_columns >= 0");
  if (!c.varlen_q && (!all_equal(c.len_q) || c.len_q[0] < 1))
    throw std::invalid_argument("test case: dense q needs equal lengths >= 1");
  if (std::accumulate(c.len_q.begin(), c.len_q.end(), 0) < 1)
    throw std::invalid_argument("test case: CUDA tensors need at least one query row");
  if (*std::min_element(c.len_k.begin(), c.len_k.end()) < 0) throw std::invalid_argument("test case: len_k < 0");
  if (!c.with_seqused_k && (!all_equal(c.len_k) || c.len_k[0] < c.page_size || c.len_k[0] % c.page_size != 0 ||
                            c.extra_columns != 0))
    throw std::invalid_argument("test case: without seqused_k every sequence fills its pages_per_seq pages");
}

// dst row r = src row pages[r / page_size] * page_size + r % page_size, for the `rows` rows of one
// sequence (16-bit elements, row_elements per row, padding included).
__global__ void gather_pages_kernel(const std::uint16_t* src, std::uint16_t* dst, const std::int32_t* pages,
                                    int page_size, std::int64_t row_elements, std::int64_t rows) {
  const std::int64_t n = rows * row_elements;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / row_elements, col = i % row_elements;
    const std::int64_t src_row = std::int64_t(pages[r / page_size]) * page_size + r % page_size;
    dst[i] = src[src_row * row_elements + col];
  }
}

// Sequence b's keys (or values) out of the pool into rows [start, start + len) of `dst`.
void gather_sequence(const RowView& pool, const RowView& dst, int start, int len, const std::int32_t* pages,
                     int page_size) {
  if (len == 0) return;
  gather_pages_kernel<<<grid_for(std::int64_t(len) * pool.row_stride), 256>>>(
      reinterpret_cast<const std::uint16_t*>(pool.base), reinterpret_cast<std::uint16_t*>(dst.row(start)), pages,
      page_size, pool.row_stride, len);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

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

PagedCall::PagedCall(const PagedCase& c, std::uint64_t seed) {
  check_case_shape(c);
  const int batch = c.batch(), hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim, ps = c.page_size;
  const int pages_per_seq = c.pages_per_seq(), num_pages = c.num_pages();
  const bool fp8 = c.dtype == Dtype::kFloat8E4M3;
  starts_q = prefix_sums(c.len_q);

  // Pages: every id once, shuffled; sequence b takes the next pages_for(b) of them, in that order.
  // Every other entry, past a sequence's used pages or in a padded row's spare columns, is a valid
  // id drawn at random (often a garbage page, sometimes another sequence's): never to be used.
  std::mt19937_64 rng(splitmix64(seed ^ 4));
  std::vector<int> order(num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> any_page(0, num_pages - 1);
  table_stride = pages_per_seq + (c.padded_table ? kTablePad : 0);
  table.assign(std::size_t(batch) * table_stride, 0);
  std::vector<std::uint8_t> garbage(std::size_t(num_pages) * ps, 1);  // per pool row: not a key of anyone
  int next = 0;
  for (int b = 0; b < batch; ++b) {
    for (int p = 0; p < table_stride; ++p) {
      const bool used = p < c.pages_for(b);
      const int page = used ? order[next++] : any_page(rng);
      table[std::size_t(b) * table_stride + p] = page;
      if (!used) continue;
      const int keys_here = std::min(ps, c.len_k[b] - p * ps);
      std::fill_n(garbage.begin() + std::int64_t(page) * ps, keys_here, std::uint8_t{0});
    }
  }

  // Inputs: fresh normal values (e4m3: 1.0), then +-kGarbage (or non_key_value) in every pool row that
  // is no key.
  q = make_rows(c.dtype, starts_q.back(), hq, d, c.padded_rows, 0);
  k = make_rows(c.dtype, std::int64_t(num_pages) * ps, hkv, d, c.padded_rows, 0);
  v = make_rows(c.dtype, std::int64_t(num_pages) * ps, hkv, d, c.padded_rows, 0);
  if (fp8) {
    fill_e4m3_ones({&q, &k, &v});
  } else {
    fill_inputs(q, k, v, seed, c.amplitude);
    const DeviceBuffer flags = upload(garbage);
    fill_flagged_rows(k, flags, c.non_key_value.value_or(kGarbage));
    fill_flagged_rows(v, flags, c.non_key_value.value_or(-kGarbage));
  }

  outputs = PoisonedOutputs(fp8 ? kBf16 : c.dtype, starts_q, c.varlen_q, hq, d, c.padded_rows, c.with_lse);

  table_dev = upload(table);
  if (c.varlen_q) cu_q = upload(starts_q);
  if (c.with_seqused_k) seqused = upload(c.len_k);
  args.q = q.view.api_tensor(starts_q, c.varlen_q);
  args.k = k.view.pages(num_pages, ps);
  args.v = v.view.pages(num_pages, ps);
  outputs.set_args(args, starts_q, c.varlen_q);
  args.page_table = cuda_view(table_dev.data(), Dtype::kInt32, {batch, pages_per_seq}, {table_stride, 1});
  if (cu_q) args.cu_seqlens_q = make_tensor(cu_q->data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
  if (seqused) args.seqused_k = make_tensor(seqused->data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
  // The true maxima (validation takes seqlen_q from a dense q and pages_per_seq * page_size for k).
  args.max_seqlen_q = *std::max_element(c.len_q.begin(), c.len_q.end());
  args.max_seqlen_k = *std::max_element(c.len_k.begin(), c.len_k.end());
  c.set_args(args);
  args.options.warp_specialized = c.options.warp_specialized;
}

// Runs `c` on data drawn from `seed` and returns what is wrong (empty when nothing is): forward must
// return Ok, and each sequence pass check_sequences on its keys gathered out of the pool.
std::string run_paged_case(const PagedCase& c, std::uint64_t seed) {
  try {
    PagedCall call(c, seed);
    if (std::string why = forward_problem(call.args); !why.empty()) return why;

    const int batch = c.batch(), d = c.head_dim;

    // Each sequence's keys and values gathered out of the pool through its table row, one sequence
    // after the other (rows laid out like the pool's, padding included).
    const std::vector<int> starts_k = prefix_sums(c.len_k);
    const RowBuffer keys = make_rows(c.dtype, starts_k.back(), c.heads_kv, d, c.padded_rows, 0);
    const RowBuffer values = make_rows(c.dtype, starts_k.back(), c.heads_kv, d, c.padded_rows, 0);
    for (int b = 0; b < batch; ++b) {
      gather_sequence(call.k.view, keys.view, starts_k[b], c.len_k[b], call.device_pages(b), c.page_size);
      gather_sequence(call.v.view, values.view, starts_k[b], c.len_k[b], call.device_pages(b), c.page_size);
    }

    SequenceRows rows;
    rows.len_q = c.len_q, rows.starts_q = call.starts_q, rows.len_k = c.len_k, rows.starts_k = starts_k;
    rows.q = call.q.view, rows.k = keys.view, rows.v = values.view;
    return check_sequences(c, rows, call.outputs);
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

// A case of dense q (every len_q equal) over seqused_k; the tests then change what they need.
PagedCase paged(std::vector<int> len_q, std::vector<int> len_k, int page_size, int heads_q, int heads_kv,
                int head_dim, Dtype dtype) {
  PagedCase c;
  c.len_q = std::move(len_q);
  c.len_k = std::move(len_k);
  c.page_size = page_size;
  c.heads_q = heads_q, c.heads_kv = heads_kv, c.head_dim = head_dim, c.dtype = dtype;
  return c;
}

std::vector<int> same(int count, int value) { return std::vector<int>(count, value); }

constexpr int kPageSizes[] = {16, 32, 64, 128, 256};  // what the sm_90a kernel takes (and larger powers)

std::string suffix(const PagedCase& c) {
  return "_p" + std::to_string(c.page_size) + "_d" + std::to_string(c.head_dim) + "_" + dtype_name(c.dtype);
}

std::vector<NamedCase<PagedCase>> corner_cases() {
  std::vector<NamedCase<PagedCase>> cases;
  const auto add = [&](const std::string& name, const PagedCase& c) { cases.push_back({name + suffix(c), c}); };

  // Key counts either side of page edges (16 ... 256) and 64-, 128- and 192-key block edges, and a
  // sequence without keys (out 0, LSE -inf), at every page size, head dim and dtype.
  const std::vector<int> edge_keys = {1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193, 1000, 0};
  const int edge_batch = static_cast<int>(edge_keys.size());
  for (int i = 0; i < static_cast<int>(std::size(kPageSizes)); ++i) {
    for (int j = 0; j < static_cast<int>(std::size(kNativeHeadDims)); ++j) {
      for (const Dtype dtype : {kBf16, kFp16}) {
        const int heads_q = j == 0 ? 8 : 4, heads_kv = j == 0 ? 2 : j == 1 ? 1 : 4;
        PagedCase c =
            paged(same(edge_batch, 80), edge_keys, kPageSizes[i], heads_q, heads_kv, kNativeHeadDims[j], dtype);
        c.causal = (i + j) % 2 == 0;  // causal: the rows of the first 80 - len_k see no key
        c.padded_table = i % 2 == 1;
        c.extra_columns = i % 3;
        add(c.causal ? "KeyEdges_causal" : "KeyEdges", c);
      }
    }
  }

  // Each serving shape at every page size, head dim and dtype rotating along.
  for (int i = 0; i < static_cast<int>(std::size(kPageSizes)); ++i) {
    const int ps = kPageSizes[i];
    int f = 0;  // feature index: shifts the rotation so that each feature meets every head dim
    const auto d = [&] { return kNativeHeadDims[(i + f) % 3]; };
    const auto dtype = [&] { return (i + f) % 2 ? kFp16 : kBf16; };
    {
      // Decode: one query row against a long cache, GQA 8/1 (causal or not: the same mask at one row).
      PagedCase c = paged(same(3, 1), {4000, 1, 2049}, ps, 8, 1, d(), dtype());
      c.causal = i % 2 == 1;
      add("Decode", c);
    }
    ++f;
    {
      // Speculative decoding: 4 query rows, causal; 3 keys leave the first row without a key.
      PagedCase c = paged(same(5, 4), {1000, 3, 4, 129, 0}, ps, 8, 2, d(), dtype());
      c.causal = true;
      add("SpeculativeDecode_causal", c);
    }
    ++f;
    {
      // Prefill of a 300-token chunk onto a cache: every query sees the cache and its own prefix.
      PagedCase c = paged(same(2, 300), {1000, 513}, ps, 4, 2, d(), dtype());
      c.causal = true;
      add("PrefillWithCache_causal", c);
    }
    ++f;
    {
      PagedCase c = paged(same(4, 200), {1000, 129, 64, 200}, ps, 4, 4, d(), dtype());
      c.window_left = 100, c.window_right = 0, c.padded_table = true;
      add("Window100_0", c);
    }
    ++f;
    {
      PagedCase c = paged(same(3, 129), {513, 1, 256}, ps, 6, 2, d(), dtype());
      c.softcap = 30.0f, c.amplitude = 3.0f;
      add("Softcap30", c);
    }
    ++f;
    {
      // Varlen q: an empty query sequence, a sequence without keys, lengths around the tile edges.
      PagedCase c = paged({1, 300, 0, 64, 129, 4}, {1000, 300, 50, 0, 129, 2000}, ps, 8, 2, d(), dtype());
      c.varlen_q = true, c.causal = true, c.padded_table = i % 2 == 0;
      add("VarlenQ_causal", c);
    }
    ++f;
    {
      // No seqused_k: every sequence has all pages_per_seq * page_size keys; padded q/k/v/out rows.
      const int keys = (600 + ps - 1) / ps * ps;
      PagedCase c = paged(same(3, 100), same(3, keys), ps, 4, 1, d(), dtype());
      c.with_seqused_k = false, c.extra_columns = 0, c.padded_rows = true, c.with_lse = i % 2 == 0;
      add("FullPagesWithoutSequsedK", c);
    }
  }

  {
    // A power of two beyond 256: allowed by the rule (powers of two >= 16).
    PagedCase c = paged(same(4, 4), {4000, 511, 513, 0}, 512, 8, 2, 128, kBf16);
    c.causal = true;
    add("PageSize512_causal", c);
  }
  return cases;
}

class ForwardPagedCorners : public HopperTest, public ::testing::WithParamInterface<NamedCase<PagedCase>> {};

TEST_P(ForwardPagedCorners, EverySequenceMatchesReference) {
  const std::uint64_t seed = run_seed();
  const PagedCase& c = GetParam().c;
  const std::string problems = run_paged_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Corners, ForwardPagedCorners, ::testing::ValuesIn(corner_cases()), CaseName());

// NaN and +Inf in every pool row that is no key (k and v), as in a cache allocated with torch.empty:
// the rest of each sequence's last page, which its last K/V block loads (and the mask drops from the
// scores; its v rows must not reach out either), and the pages nobody uses. Every key count but 0
// leaves rows past it in its last page and in its last block, for each block width (64 keys at d 256,
// 128 at d 64 and 128, 192 at d 64 with pages under 128 since the longest sequence has more than 1024
// keys), at every page size, head dim and dtype, causal or not, dense q (80 rows) or varlen q
// (decode rows among prefill ones).
std::vector<NamedCase<PagedCase>> non_finite_tail_cases() {
  std::vector<NamedCase<PagedCase>> cases;
  const std::vector<int> keys = {1, 17, 65, 129, 250, 1100, 0};
  const std::vector<int> varlen_rows = {1, 80, 4, 129, 1, 300, 2};
  for (const float value : {NAN, INFINITY}) {
    for (int i = 0; i < static_cast<int>(std::size(kPageSizes)); ++i) {
      for (int j = 0; j < static_cast<int>(std::size(kNativeHeadDims)); ++j) {
        for (const Dtype dtype : {kBf16, kFp16}) {
          const bool varlen_q = dtype == kFp16;
          PagedCase c = paged(varlen_q ? varlen_rows : same(static_cast<int>(keys.size()), 80), keys, kPageSizes[i],
                              4, 2, kNativeHeadDims[j], dtype);
          c.varlen_q = varlen_q;
          c.causal = (i + j) % 2 == 0;
          c.non_key_value = value;
          const std::string name = std::string(std::isnan(value) ? "Nan" : "Inf") + (c.causal ? "_causal" : "");
          cases.push_back({name + suffix(c), c});
        }
      }
    }
  }
  return cases;
}

class ForwardPagedNonFiniteTail : public HopperTest, public ::testing::WithParamInterface<NamedCase<PagedCase>> {};

TEST_P(ForwardPagedNonFiniteTail, OutputIsThatOfTheKeysAlone) {
  const std::uint64_t seed = run_seed();
  const PagedCase& c = GetParam().c;
  const std::string problems = run_paged_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Tails, ForwardPagedNonFiniteTail, ::testing::ValuesIn(non_finite_tail_cases()),
                         CaseName());

// Decoding from a paged cache, as a serving engine does: one query row per sequence (a few draft rows
// in some), NaN in every row that is no key, GQA ratios 4 and 7 (28 / 4, which does not divide the
// 128-row tile), packed by default or not at all, split by the heuristic, into 4 pieces, or not.
std::vector<NamedCase<PagedCase>> decode_cases() {
  std::vector<NamedCase<PagedCase>> cases;
  const std::vector<int> keys = {1, 17, 2000, 129, 250, 1100, 0, 3333};
  const std::vector<int> rows = {1, 1, 1, 3, 1, 1, 1, 2};
  int index = 0;
  for (const int page_size : {16, 64, 256}) {
    for (const int d : {64, 128}) {
      for (const int num_splits : {0, 1, 4}) {
        for (const auto pack : {KernelOptions::PackGqa::kAuto, KernelOptions::PackGqa::kOff}) {
          const bool ratio7 = index % 2 == 0;
          const Dtype dtype = index % 3 == 0 ? kFp16 : kBf16;
          PagedCase c = paged(rows, keys, page_size, ratio7 ? 28 : 8, ratio7 ? 4 : 2, d, dtype);
          c.varlen_q = true;
          c.causal = index % 4 != 3;
          c.non_key_value = NAN;
          c.num_splits = num_splits;
          c.pack_gqa = pack;
          const std::string name = std::string(pack == KernelOptions::PackGqa::kOff ? "Unpacked" : "Packed") +
                                   "_splits" + std::to_string(num_splits);
          cases.push_back({name + suffix(c), c});
          ++index;
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Decode, ForwardPagedNonFiniteTail, ::testing::ValuesIn(decode_cases()), CaseName());

class ForwardPaged : public HopperTest {};

constexpr int kMaxKeys = 4000;
constexpr int kMaxQueries = 1000;
constexpr int kRandomCases = 30;
// Bound on heads_q * d * sum_b len_q * len_k (most draws are far below).
constexpr double kMaxWork = 2e10;

// Batch 1-6, a page size of kPageSizes; query lengths mostly decode-like (1, 2-8) else log-uniform in
// [1, 1000], key lengths log-uniform in [1, 4000] or at a page or block edge, sometimes 0; varlen q and
// seqused_k at random (without it, full pages); spare pages, extra table columns and a padded table;
// head dims of draw_head_dim (padded ones too), every dtype and GQA ratio; causal, windows, softcap,
// scale, LSE and padded rows at random.
PagedCase random_paged_case(std::mt19937_64& rng) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const auto log_uniform = [&](int most) {
    const double x = std::exp(std::uniform_real_distribution<double>(0.0, std::log(double(most)))(rng));
    return std::clamp(static_cast<int>(std::lround(x)), 1, most);
  };

  PagedCase c;
  c.page_size = kPageSizes[pick(0, static_cast<int>(std::size(kPageSizes)) - 1)];
  const int ps = c.page_size;
  const auto query_length = [&] { return chance(0.3) ? 1 : chance(0.3) ? pick(2, 8) : log_uniform(kMaxQueries); };
  const auto key_length = [&] {
    const int edges[] = {ps - 1, ps, ps + 1, 2 * ps - 1, 2 * ps + 1, 63, 64, 65, 127, 128, 129, 191, 192, 193};
    return chance(0.25) ? edges[pick(0, static_cast<int>(std::size(edges)) - 1)] : log_uniform(kMaxKeys);
  };
  const int batch = pick(1, 6);
  c.varlen_q = chance(0.5);
  c.with_seqused_k = chance(0.85);
  const int dense_q = query_length(), full_keys = (key_length() + ps - 1) / ps * ps;
  for (int b = 0; b < batch; ++b) {
    c.len_q.push_back(!c.varlen_q ? dense_q : chance(0.08) ? 0 : query_length());
    c.len_k.push_back(!c.with_seqused_k ? full_keys : chance(0.08) ? 0 : key_length());
  }
  if (prefix_sums(c.len_q).back() == 0) c.len_q[0] = 1;  // CUDA tensors may not be empty
  c.extra_columns = c.with_seqused_k ? pick(0, 3) : 0;
  c.spare_pages = pick(1, 16);
  c.padded_table = chance(0.5);

  draw_settings(rng, c, *std::max_element(c.len_k.begin(), c.len_k.end()));

  // Fewer heads first, then every length by a quarter (full pages stay whole pages), until the work fits.
  while (c.work() > kMaxWork) {
    if (!shrink_heads(c)) {
      for (int& n : c.len_q) n = n == 0 ? 0 : std::max(1, n * 3 / 4);
      for (int& n : c.len_k)
        n = c.with_seqused_k ? (n == 0 ? 0 : std::max(1, n * 3 / 4)) : std::max(ps, n * 3 / 4 / ps * ps);
    }
  }
  return c;
}

TEST_F(ForwardPaged, RandomBatchesMatchReference) {
  random_sweep(kRandomCases, random_paged_case, run_paged_case);
}

// Runs `c`, which forward must refuse with kUnsupported and a message (containing `must_mention` when
// given) before writing anything; returns what is wrong.
std::string expect_refused(const PagedCase& c, const char* must_mention) {
  try {
    PagedCall call(c, 1);
    const Status status = forward(call.args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    std::ostringstream problems;
    if (status.code() != StatusCode::kUnsupported)
      problems << "expected kUnsupported, got code " << int(status.code()) << ": " << status.message() << "; ";
    if (status.message().empty()) problems << "kUnsupported must say what is unsupported; ";
    if (must_mention && status.message().find(must_mention) == std::string::npos)
      problems << "the message does not mention " << must_mention << ": " << status.message() << "; ";
    const PoisonedOutputs& o = call.outputs;
    if (const std::int64_t n = count_unpoisoned(o.out.storage.data(), o.out.view.dtype, o.out.elements))
      problems << "out: " << n << " elements written; ";
    if (o.lse) {
      if (const std::int64_t n = count_unpoisoned(o.lse->storage.data(), Dtype::kFloat32, o.lse->elements))
        problems << "lse: " << n << " entries written; ";
    }
    return problems.str();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

// A small paged call to be refused, dense or varlen q.
PagedCase refusal_case(int page_size, bool varlen_q, Dtype dtype) {
  PagedCase c = varlen_q ? paged({3, 0, 5}, {40, 17, 0}, page_size, 4, 2, 128, dtype)
                         : paged(same(3, 4), {40, 17, 0}, page_size, 4, 2, 128, dtype);
  c.varlen_q = varlen_q;
  c.causal = true;
  return c;
}

// The kernel takes page sizes that are powers of two >= 16; any other is refused, naming page_size.
TEST_F(ForwardPaged, OtherPageSizesAreUnsupported) {
  for (const int page_size : {1, 8, 24, 48, 96, 200}) {
    for (const bool varlen_q : {false, true}) {
      for (const Dtype dtype : {kBf16, kFp16}) {
        const PagedCase c = refusal_case(page_size, varlen_q, dtype);
        const std::string problems = expect_refused(c, "page_size");
        EXPECT_TRUE(problems.empty()) << c.describe() << "\n  " << problems;
      }
    }
  }
}

TEST_F(ForwardPaged, Fp8IsUnsupported) {
  for (const bool varlen_q : {false, true}) {
    const PagedCase c = refusal_case(64, varlen_q, Dtype::kFloat8E4M3);
    const std::string problems = expect_refused(c, nullptr);
    EXPECT_TRUE(problems.empty()) << c.describe() << "\n  " << problems;
  }
}

TEST_F(ForwardPaged, WithoutWarpSpecializationIsUnsupported) {
  for (const bool varlen_q : {false, true}) {
    for (const Dtype dtype : {kBf16, kFp16}) {
      PagedCase c = refusal_case(64, varlen_q, dtype);
      c.options.warp_specialized = false;
      const std::string problems = expect_refused(c, nullptr);
      EXPECT_TRUE(problems.empty()) << c.describe() << "\n  " << problems;
    }
  }
}

}  // namespace
}  // namespace hopattn::test
