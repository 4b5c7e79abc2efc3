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
// (the helpers and checks of sequence_checks.cuh, shared with test_forward_varlen.cu). Page sizes: powers
// of two from 16 in every kernel, any other (a page id a row) where K/V are copied (bf16/fp16, head dims
// up to 128); other combinations and the warp_specialized = false ablation are refused with kUnsupported. FP8
// paged caches are tested in test_fp8_forward_varlen.cu (against the FP8 oracle, fp8_oracle.cuh).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_test_util.cuh"
#include "gpu/paged_case.cuh"
#include "gpu/sequence_checks.cuh"

namespace hopattn::test {
namespace {

constexpr int kPageSizes[] = {16, 32, 64, 128, 256};  // what every sm_90a paged kernel takes (and larger powers)
const std::vector<int> kAllPageSizes(std::begin(kPageSizes), std::end(kPageSizes));
const std::vector<int> kAllHeadDims(std::begin(kNativeHeadDims), std::end(kNativeHeadDims));
// Page sizes only the kernels that copy K/V take (bf16/fp16 at head dims up to 128; every launch from
// them takes those kernels), a page id a row: 1-8 keys (a token-granular cache: SGLang's page_size 1) and
// sizes that are no power of two (3; 24 and 80, multiples of 8 and 16 as vLLM's hybrid models pick).
const std::vector<int> kRowPageSizes = {1, 2, 4, 8, 3, 24, 80};
const std::vector<int> kCopiedHeadDims = {64, 128};

std::string suffix(const PagedCase& c) {
  return "_p" + std::to_string(c.page_size) + "_d" + std::to_string(c.head_dim) + "_" + dtype_name(c.dtype);
}

std::vector<NamedCase<PagedCase>> corner_cases(const std::vector<int>& page_sizes = kAllPageSizes,
                                               const std::vector<int>& head_dims = kAllHeadDims) {
  std::vector<NamedCase<PagedCase>> cases;
  const auto add = [&](const std::string& name, const PagedCase& c) { cases.push_back({name + suffix(c), c}); };

  // Key counts either side of page edges (16 ... 256) and 64-, 128- and 192-key block edges, and a
  // sequence without keys (out 0, LSE -inf), at every page size, head dim and dtype.
  const std::vector<int> edge_keys = {1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193, 1000, 0};
  const int edge_batch = static_cast<int>(edge_keys.size());
  for (int i = 0; i < static_cast<int>(page_sizes.size()); ++i) {
    for (int j = 0; j < static_cast<int>(head_dims.size()); ++j) {
      for (const Dtype dtype : {kBf16, kFp16}) {
        const int heads_q = j == 0 ? 8 : 4, heads_kv = j == 0 ? 2 : j == 1 ? 1 : 4;
        PagedCase c = paged(same(edge_batch, 80), edge_keys, page_sizes[i], heads_q, heads_kv, head_dims[j], dtype);
        c.causal = (i + j) % 2 == 0;  // causal: the rows of the first 80 - len_k see no key
        c.padded_table = i % 2 == 1;
        c.extra_columns = i % 3;
        add(c.causal ? "KeyEdges_causal" : "KeyEdges", c);
      }
    }
  }

  // Each serving shape at every page size, head dim and dtype rotating along.
  for (int i = 0; i < static_cast<int>(page_sizes.size()); ++i) {
    const int ps = page_sizes[i];
    int f = 0;  // feature index: shifts the rotation so that each feature meets every head dim
    const auto d = [&] { return head_dims[(i + f) % head_dims.size()]; };
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

  if (page_sizes == kAllPageSizes) {
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
std::vector<NamedCase<PagedCase>> non_finite_tail_cases(const std::vector<int>& page_sizes = kAllPageSizes,
                                                        const std::vector<int>& head_dims = kAllHeadDims) {
  std::vector<NamedCase<PagedCase>> cases;
  const std::vector<int> keys = {1, 17, 65, 129, 250, 1100, 0};
  const std::vector<int> varlen_rows = {1, 80, 4, 129, 1, 300, 2};
  for (const float value : {NAN, INFINITY}) {
    for (int i = 0; i < static_cast<int>(page_sizes.size()); ++i) {
      for (int j = 0; j < static_cast<int>(head_dims.size()); ++j) {
        for (const Dtype dtype : {kBf16, kFp16}) {
          const bool varlen_q = dtype == kFp16;
          PagedCase c = paged(varlen_q ? varlen_rows : same(static_cast<int>(keys.size()), 80), keys, page_sizes[i],
                              4, 2, head_dims[j], dtype);
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
// 128-row tile), packed by default or not at all, split by the heuristic, into 4 pieces, or not. At
// d 256 (the decoding kernel: tiles of at most 8 rows) one row a sequence, so that ratio 7 packs.
std::vector<NamedCase<PagedCase>> decode_cases(const std::vector<int>& page_sizes = {16, 64, 256},
                                               const std::vector<int>& head_dims = {64, 128, 256}) {
  std::vector<NamedCase<PagedCase>> cases;
  const std::vector<int> keys = {1, 17, 2000, 129, 250, 1100, 0, 3333};
  int index = 0;
  for (const int page_size : page_sizes) {
    for (const int d : head_dims) {
      const std::vector<int> rows =
          d == 256 ? std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1} : std::vector<int>{1, 1, 1, 3, 1, 1, 1, 2};
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

// The cases above again with K/V copied by the producer warpgroup's cp.async (KernelOptions::kv_loads =
// kCopyThreads; kAuto takes the copies only for decoding launches of at least 64 MiB of K/V, larger than
// these). Each warp reads a block's page ids a block ahead of its copies (kv_cp_async.cuh); rows past a
// sequence's keys are copied as zeros (NaN and Inf there must still not reach out); and no table entry
// past the keys in use may be read: a third of the cases hold -1 there and a third an id far past the
// pool, whose page a copy would fault on. Head dims 64 and 128 (and padded dims in those kernels,
// below): where the copy kernels exist.
std::vector<NamedCase<PagedCase>> with_kv_copies(std::vector<NamedCase<PagedCase>> cases) {
  constexpr std::int32_t kFarPastThePool = 1 << 30;
  std::vector<NamedCase<PagedCase>> out =
      with_kv_loads(std::move(cases), KernelOptions::KvLoads::kCopyThreads, 128, "_KvCopies");
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t variant = i % 3;
    if (variant > 0) out[i].c.unused_entry = variant == 1 ? -1 : kFarPastThePool;
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(CornersKvCopies, ForwardPagedCorners, ::testing::ValuesIn(with_kv_copies(corner_cases())),
                         CaseName());
INSTANTIATE_TEST_SUITE_P(TailsKvCopies, ForwardPagedNonFiniteTail,
                         ::testing::ValuesIn(with_kv_copies(non_finite_tail_cases())), CaseName());
INSTANTIATE_TEST_SUITE_P(DecodeKvCopies, ForwardPagedNonFiniteTail, ::testing::ValuesIn(with_kv_copies(decode_cases())),
                         CaseName());

// Decoding steps from pages of 16 keys by TMA (KernelOptions::kv_loads = kTma; kAuto copies them at head
// dims 64 and 128): a block is 8 chunks of K and as many of V, from two producer threads (fwd/producer.cuh,
// run_varlen_producer), whose split pieces, visits without keys and last blocks are here.
INSTANTIATE_TEST_SUITE_P(DecodeKvTma, ForwardPagedNonFiniteTail,
                         ::testing::ValuesIn(with_kv_loads(decode_cases({16}, kCopiedHeadDims),
                                                           KernelOptions::KvLoads::kTma, 128, "_KvTma")),
                         CaseName());

// Pages of kRowPageSizes (a page id a row), at head dims 64 and 128 where the copy kernels are:
// the corner, non-finite tail and decoding cases at those sizes, with kv_loads kAuto (which takes the
// copies for such pages) and kCopyThreads in turn, and -1 or an id far past the pool in the table entries
// past the used pages in a third each.
std::vector<NamedCase<PagedCase>> from_row_pages(std::vector<NamedCase<PagedCase>> cases) {
  int index = 0;
  for (NamedCase<PagedCase>& named : cases) {
    const int variant = index++;
    if (variant % 2 == 1) named.c.kv_loads = KernelOptions::KvLoads::kCopyThreads;
    if (variant % 3 > 0) named.c.unused_entry = variant % 3 == 1 ? -1 : 1 << 30;
    named.name += "_RowPages";
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(CornersRowPages, ForwardPagedCorners,
                         ::testing::ValuesIn(from_row_pages(corner_cases(kRowPageSizes, kCopiedHeadDims))),
                         CaseName());
INSTANTIATE_TEST_SUITE_P(TailsRowPages, ForwardPagedNonFiniteTail,
                         ::testing::ValuesIn(from_row_pages(non_finite_tail_cases(kRowPageSizes, kCopiedHeadDims))),
                         CaseName());
INSTANTIATE_TEST_SUITE_P(DecodeRowPages, ForwardPagedNonFiniteTail,
                         ::testing::ValuesIn(from_row_pages(decode_cases({1, 8, 24}, kCopiedHeadDims))), CaseName());

// Padded head dims through the copies: the columns past d copied as zeros, from pages of 1, 8 and 24 (a
// page id a row), 16 (many pages a block) and 256 (many blocks a page); decoding rows, NaN in every row
// that is no key, -1 past the used pages.
std::vector<NamedCase<PagedCase>> padded_head_dim_kv_copy_cases() {
  std::vector<NamedCase<PagedCase>> cases;
  for (const int d : {40, 72, 112}) {
    for (const int page_size : {1, 8, 24, 16, 256}) {
      PagedCase c = paged({1, 3, 1}, {1000, 17, 300}, page_size, 8, 2, d, kBf16);
      c.varlen_q = true, c.causal = true, c.non_key_value = NAN, c.unused_entry = -1;
      c.kv_loads = KernelOptions::KvLoads::kCopyThreads;
      cases.push_back({"PaddedHeadDim" + suffix(c) + "_KvCopies", c});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(PaddedKvCopies, ForwardPagedNonFiniteTail,
                         ::testing::ValuesIn(padded_head_dim_kv_copy_cases()), CaseName());

class ForwardPaged : public HopperTest {};

constexpr int kMaxKeys = 4000;
constexpr int kMaxQueries = 1000;
constexpr int kRandomCases = 30;
// Bound on heads_q * d * sum_b len_q * len_k (most draws are far below).
constexpr double kMaxWork = 2e10;

// Batch 1-6, a page size of page_sizes; query lengths mostly decode-like (1, 2-8) else log-uniform in
// [1, 1000], key lengths log-uniform in [1, 4000] or at a page or block edge, sometimes 0; varlen q and
// seqused_k at random (without it, full pages); spare pages, extra table columns and a padded table;
// head dims of draw_head_dim (padded ones too), every dtype and GQA ratio; causal, windows, softcap,
// scale, LSE and padded rows at random.
PagedCase random_paged_case(std::mt19937_64& rng, int max_head_dim = 256,
                            const std::vector<int>& page_sizes = kAllPageSizes) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const auto log_uniform = [&](int most) {
    const double x = std::exp(std::uniform_real_distribution<double>(0.0, std::log(double(most)))(rng));
    return std::clamp(static_cast<int>(std::lround(x)), 1, most);
  };

  PagedCase c;
  c.page_size = page_sizes[pick(0, static_cast<int>(page_sizes.size()) - 1)];
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

  draw_settings(rng, c, *std::max_element(c.len_k.begin(), c.len_k.end()), max_head_dim);

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
  random_sweep(kRandomCases, [](std::mt19937_64& rng) { return random_paged_case(rng); }, run_paged_case);
}

// The same draws at head dims up to 128 through the K/V copies (KernelOptions::kv_loads = kCopyThreads),
// the table entries past the used pages valid ids, -1 or ids far past the pool in turn.
TEST_F(ForwardPaged, RandomBatchesThroughKvCopiesMatchReference) {
  const auto draw = [](std::mt19937_64& rng) {
    PagedCase c = random_paged_case(rng, 128);
    c.kv_loads = KernelOptions::KvLoads::kCopyThreads;
    const int variant = std::uniform_int_distribution<int>(0, 2)(rng);
    if (variant > 0) c.unused_entry = variant == 1 ? -1 : 1 << 30;
    return c;
  };
  random_sweep(kRandomCases, draw, run_paged_case);
}

// The same draws from pages of kRowPageSizes, with kv_loads kAuto or kCopyThreads and the table entries
// past the used pages valid ids, -1 or ids far past the pool in turn.
TEST_F(ForwardPaged, RandomBatchesFromRowPagesMatchReference) {
  const auto draw = [](std::mt19937_64& rng) {
    PagedCase c = random_paged_case(rng, 128, kRowPageSizes);
    if (std::bernoulli_distribution(0.5)(rng)) c.kv_loads = KernelOptions::KvLoads::kCopyThreads;
    const int variant = std::uniform_int_distribution<int>(0, 2)(rng);
    if (variant > 0) c.unused_entry = variant == 1 ? -1 : 1 << 30;
    return c;
  };
  random_sweep(kRandomCases, draw, run_paged_case);
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

// Pages TMA cannot load (1-8 keys, or no power of two) outside the kernels that copy K/V: at head dim 256
// or with kv_loads = kTma (FP8: test_fp8_forward_refusals.cu); refused, naming page_size and what is not
// taken with them.
TEST_F(ForwardPaged, RowPagesOutsideTheCopyKernelsAreUnsupported) {
  for (const int page_size : {1, 8, 24, 200}) {
    for (const bool varlen_q : {false, true}) {
      PagedCase wide = refusal_case(page_size, varlen_q, kBf16);
      wide.head_dim = 256;
      PagedCase tma = refusal_case(page_size, varlen_q, kFp16);
      tma.kv_loads = KernelOptions::KvLoads::kTma;
      for (const auto& [c, named] : {std::pair{wide, "head dim 256"}, std::pair{tma, "kv_loads = kTma"}}) {
        std::string problems = expect_refused(c, named);
        problems += expect_refused(c, ("page_size " + std::to_string(page_size)).c_str());
        EXPECT_TRUE(problems.empty()) << c.describe() << "\n  " << problems;
      }
    }
  }
}

// K/V copies (KernelOptions::kv_loads = kCopyThreads) from a paged cache exist at head dims up to 128:
// at 256 they are refused, naming the option.
TEST_F(ForwardPaged, KvCopiesAtHeadDim256AreUnsupported) {
  for (const bool varlen_q : {false, true}) {
    PagedCase c = refusal_case(64, varlen_q, kBf16);
    c.head_dim = 256;
    c.kv_loads = KernelOptions::KvLoads::kCopyThreads;
    const std::string problems = expect_refused(c, "kv_loads = kCopyThreads");
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
