// The deterministic backward (BwdArgs::deterministic on CUDA tensors): on shapes where many key
// blocks add into each q block's dq (1000+ keys, and 11000: more CTAs than SMs), dense and
// variable-length, causal or not, GQA/MQA, windows and softcap, five calls on the same inputs (gradients poisoned with NaN before each) must
// give dq, dk and dv bit for bit equal, and correct against the float32 GPU reference by the rule of
// the other backward tests.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gpu/backward_case.cuh"
#include "gpu/backward_varlen_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

constexpr int kRuns = 5;

BackwardCase dense(Dtype dtype, int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k, int head_dim) {
  BackwardCase c;
  c.dtype = dtype, c.batch = batch, c.heads_q = heads_q, c.heads_kv = heads_kv;
  c.seqlen_q = seqlen_q, c.seqlen_k = seqlen_k, c.head_dim = head_dim;
  c.deterministic = true;
  return c;
}

BackwardCase causal(BackwardCase c) {
  c.causal = true;
  return c;
}

std::vector<NamedCase<BackwardCase>> dense_cases() {
  std::vector<NamedCase<BackwardCase>> cases;
  cases.push_back({"Causal_gqa_d128_bf16", causal(dense(kBf16, 2, 8, 2, 1111, 1303, 128))});
  cases.push_back({"Plain_mha_d64_fp16", dense(kFp16, 1, 4, 4, 777, 2049, 64)});
  cases.push_back({"Causal_mqa_d128_fp16", causal(dense(kFp16, 1, 8, 1, 1029, 1029, 128))});
  {
    BackwardCase c = dense(kBf16, 2, 6, 3, 1500, 1001, 64);
    c.window_left = 300, c.window_right = 40;
    cases.push_back({"Window_gqa_d64_bf16", c});
  }
  {
    // gpt-oss's local layers: a causal window of 128 keys, GQA 8.
    BackwardCase c = causal(dense(kBf16, 2, 8, 1, 1029, 1029, 64));
    c.window_left = 127;
    cases.push_back({"LocalCausal_gqa_d64_bf16", c});
  }
  {
    BackwardCase c = dense(kFp16, 1, 2, 2, 513, 1201, 128);
    c.softcap = 30.0f, c.amplitude = 6.0f;
    cases.push_back({"Softcap_d128_fp16", c});
  }
  cases.push_back({"Causal_gqa_d256_bf16", causal(dense(kBf16, 1, 4, 2, 700, 1029, 256))});
  // Non-causal d 256 (one Q/dO stage, one dQ buffer) and d 192 (two stages, one dQ buffer): many q
  // blocks per CTA, so every buffer is refilled many times, in the increasing order.
  cases.push_back({"Plain_gqa_d256_bf16", dense(kBf16, 2, 4, 2, 1000, 901, 256)});
  cases.push_back({"Plain_mha_d192_fp16", dense(kFp16, 1, 3, 3, 833, 700, 192)});
  {
    BackwardCase c = dense(kFp16, 1, 3, 1, 1029, 777, 192);
    c.window_left = 200, c.window_right = 16;
    cases.push_back({"Window_mqa_d192_fp16", c});
  }
  // More CTAs than the GPU has SMs, and at d 256 more key blocks of one head (11000 keys: 86 blocks of
  // 128, 172 of 64), so that CTAs wait on turns of CTAs dispatched long before them, in both orders
  // (dq_order.cuh: increasing without a right window bound, decreasing with one). 11000 keys is near
  // the most the GPU reference's rows hold in shared memory.
  cases.push_back({"ManyKeyBlocks_gqa_d64_bf16", dense(kBf16, 2, 2, 1, 200, 11000, 64)});
  cases.push_back({"ManyKeyBlocksCausal_d256_fp16", causal(dense(kFp16, 1, 1, 1, 150, 11000, 256))});
  {
    BackwardCase c = dense(kBf16, 1, 2, 2, 3000, 11000, 128);
    c.window_left = 4000, c.window_right = 3000;
    cases.push_back({"ManyKeyBlocksWindow_d128_bf16", c});
  }
  return cases;
}

