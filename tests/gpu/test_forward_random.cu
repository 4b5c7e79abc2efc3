// The sm_90a forward against the float32 GPU reference: a sweep of random configurations on fresh
// data, strided (packed qkv, head-major, padded) views, and run-to-run determinism.
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/forward_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

// Work bound per case (batch * heads_q * seqlen_q * seqlen_k * d): one head of 4500 x 4500 at d 256
// fits; the sweep of ~240 cases then runs well under a minute on an H200.
constexpr double kMaxWork = 5.5e9;
constexpr int kCoreCases = 200;   // first-supported features only
constexpr int kExtraCases = 40;   // may add a window or softcap: kUnsupported is acceptable there

struct SweepCounts {
  int passed = 0, failed = 0, refused_supported = 0, refused_other = 0;
};

// Runs one case and records the outcome as a gtest failure where it is one.
void run_and_record(const ForwardCase& c, const KernelOptions& options, std::uint64_t run_seed_value, int index,
                    SweepCounts& counts) {
  const std::uint64_t case_seed = splitmix64(run_seed_value + index);
  const CaseResult r = run_forward_case(c, options, case_seed);
  const std::string where = "case " + std::to_string(index) + " (HOPATTN_TEST_SEED=" +
                            std::to_string(run_seed_value) + "): " + c.describe();
  switch (r.kind) {
    case CaseResult::kPassed: ++counts.passed; break;
    case CaseResult::kFailed:
      ++counts.failed;
      ADD_FAILURE() << where << "\n  " << r.detail;
      break;
    case CaseResult::kUnsupported:
      if (c.in_first_supported_set()) {
        ++counts.refused_supported;
        ADD_FAILURE() << where << "\n  refused a supported configuration: " << r.detail;
      } else {
        ++counts.refused_other;
      }
      break;
  }
}

class ForwardRandom : public HopperTest {};

