// Each KernelOptions switch (warp specialization, ping-pong, intra-warpgroup overlap, persistence)
// turned off in turn, then all at once: a smaller random sweep must pass the same rule as the default.
// GQA packing forced on (any sequence length, windows and softcaps too) and off, likewise; forced on
// where the kernels cannot pack, it is refused with kUnsupported.
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

// kCasesPerSetting random cases with `options` (edge lengths first), each judged as the default is;
// draw_case gives each from the generator and the forced lengths. name: the setting, in the messages.
template <class DrawCase>
void expect_random_sweep_passes(const KernelOptions& options, const std::string& name, DrawCase draw_case) {
  const std::uint64_t seed = run_seed();
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  int passed = 0, failed = 0;
  constexpr int kEdges = static_cast<int>(std::size(kEdgeSeqlens));
  for (int i = 0; i < kCasesPerSetting && failed < 10; ++i) {
    const ForwardCase c =
        draw_case(rng, i < kEdges ? kEdgeSeqlens[i] : 0, i < kEdges ? kEdgeSeqlens[kEdges - 1 - i] : 0);
    const CaseResult r = run_forward_case(c, options, splitmix64(seed + i));
    if (r.kind == CaseResult::kPassed) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << name << ", case " << i << " (HOPATTN_TEST_SEED=" << seed << "): " << c.describe()
                    << "\n  " << (r.kind == CaseResult::kUnsupported ? "refused: " : "") << r.detail;
    }
  }
  std::cout << "[ options  ] " << name << ": passed " << passed << " of " << kCasesPerSetting << std::endl;
}

class ForwardOptions : public HopperTest, public ::testing::WithParamInterface<Switches> {};

TEST_P(ForwardOptions, RandomSweepMatchesReference) {
  expect_random_sweep_passes(GetParam().options, GetParam().name, [](std::mt19937_64& rng, int sq, int sk) {
    return random_case(rng, kMaxWork, false, sq, sk);
  });
}

INSTANTIATE_TEST_SUITE_P(
    EachOff, ForwardOptions,
    ::testing::Values(Switches{"no_warp_specialized", without(&KernelOptions::warp_specialized)},
                      Switches{"no_pingpong", without(&KernelOptions::pingpong)},
                      Switches{"no_intra_wg_overlap", without(&KernelOptions::intra_wg_overlap)},
                      Switches{"no_persistent", without(&KernelOptions::persistent)},
                      Switches{"all_off", KernelOptions{false, false, false, false}}),
    [](const ::testing::TestParamInfo<Switches>& info) { return std::string(info.param.name); });

class ForwardPackGqa : public HopperTest,
                       public ::testing::WithParamInterface<KernelOptions::PackGqa> {};

// Head dims up to 128 (the 64 and 128 kernels pack; padded dims run in them), windows and softcaps too:
// a drawn wider case is drawn again.
TEST_P(ForwardPackGqa, RandomSweepMatchesReference) {
  KernelOptions options;
  options.pack_gqa = GetParam();
  const std::string name = GetParam() == KernelOptions::PackGqa::kOn ? "pack_gqa on" : "pack_gqa off";
  expect_random_sweep_passes(options, name, [](std::mt19937_64& rng, int sq, int sk) {
    ForwardCase c;
    do {
      c = random_case(rng, kMaxWork, true, sq, sk);
    } while (c.head_dim > 128);
    return c;
  });
}

INSTANTIATE_TEST_SUITE_P(OnAndOff, ForwardPackGqa,
                         ::testing::Values(KernelOptions::PackGqa::kOn, KernelOptions::PackGqa::kOff),
                         [](const ::testing::TestParamInfo<KernelOptions::PackGqa>& info) {
                           return std::string(info.param == KernelOptions::PackGqa::kOn ? "on" : "off");
                         });

// Forced on where no kernel packs: head dim 256 beyond the decoding kernel's 8 rows a tile (5 query
// rows x 2 heads), the ablation without warp specialization, more query heads per K/V head than a tile
// has rows.
class ForwardPackGqaRefusals : public HopperTest {};

TEST_F(ForwardPackGqaRefusals, SayWhatPacks) {
  const auto refusal = [](ForwardCase c, KernelOptions options) {
    options.pack_gqa = KernelOptions::PackGqa::kOn;
    return run_forward_case(c, options, 1);
  };
  ForwardCase c;
  c.batch = 1, c.heads_q = 4, c.heads_kv = 2, c.seqlen_q = 5, c.seqlen_k = 100, c.head_dim = 256;
  CaseResult r = refusal(c, KernelOptions{});
  EXPECT_EQ(r.kind, CaseResult::kUnsupported) << r.detail;
  EXPECT_NE(r.detail.find("head dim 256"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("at most 8 query rows a K/V head"), std::string::npos) << r.detail;
  c.seqlen_q = 4;  // 8 rows: the decoding kernel packs them
  EXPECT_EQ(refusal(c, KernelOptions{}).kind, CaseResult::kPassed);
  c.seqlen_q = 1, c.head_dim = 128;
  KernelOptions no_ws;
  no_ws.warp_specialized = false;
  r = refusal(c, no_ws);
  EXPECT_EQ(r.kind, CaseResult::kUnsupported) << r.detail;
  EXPECT_NE(r.detail.find("warp_specialized"), std::string::npos) << r.detail;
  c.heads_q = 256, c.heads_kv = 1;
  r = refusal(c, KernelOptions{});
  EXPECT_EQ(r.kind, CaseResult::kUnsupported) << r.detail;
  EXPECT_NE(r.detail.find("at most 128"), std::string::npos) << r.detail;
}

}  // namespace
}  // namespace hopattn::test
