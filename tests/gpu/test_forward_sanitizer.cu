// Small shapes for compute-sanitizer (memcheck, racecheck, synccheck; scripts/device_tests.sh runs
// them with --gtest_filter='SanitizerSmall.*'). They also pass the accuracy rule on their own, so a
// plain run checks them too. Each one touches a different edge: partial tiles, empty causal rows,
// a single query row, GQA, head dims 64/128/256 and two between them (run in the next wider kernel,
// whose stores must stop at d), tiles split along the keys, and the kernel with every speed switch off.
#include <string>

#include "gpu/forward_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

struct SanitizerCase {
  const char* name;
  ForwardCase c;
  KernelOptions options;
};

ForwardCase small(int b, int hq, int hkv, int sq, int sk, int d, Dtype dtype, bool causal) {
  ForwardCase c;
  c.batch = b, c.heads_q = hq, c.heads_kv = hkv, c.seqlen_q = sq, c.seqlen_k = sk, c.head_dim = d;
  c.dtype = dtype, c.causal = causal;
  return c;
}

class SanitizerSmall : public HopperTest, public ::testing::WithParamInterface<SanitizerCase> {};

TEST_P(SanitizerSmall, PassesUnderSanitizer) {
  const SanitizerCase& s = GetParam();
  const std::uint64_t seed = run_seed();
  const CaseResult r = run_forward_case(s.c, s.options, seed);
  EXPECT_EQ(r.kind, CaseResult::kPassed) << s.c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << r.detail;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SanitizerSmall,
    ::testing::Values(
        SanitizerCase{"d64_gqa_causal_partial_tiles", small(1, 2, 1, 65, 129, 64, Dtype::kBFloat16, true), {}},
        SanitizerCase{"d128_single_query_row", small(2, 4, 4, 1, 200, 128, Dtype::kFloat16, false), {}},
        SanitizerCase{"d256_causal_empty_rows", small(1, 1, 1, 130, 70, 256, Dtype::kBFloat16, true), {}},
        // Few tiles, not causal: split along the keys over many CTAs, merged through global memory
        // (fwd/split_merge.cuh); at d 256 the warpgroups that merge nothing still pass the O stage on.
        SanitizerCase{"d256_tail_split_pieces", small(1, 2, 1, 200, 300, 256, Dtype::kBFloat16, false), {}},
        SanitizerCase{"d128_all_switches_off", small(1, 4, 2, 100, 150, 128, Dtype::kFloat16, true),
                      KernelOptions{false, false, false, false}},
        SanitizerCase{"d40_in_the_d64_kernel", small(1, 4, 2, 65, 129, 40, Dtype::kBFloat16, true), {}},
        SanitizerCase{"d200_in_the_d256_kernel", small(1, 2, 1, 130, 70, 200, Dtype::kFloat16, false), {}}),
    [](const ::testing::TestParamInfo<SanitizerCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hopattn::test