TEST_F(ForwardRandom, RandomConfigurationsMatchReference) {
  const std::uint64_t seed = run_seed();
  RecordProperty("seed", std::to_string(seed));
  std::cout << "[ seed     ] HOPATTN_TEST_SEED=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  SweepCounts counts;
  constexpr int kEdges = static_cast<int>(std::size(kEdgeSeqlens));
  for (int i = 0; i < kCoreCases + kExtraCases; ++i) {
    // The first cases put every edge length on the query side, then on the key side.
    const int forced_q = i < kEdges ? kEdgeSeqlens[i] : 0;
    const int forced_k = i >= kEdges && i < 2 * kEdges ? kEdgeSeqlens[i - kEdges] : 0;
    const ForwardCase c = random_case(rng, kMaxWork, i >= kCoreCases, forced_q, forced_k);
    run_and_record(c, KernelOptions{}, seed, i, counts);
    if (counts.failed + counts.refused_supported >= 20) {
      ADD_FAILURE() << "stopping after 20 failing cases";
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ sweep    ] passed " << counts.passed << ", failed " << counts.failed
            << ", refused (supported set) " << counts.refused_supported << ", refused (window/softcap) "
            << counts.refused_other << " in " << seconds << " s" << std::endl;
  EXPECT_GE(counts.passed, kCoreCases) << "every first-supported configuration must run and pass";
}

class ForwardStrides : public HopperTest, public ::testing::WithParamInterface<ForwardCase> {};

// q, k, v as head slices of one packed qkv buffer, or viewed head-major, or with padded rows; out and
// lse likewise strided. Nothing outside the views may be written.
TEST_P(ForwardStrides, StridedViewsMatchReference) {
  const std::uint64_t seed = run_seed();
  const ForwardCase& c = GetParam();
  const CaseResult r = run_forward_case(c, KernelOptions{}, seed);
  EXPECT_EQ(r.kind, CaseResult::kPassed) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << r.detail;
}

ForwardCase strided(int b, int hq, int hkv, int sq, int sk, int d, Dtype dtype, bool causal, Layout layout,
                    bool packed) {
  ForwardCase c;
  c.batch = b, c.heads_q = hq, c.heads_kv = hkv, c.seqlen_q = sq, c.seqlen_k = sk, c.head_dim = d;
  c.dtype = dtype, c.causal = causal, c.layout = layout, c.packed_qkv = packed;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ForwardStrides,
    ::testing::Values(strided(2, 4, 2, 333, 333, 128, Dtype::kBFloat16, true, Layout::kContiguous, true),
                      strided(3, 8, 1, 1, 1, 64, Dtype::kFloat16, false, Layout::kContiguous, true),
                      strided(1, 2, 2, 129, 129, 256, Dtype::kFloat16, false, Layout::kPaddedRows, true),
                      strided(2, 6, 3, 200, 777, 64, Dtype::kBFloat16, true, Layout::kHeadMajor, false),
                      strided(1, 4, 1, 1000, 65, 128, Dtype::kFloat16, true, Layout::kPaddedRows, false),
                      strided(2, 2, 1, 63, 4097, 256, Dtype::kBFloat16, false, Layout::kHeadMajor, false)));

// Decoding steps (a query row or four a sequence, GQA heads packed, every tile split) over q, k, v and
// out stored head-major, as PyTorch's SDPA takes them (hopattn-bench --kv-heads-major): by TMA and by
// the producer's K/V copies, whose addresses come from the strides. d 64's transposed tiles, d 128's,
// an MHA step, and a d 256 decoding-kernel step.
class ForwardHeadMajorDecoding : public HopperTest {};

TEST_F(ForwardHeadMajorDecoding, StepsMatchReference) {
  const std::uint64_t seed = run_seed();
  const ForwardCase cases[] = {
      strided(1, 32, 8, 1, 3001, 64, Dtype::kBFloat16, false, Layout::kHeadMajor, false),
      strided(2, 8, 2, 1, 1537, 128, Dtype::kFloat16, false, Layout::kHeadMajor, false),
      strided(3, 4, 4, 1, 700, 64, Dtype::kFloat16, true, Layout::kHeadMajor, false),
      strided(2, 16, 2, 4, 2049, 128, Dtype::kBFloat16, true, Layout::kHeadMajor, false),
      strided(2, 8, 4, 1, 999, 256, Dtype::kBFloat16, false, Layout::kHeadMajor, false),
  };
  int index = 0;
  for (const ForwardCase& c : cases) {
    for (const KernelOptions::KvLoads loads : {KernelOptions::KvLoads::kAuto, KernelOptions::KvLoads::kCopyThreads}) {
      if (loads == KernelOptions::KvLoads::kCopyThreads && c.head_dim > 128) continue;  // no copies there
      KernelOptions options;
      options.kv_loads = loads;
      const std::uint64_t case_seed = splitmix64(seed + index++);
      const CaseResult r = run_forward_case(c, options, case_seed);
      EXPECT_EQ(r.kind, CaseResult::kPassed)
          << c.describe() << (loads == KernelOptions::KvLoads::kCopyThreads ? ", K/V copies" : ", K/V by TMA")
          << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << r.detail;
    }
  }
}

// Sliding windows at d 64 on either side of keys_per_tile's 1152 (shipped_configs.cuh): 128-key blocks
// for gpt-oss's local layer (window (127, 0), GQA 8) and a two-sided window of 1148 keys a tile, 192-key
// blocks for 1228 and 1280; odd lengths, more keys than queries and fewer.
class ForwardWindows : public HopperTest {};

TEST_F(ForwardWindows, KeyBlockChoicesMatchTheReference) {
  const std::uint64_t seed = run_seed();
  const auto windowed = [](int hq, int hkv, int sq, int sk, Dtype dtype, int left, int right) {
    ForwardCase c;
    c.batch = 1, c.heads_q = hq, c.heads_kv = hkv, c.seqlen_q = sq, c.seqlen_k = sk, c.head_dim = 64;
    c.dtype = dtype, c.causal = right == 0, c.window_left = left, c.window_right = right, c.amplitude = 2.0f;
    return c;
  };
  const std::vector<ForwardCase> cases = {
      windowed(16, 2, 1499, 1499, Dtype::kBFloat16, 127, 0), windowed(4, 2, 1801, 2001, Dtype::kFloat16, 1000, 20),
      windowed(4, 1, 2100, 2300, Dtype::kBFloat16, 1100, 0), windowed(2, 2, 3001, 2777, Dtype::kFloat16, 1000, 152)};
  int index = 0;
  for (const ForwardCase& c : cases) {
    const CaseResult r = run_forward_case(c, KernelOptions{}, splitmix64(seed + index++));
    EXPECT_EQ(r.kind, CaseResult::kPassed) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << r.detail;
  }
}

// The tail split (sm90/fwd/split_plan.hpp): one round of tiles and a few more, so the last rounds'
// tiles are cut along the keys and merged, at every head dim (256 takes the shared O stage in turns,
// which a warpgroup that merges nothing must still pass on), with and without warp specialization
// (the inline producer walks the same visits); few tiles in explicit pieces; one tile over every SM.
class ForwardTailSplit : public HopperTest {};

TEST_F(ForwardTailSplit, PiecesMergeToTheReference) {
  const std::uint64_t seed = run_seed();
  const int sms = multiprocessor_count();
  std::vector<ForwardCase> cases;
  for (int d : {64, 128, 256}) {
    ForwardCase c;
    c.head_dim = d, c.heads_q = 3, c.heads_kv = 1, c.seqlen_k = 700, c.amplitude = 3.0f;
    c.dtype = d == 128 ? Dtype::kFloat16 : Dtype::kBFloat16;
    c.seqlen_q = 128 * ((sms + 18) / 3) - 37;  // 3 * ceil(sq / 128) tiles: one round and a few more
    cases.push_back(c);
    c.seqlen_q = 300, c.num_splits = 3, c.with_lse = false;  // 9 tiles in 3 pieces each
    cases.push_back(c);
    c.num_splits = 0, c.seqlen_q = 1, c.seqlen_k = 4097, c.heads_q = 1, c.with_lse = true;
    cases.push_back(c);
  }
  int index = 0;
  for (const ForwardCase& c : cases) {
    for (bool warp_specialized : {true, false}) {
      KernelOptions options;
      options.warp_specialized = warp_specialized;
      const CaseResult r = run_forward_case(c, options, splitmix64(seed + index++));
      EXPECT_EQ(r.kind, CaseResult::kPassed) << c.describe() << (warp_specialized ? "" : " no-warp-specialized")
                                             << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << r.detail;
    }
  }
}

// An explicit piece count past kMaxSplitUnits (1024 pieces in all) is cut to what fits, not dropped:
// decoding steps of 8 packed tiles asked for 200 pieces run 128 a tile (1024 in all, the plan's
// limit), at d 64 (transposed tiles), d 128 and 16 tiles of d 64 MHA (64 pieces a tile).
TEST_F(ForwardTailSplit, PieceCountsPastTheCapMergeToTheReference) {
  const std::uint64_t seed = run_seed();
  int index = 0;
  for (const auto& [d, hq, hkv, dtype] : {std::tuple{64, 32, 8, Dtype::kBFloat16},
                                          std::tuple{128, 32, 8, Dtype::kFloat16},
                                          std::tuple{64, 16, 16, Dtype::kFloat16}}) {
    ForwardCase c;
    c.head_dim = d, c.heads_q = hq, c.heads_kv = hkv, c.dtype = dtype, c.amplitude = 3.0f;
    c.seqlen_q = 1, c.seqlen_k = 40001, c.num_splits = 200;
    const CaseResult r = run_forward_case(c, KernelOptions{}, splitmix64(seed + index++));
    EXPECT_EQ(r.kind, CaseResult::kPassed) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << r.detail;
  }
}

// A split launch captured in a CUDA graph (as inference engines run decoding steps): the in-kernel
// merge's counters, the combine kernel's programmatic launch and the stream-ordered workspace must
// work on replay, bit for bit as a direct call;
// captured before and after a direct call. Run alone (scripts/device_tests.sh does), its first
// capture is the process's first call, which sets up the per-device counters and pool under capture.
TEST_F(ForwardTailSplit, CudaGraphReplayMatchesTheDirectCall) {
  const std::uint64_t seed = run_seed();
  const int sms = multiprocessor_count();
  struct Shape {
    DenseExtents extents;
    Dtype dtype;
  };
  // Decoding steps (GQA-packed, split, merged by the variable-length combine kernel) at d 128 and in
  // the d 256 decoding kernel (batch 2); a tail split of the last round (merged in the kernel).
  const Shape shapes[] = {{{1, 8, 2, 1, 8333, 128}, Dtype::kBFloat16},
                          {{2, 16, 8, 1, 5001, 256}, Dtype::kBFloat16},
                          {{1, 3, 1, 128 * ((sms + 5) / 3) - 37, 700, 256}, Dtype::kFloat16}};
  int index = 0;
  for (const Shape& sh : shapes) {
    const DenseExtents& x = sh.extents;
    const std::int64_t nq = std::int64_t(x.batch) * x.seqlen_q * x.heads_q * x.head_dim;
    const std::int64_t nkv = std::int64_t(x.batch) * x.seqlen_k * x.heads_kv * x.head_dim;
    const std::size_t e = dtype_size(sh.dtype);
    DeviceBuffer q(nq * e), k(nkv * e), v(nkv * e), out(nq * e),
        lse(std::int64_t(x.batch) * x.heads_q * x.seqlen_q * 4);
    fill_normal(q.data(), sh.dtype, nq, splitmix64(seed + index++), 3.0f);
    fill_normal(k.data(), sh.dtype, nkv, splitmix64(seed + index++));
    fill_normal(v.data(), sh.dtype, nkv, splitmix64(seed + index++));
    const FwdArgs args = dense_cuda_args(x, sh.dtype, sh.dtype, q.data(), k.data(), v.data(), out.data(), lse.data());
    for (bool capture_first : {true, false}) {
      const std::string why = graph_replay_mismatch(args, capture_first);
      EXPECT_TRUE(why.empty()) << "b " << x.batch << " hq " << x.heads_q << " sq " << x.seqlen_q << " sk "
                               << x.seqlen_k << " d " << x.head_dim << (capture_first ? " captured first" : "")
                               << " (HOPATTN_TEST_SEED=" << seed << "): " << why;
    }
  }
}

class ForwardDeterminism : public HopperTest, public ::testing::WithParamInterface<ForwardCase> {};

// The same inputs twice give bit-identical out and lse.
TEST_P(ForwardDeterminism, SameInputsGiveIdenticalBits) {
  const ForwardCase& c = GetParam();
  const std::uint64_t seed = run_seed();
  const std::int64_t q_numel = std::int64_t(c.batch) * c.seqlen_q * c.heads_q * c.head_dim;
  const std::int64_t kv_numel = std::int64_t(c.batch) * c.seqlen_k * c.heads_kv * c.head_dim;
  const std::int64_t lse_numel = std::int64_t(c.batch) * c.heads_q * c.seqlen_q;
  const std::size_t e = dtype_size(c.dtype);
  DeviceBuffer q(q_numel * e), k(kv_numel * e), v(kv_numel * e);
  fill_normal(q.data(), c.dtype, q_numel, splitmix64(seed ^ 1), c.amplitude);
  fill_normal(k.data(), c.dtype, kv_numel, splitmix64(seed ^ 2));
  fill_normal(v.data(), c.dtype, kv_numel, splitmix64(seed ^ 3));

  std::vector<std::uint8_t> outs[2];
  std::vector<float> lses[2];
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer out(q_numel * e), lse(lse_numel * sizeof(float));
    poison_nan(out.data(), c.dtype, q_numel);
    poison_nan(lse.data(), Dtype::kFloat32, lse_numel);
    const DenseExtents extents{c.batch, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k, c.head_dim};
    FwdArgs args = dense_cuda_args(extents, c.dtype, c.dtype, q.data(), k.data(), v.data(), out.data(), lse.data());
    args.causal = c.causal;
    const Status status = forward(args);
    ASSERT_TRUE(status.ok()) << c.describe() << ": " << status.message();
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    ASSERT_EQ(count_unpoisoned(out.data(), c.dtype, q_numel), q_numel) << "out not fully written: " << c.describe();
    ASSERT_EQ(count_unpoisoned(lse.data(), Dtype::kFloat32, lse_numel), lse_numel) << "lse not fully written";
    outs[run] = out.to_host<std::uint8_t>();
    lses[run] = lse.to_host<float>();
  }
  std::int64_t out_diffs = 0, lse_diffs = 0;
  for (std::size_t i = 0; i < outs[0].size(); ++i) out_diffs += outs[0][i] != outs[1][i];
  for (std::size_t i = 0; i < lses[0].size(); ++i)
    lse_diffs += std::memcmp(&lses[0][i], &lses[1][i], sizeof(float)) != 0;
  EXPECT_EQ(out_diffs, 0) << "bytes of out differ between two identical calls: " << c.describe()
                          << " (HOPATTN_TEST_SEED=" << seed << ")";
  EXPECT_EQ(lse_diffs, 0) << "lse rows differ between two identical calls: " << c.describe();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ForwardDeterminism,
    ::testing::Values(strided(2, 8, 2, 1500, 1500, 128, Dtype::kBFloat16, true, Layout::kContiguous, false),
                      strided(1, 4, 1, 1, 4097, 256, Dtype::kFloat16, false, Layout::kContiguous, false),
                      strided(3, 6, 3, 700, 2000, 64, Dtype::kFloat16, false, Layout::kContiguous, false)));

}  // namespace
}  // namespace hopattn::test