// A few key blocks, for compute-sanitizer (scripts/device_tests.sh).
std::vector<NamedCase<BackwardCase>> sanitizer_cases() {
  return {{"Causal_gqa_d64_bf16", causal(dense(kBf16, 1, 2, 1, 100, 300, 64))},
          {"Causal_gqa_d256_fp16", causal(dense(kFp16, 1, 2, 1, 100, 200, 256))},
          {"Plain_d256_bf16", dense(kBf16, 1, 2, 2, 300, 130, 256)}};
}

class BackwardDeterministic : public HopperTest, public ::testing::WithParamInterface<NamedCase<BackwardCase>> {};

TEST_P(BackwardDeterministic, RepeatedCallsAreBitwiseEqualAndCorrect) {
  const BackwardCase& c = GetParam().c;
  const std::uint64_t seed = run_seed();
  SCOPED_TRACE(c.describe() + " (HOPATTN_TEST_SEED=" + std::to_string(seed) + ")");
  const BackwardCall call(c, seed);
  GradientValues first;
  for (int run = 0; run < kRuns; ++run) {
    call.poison_gradients();
    const Status status = backward(call.args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(call.gradient_elements_written(), call.gradient_elements()) << "call " << run + 1;
    if (run == 0) {
      first = read_gradients(call.args);
    } else {
      ASSERT_EQ(bitwise_differences(first, read_gradients(call.args)), "") << "call " << run + 1 << " against the first";
    }
  }
  const ReferenceGradients ref = call.reference();
  EXPECT_EQ(check_gradient("dq", call.args.dq, ref.dq) + check_gradient("dk", call.args.dk, ref.dk) +
                check_gradient("dv", call.args.dv, ref.dv),
            "");
  // The comparison must see a difference of one bit.
  GradientValues spoiled = first;
  spoiled[0].back() = std::nextafter(spoiled[0].back(), INFINITY);
  EXPECT_NE(bitwise_differences(first, spoiled), "");
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackwardDeterministic, ::testing::ValuesIn(dense_cases()), CaseName());
INSTANTIATE_TEST_SUITE_P(SanitizerSmall, BackwardDeterministic, ::testing::ValuesIn(sanitizer_cases()), CaseName());

VarlenBackwardCase varlen(std::vector<int> len_q, std::vector<int> len_k, int heads_q, int heads_kv, int head_dim,
                          Dtype dtype) {
  VarlenBackwardCase c =
      varlen_case_of<VarlenBackwardCase>(std::move(len_q), std::move(len_k), heads_q, heads_kv, head_dim, dtype);
  c.deterministic = true;
  return c;
}

// Sequences of 1000+ keys beside short and empty ones, so that sequences of different key-block
// counts share the grid.
std::vector<NamedCase<VarlenBackwardCase>> varlen_cases() {
  std::vector<NamedCase<VarlenBackwardCase>> cases;
  {
    VarlenBackwardCase c = varlen({333, 1, 0, 1100}, {1201, 65, 17, 1000}, 8, 2, 128, kBf16);
    c.causal = true;
    cases.push_back({"Causal_gqa_d128_bf16", c});
  }
  cases.push_back({"Plain_mqa_d64_fp16", varlen({1029, 77}, {1503, 129}, 4, 1, 64, kFp16)});
  {
    VarlenBackwardCase c = varlen({700, 1300}, {1300, 1111}, 4, 2, 64, kBf16);
    c.window_left = 200, c.window_right = 30, c.seqused_k = {{999, 1111}};
    cases.push_back({"WindowSequsedK_gqa_d64_bf16", c});
  }
  return cases;
}

class BackwardVarlenDeterministic : public HopperTest,
                                    public ::testing::WithParamInterface<NamedCase<VarlenBackwardCase>> {};

TEST_P(BackwardVarlenDeterministic, RepeatedCallsAreBitwiseEqualAndCorrect) {
  const std::uint64_t seed = run_seed();
  const VarlenBackwardCase& c = GetParam().c;
  const std::string problems = run_varlen_backward_repeatedly(c, seed, kRuns);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Sequences, BackwardVarlenDeterministic, ::testing::ValuesIn(varlen_cases()), CaseName());

}  // namespace
}  // namespace hopattn::test
