// Each KernelOptions switch (warp specialization, ping-pong, intra-warpgroup overlap, persistence)
// turned off in turn, then all at once: a smaller random sweep must pass the same rule as the default.
#include <iostream>
#include <iterator>
#include <random>
#include <string>

#include "gpu/forward_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

constexpr double kMaxWork = 1.5e9;
constexpr int kCasesPerSetting = 40;

struct Switches {
  const char* name;
  KernelOptions options;
};

KernelOptions without(bool KernelOptions::*field) {
  KernelOptions o;
  o.*field = false;
  return o;
}

class ForwardOptions : public HopperTest, public ::testing::WithParamInterface<Switches> {};

TEST_P(ForwardOptions, RandomSweepMatchesReference) {
  const Switches& s = GetParam();
  const std::uint64_t seed = run_seed();
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  int passed = 0, failed = 0;
  constexpr int kEdges = static_cast<int>(std::size(kEdgeSeqlens));
  for (int i = 0; i < kCasesPerSetting && failed < 10; ++i) {
    const ForwardCase c = random_case(rng, kMaxWork, false, i < kEdges ? kEdgeSeqlens[i] : 0,
                                      i < kEdges ? kEdgeSeqlens[kEdges - 1 - i] : 0);
    const CaseResult r = run_forward_case(c, s.options, splitmix64(seed + i));
    if (r.kind == CaseResult::kPassed) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << s.name << ", case " << i << " (HOPATTN_TEST_SEED=" << seed << "): " << c.describe()
                    << "\n  " << (r.kind == CaseResult::kUnsupported ? "refused: " : "") << r.detail;
    }
  }
  std::cout << "[ options  ] " << s.name << ": passed " << passed << " of " << kCasesPerSetting << std::endl;
}

INSTANTIATE_TEST_SUITE_P(
    EachOff, ForwardOptions,
    ::testing::Values(Switches{"no_warp_specialized", without(&KernelOptions::warp_specialized)},
                      Switches{"no_pingpong", without(&KernelOptions::pingpong)},
                      Switches{"no_intra_wg_overlap", without(&KernelOptions::intra_wg_overlap)},
                      Switches{"no_persistent", without(&KernelOptions::persistent)},
                      Switches{"all_off", KernelOptions{false, false, false, false}}),
    [](const ::testing::TestParamInfo<Switches>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hopattn::test
