// The sm_90a backward (hopattn::backward on CUDA tensors) against the float32 GPU reference: fixed
// cases for each feature (lengths on both sides of the tiles, causal and windows that leave rows and
// keys without gradient, softcap, GQA/MQA, strided views), a random sweep mixing them, the
// refusals, run-to-run determinism, and a check that the comparison rule fails wrong gradients.
// Every case runs hopattn::forward on the GPU first for out and lse, as training does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/backward_case.cuh"
#include "gpu/gpu_test_util.cuh"
#include "gpu/sequence_checks.cuh"

namespace hopattn::test {
namespace {

constexpr Dtype kBf16 = Dtype::kBFloat16, kFp16 = Dtype::kFloat16;

BackwardCase bwd(Dtype dtype, int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k, int head_dim) {
  BackwardCase c;
  c.dtype = dtype, c.batch = batch, c.heads_q = heads_q, c.heads_kv = heads_kv;
  c.seqlen_q = seqlen_q, c.seqlen_k = seqlen_k, c.head_dim = head_dim;
  return c;
}

BackwardCase causal(BackwardCase c) {
  c.causal = true;
  return c;
}

BackwardCase window(BackwardCase c, int left, int right) {
  c.window_left = left, c.window_right = right;
  return c;
}

// Scores scale * q.k of standard deviation about `amplitude` (with the default scale): at 8 they reach
// +-20 and beyond, where tanh bends them well below a cap of 30.
BackwardCase softcap(BackwardCase c, float cap, float amplitude) {
  c.softcap = cap, c.amplitude = amplitude;
  return c;
}

BackwardCase scaled(BackwardCase c, float softmax_scale) {
  c.softmax_scale = softmax_scale;
  return c;
}

BackwardCase laid_out(BackwardCase c, BackwardLayout layout) {
  c.layout = layout;
  return c;
}

class BackwardMatchesReference : public HopperTest, public ::testing::WithParamInterface<BackwardCase> {};

TEST_P(BackwardMatchesReference, Gradients) {
  const std::uint64_t seed = run_seed();
  const std::string problems = run_backward_case(GetParam(), seed);
  EXPECT_TRUE(problems.empty()) << GetParam().describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

// Both dtypes and native head dims over lengths 1, odd, equal and unequal both ways, either side of the
// 64- and 128-row tiles; batch 1-3. At d 192 and 256 the CTA takes 64 keys, both consumers the same ones.
std::vector<BackwardCase> shape_cases() {
  const std::pair<int, int> lengths[] = {{1, 1},     {1, 513},   {17, 300},  {300, 17},  {64, 64},  {100, 129},
                                         {128, 128}, {129, 255}, {255, 100}, {513, 513}, {513, 64}};
  std::vector<BackwardCase> cases;
  int index = 0;
  for (Dtype dtype : {kBf16, kFp16})
    for (int d : {64, 128, 192, 256})
      for (const auto& [sq, sk] : lengths) cases.push_back(bwd(dtype, 1 + index++ % 3, 2, 2, sq, sk, d));
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackwardMatchesReference, ::testing::ValuesIn(shape_cases()));

// Bottom-right aligned: with seqlen_q > seqlen_k the first rows see no key (dq 0); with seqlen_q <
// seqlen_k every row sees the keys before its diagonal. At d 192 (64-key CTAs whose consumers split
// the roles, dQ through one share): GQA, both length orders, a block half past the keys.
INSTANTIATE_TEST_SUITE_P(
    Causal, BackwardMatchesReference,
    ::testing::Values(causal(bwd(kBf16, 2, 2, 2, 100, 300, 64)), causal(bwd(kFp16, 2, 2, 2, 300, 100, 128)),
                      causal(bwd(kFp16, 1, 3, 3, 129, 129, 64)), causal(bwd(kBf16, 3, 2, 2, 1, 255, 128)),
                      causal(bwd(kBf16, 2, 2, 2, 255, 1, 64)), causal(bwd(kFp16, 2, 2, 2, 513, 17, 128)),
                      causal(bwd(kBf16, 2, 2, 2, 17, 513, 128)), causal(bwd(kFp16, 2, 2, 2, 64, 128, 64)),
                      causal(bwd(kBf16, 1, 2, 2, 128, 64, 128)), causal(bwd(kBf16, 2, 4, 2, 300, 300, 192)),
                      causal(bwd(kFp16, 1, 2, 2, 129, 513, 192)), causal(bwd(kBf16, 2, 2, 1, 513, 129, 192)),
                      causal(bwd(kFp16, 3, 2, 2, 65, 65, 192))));

// Sliding windows: left only, right only, both (keys no row sees get dk = dv = 0; with seqlen_q >
// seqlen_k rows that see no key), the diagonal alone, and a left window under causal.
INSTANTIATE_TEST_SUITE_P(
    Windows, BackwardMatchesReference,
    ::testing::Values(window(bwd(kBf16, 2, 2, 2, 300, 300, 64), 32, -1),
                      window(bwd(kFp16, 1, 4, 2, 129, 513, 128), 100, -1),
                      window(bwd(kFp16, 2, 2, 2, 255, 255, 64), -1, 16),
                      window(bwd(kBf16, 2, 2, 1, 100, 300, 128), -1, 7),
                      window(bwd(kBf16, 2, 2, 2, 129, 513, 64), 20, 5),
                      window(bwd(kFp16, 2, 2, 2, 300, 100, 128), 10, 3),
                      window(bwd(kBf16, 1, 2, 2, 513, 513, 128), 0, 0),
                      window(bwd(kFp16, 3, 2, 2, 64, 64, 64), 63, 63),
                      window(causal(bwd(kFp16, 2, 2, 2, 513, 513, 64)), 64, -1),
                      window(causal(bwd(kBf16, 2, 4, 2, 255, 300, 128)), 17, -1),
                      // gpt-oss's local layers (window 128, causal, GQA 8): each consumer's 64 keys are
                      // hidden from one of the four q blocks its key block walks; with the softcap too.
                      window(causal(bwd(kBf16, 2, 8, 1, 700, 700, 64)), 127, -1),
                      softcap(window(causal(bwd(kFp16, 1, 4, 2, 333, 401, 64)), 100, -1), 30.0f, 8.0f),
                      // d 192 (64-key CTAs, roles split): blocks cut by either edge of the window.
                      window(bwd(kFp16, 2, 2, 2, 300, 300, 192), 70, -1),
                      window(bwd(kBf16, 1, 4, 2, 255, 400, 192), -1, 20),
                      window(bwd(kBf16, 2, 2, 2, 129, 513, 192), 20, 5),
                      window(causal(bwd(kFp16, 2, 2, 1, 400, 400, 192)), 127, -1)));

// Softcap with scores large enough that tanh matters, so the (1 - tanh^2) factor is tested; an
// explicit softmax_scale; a tight cap.
INSTANTIATE_TEST_SUITE_P(
    Softcap, BackwardMatchesReference,
    ::testing::Values(softcap(bwd(kBf16, 2, 2, 2, 255, 255, 64), 30.0f, 8.0f),
                      softcap(bwd(kFp16, 1, 4, 2, 129, 513, 128), 30.0f, 8.0f),
                      softcap(causal(bwd(kBf16, 2, 2, 2, 300, 300, 128)), 30.0f, 8.0f),
                      scaled(softcap(bwd(kFp16, 3, 2, 1, 100, 17, 64), 30.0f, 6.0f), 0.2f),
                      softcap(bwd(kBf16, 1, 2, 2, 513, 129, 64), 5.0f, 2.0f)));

// GQA 8/2 and MQA 4/1: a kv head's dk/dv sum over its q heads.
INSTANTIATE_TEST_SUITE_P(
    Gqa, BackwardMatchesReference,
    ::testing::Values(causal(bwd(kBf16, 2, 8, 2, 300, 300, 128)), bwd(kFp16, 3, 8, 2, 129, 513, 64),
                      causal(bwd(kBf16, 2, 4, 1, 513, 100, 64)), bwd(kFp16, 2, 4, 1, 1, 255, 128),
                      window(bwd(kBf16, 3, 4, 1, 255, 17, 128), 32, 0),
                      softcap(bwd(kFp16, 2, 8, 2, 100, 100, 64), 30.0f, 8.0f),
                      scaled(bwd(kBf16, 2, 8, 2, 64, 513, 64), 0.05f),
                      scaled(causal(bwd(kFp16, 1, 4, 1, 128, 129, 128)), 0.3f)));

// Strided views: q, k, v slices of a packed qkv buffer with dq, dk, dv slices of a padded packed dqkv
// buffer; every tensor with padded heads (and padded lse rows); every tensor head-major. The guards
// and the padding must keep their poison.
INSTANTIATE_TEST_SUITE_P(
    Strides, BackwardMatchesReference,
    ::testing::Values(laid_out(causal(bwd(kBf16, 2, 4, 2, 255, 255, 128)), BackwardLayout::kPacked),
                      laid_out(bwd(kFp16, 3, 4, 1, 129, 129, 64), BackwardLayout::kPacked),
                      laid_out(bwd(kBf16, 1, 8, 2, 1, 1, 64), BackwardLayout::kPacked),
                      laid_out(causal(bwd(kFp16, 2, 4, 2, 300, 100, 128)), BackwardLayout::kPaddedHeads),
                      laid_out(window(bwd(kBf16, 2, 2, 2, 17, 513, 64), 20, 5), BackwardLayout::kPaddedHeads),
                      laid_out(bwd(kBf16, 2, 8, 2, 100, 513, 128), BackwardLayout::kHeadMajor),
                      laid_out(causal(bwd(kFp16, 3, 3, 1, 513, 255, 64)), BackwardLayout::kHeadMajor)));

// Small shapes for compute-sanitizer (scripts/device_tests.sh runs memcheck, racecheck and synccheck on
// them): a few tiles each of causal GQA, softcap, a window with empty rows, a causal window, a packed
// layout, and d 40 (in the d 64 kernel, whose stores must stop at d).
INSTANTIATE_TEST_SUITE_P(
    SanitizerSmall, BackwardMatchesReference,
    ::testing::Values(causal(bwd(kBf16, 1, 4, 2, 129, 255, 64)),
                      softcap(bwd(kFp16, 1, 2, 1, 100, 100, 128), 30.0f, 8.0f),
                      window(bwd(kBf16, 2, 2, 2, 200, 70, 128), 16, 4),
                      window(causal(bwd(kFp16, 1, 2, 1, 200, 200, 64)), 63, -1),
                      laid_out(bwd(kFp16, 1, 2, 1, 65, 65, 64), BackwardLayout::kPacked),
                      causal(bwd(kBf16, 1, 4, 2, 65, 129, 40)), causal(bwd(kFp16, 1, 2, 1, 100, 129, 256)),
                      window(bwd(kBf16, 1, 2, 2, 77, 65, 200), 8, 8),
                      softcap(causal(bwd(kFp16, 1, 4, 2, 129, 100, 160)), 30.0f, 8.0f)));

// Pairs per random case (batch * heads_q * seqlen_q * seqlen_k): 24 MB of reference scratch at most.
constexpr double kMaxSweepPairs = 1.5e6;
constexpr int kSweepCases = 30;

class BackwardRandomSweep : public HopperTest {};

TEST_F(BackwardRandomSweep, ConfigurationsMatchReference) {
  const std::uint64_t seed = run_seed();
  RecordProperty("seed", std::to_string(seed));
  std::cout << "[ seed     ] backward sweep HOPATTN_TEST_SEED=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  int failed = 0;
  for (int i = 0; i < kSweepCases; ++i) {
    const BackwardCase c = random_backward_case(rng, kMaxSweepPairs);
    const std::string problems = run_backward_case(c, splitmix64(seed + i));
    if (problems.empty()) continue;
    ++failed;
    ADD_FAILURE() << "case " << i << " (HOPATTN_TEST_SEED=" << seed << "): " << c.describe() << "\n  " << problems;
  }
  std::cout << "[ sweep    ] backward: passed " << kSweepCases - failed << " of " << kSweepCases << std::endl;
}

class BackwardRule : public HopperTest {};

// The rule of check_gradient must be able to fail. The reference's naive gradients, written in the
// input dtype where the kernel's would go, pass it (a kernel that rounds as they do passes); the same
// with dq scaled by 1.05 fails its RMS clause, with dk's two kv heads swapped fails, and with one key
// row of dv zeroed (a tile row left out) fails its max clause.
TEST_F(BackwardRule, WrongGradientsFail) {
  const std::uint64_t seed = run_seed();
  for (Dtype dtype : {kBf16, kFp16}) {
    const BackwardCase c = bwd(dtype, 2, 4, 2, 200, 300, 64);
    SCOPED_TRACE(c.describe() + " (HOPATTN_TEST_SEED=" + std::to_string(seed) + ")");
    const BackwardCall call(c, seed);
    const ReferenceGradients ref = call.reference();
    const std::vector<float> dq = ref.dq.naive.to_host<float>(), dk = ref.dk.naive.to_host<float>(),
                             dv = ref.dv.naive.to_host<float>();
    write_view(dq, call.args.dq);
    write_view(dk, call.args.dk);
    write_view(dv, call.args.dv);
    EXPECT_EQ(check_gradient("dq", call.args.dq, ref.dq), "");
    EXPECT_EQ(check_gradient("dk", call.args.dk, ref.dk), "");
    EXPECT_EQ(check_gradient("dv", call.args.dv, ref.dv), "");

    std::vector<float> wrong = dq;
    for (float& x : wrong) x *= 1.05f;
    write_view(wrong, call.args.dq);
    EXPECT_NE(check_gradient("dq", call.args.dq, ref.dq).find("rms("), std::string::npos) << "dq scaled by 1.05";

    wrong = dk;  // (b, sk, hkv, d): swap kv heads 0 and 1 of every key
    const int d = c.head_dim;
    for (std::size_t row = 0; row < wrong.size(); row += std::size_t(c.heads_kv) * d)
      std::swap_ranges(wrong.begin() + row, wrong.begin() + row + d, wrong.begin() + row + d);
    write_view(wrong, call.args.dk);
    EXPECT_NE(check_gradient("dk", call.args.dk, ref.dk), "") << "dk with its kv heads swapped";

    wrong = dv;  // key 150 of batch 1, kv head 1
    const std::size_t row = ((std::size_t(1) * c.seqlen_k + 150) * c.heads_kv + 1) * d;
    std::fill(wrong.begin() + row, wrong.begin() + row + d, 0.0f);
    write_view(wrong, call.args.dv);
    EXPECT_NE(check_gradient("dv", call.args.dv, ref.dv).find("max|"), std::string::npos) << "one dv row zeroed";
  }
}

class BackwardDeterminism : public HopperTest, public ::testing::WithParamInterface<BackwardCase> {};

// Two calls on the same inputs: dk and dv bit for bit equal (each key block owns its rows); dq, summed
// across key blocks with float32 atomics in any order, within one unit in the last place of the input
// dtype at its largest element (float32 reorderings move it by far less, but may tip a rounding).
TEST_P(BackwardDeterminism, SecondCallGivesTheSameGradients) {
  const BackwardCase& c = GetParam();
  const std::uint64_t seed = run_seed();
  SCOPED_TRACE(c.describe() + " (HOPATTN_TEST_SEED=" + std::to_string(seed) + ")");
  const BackwardCall call(c, seed);
  std::vector<float> runs[2][3];
  for (auto& run : runs) {
    call.poison_gradients();
    const Status status = backward(call.args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(call.gradient_elements_written(), call.gradient_elements());
    run[0] = read_view(call.args.dq), run[1] = read_view(call.args.dk), run[2] = read_view(call.args.dv);
  }
  const char* names[] = {"dq", "dk", "dv"};
  for (int t = 1; t < 3; ++t) {
    ASSERT_EQ(runs[0][t].size(), runs[1][t].size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < runs[0][t].size(); ++i)
      differing += std::memcmp(&runs[0][t][i], &runs[1][t][i], sizeof(float)) != 0;
    EXPECT_EQ(differing, 0u) << names[t] << " elements differ between two identical calls";
  }
  float max_dq = 0.0f, max_diff = 0.0f;
  for (std::size_t i = 0; i < runs[0][0].size(); ++i) {
    max_dq = std::fmax(max_dq, std::fabs(runs[0][0][i]));
    max_diff = std::fmax(max_diff, std::fabs(runs[0][0][i] - runs[1][0][i]));
  }
  const float ulp = std::ldexp(max_dq, c.dtype == kBf16 ? -7 : -10);  // 2u |x| bounds one ulp at x
  EXPECT_LE(max_diff, ulp) << "dq between two identical calls; max |dq| " << max_dq;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackwardDeterminism,
                         ::testing::Values(causal(bwd(kBf16, 2, 8, 2, 513, 513, 128)),
                                           bwd(kFp16, 1, 4, 1, 300, 1000, 64),
                                           softcap(bwd(kBf16, 2, 4, 2, 255, 700, 64), 30.0f, 8.0f)));

class BackwardRefusals : public HopperTest {};

// Runs call's backward with `args`, which must answer `code` with a message containing `must_mention`
// (when given), and write nothing. Returns what is wrong.
std::string expect_refused(const BackwardCall& call, const BwdArgs& args, StatusCode code, const char* must_mention) {
  const Status status = backward(args);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::string problems;
  if (status.code() != code)
    problems += "expected code " + std::to_string(int(code)) + ", got " + std::to_string(int(status.code())) + ": " +
                status.message() + "; ";
  if (status.message().empty()) problems += "the refusal must say why; ";
  if (must_mention && status.message().find(must_mention) == std::string::npos)
    problems += std::string("the message does not mention ") + must_mention + ": " + status.message() + "; ";
  if (const std::int64_t n = call.gradient_elements_written())
    problems += std::to_string(n) + " gradient elements written; ";
  return problems;
}

TEST_F(BackwardRefusals, DqDtypeMismatchIsInvalid) {
  for (Dtype dtype : {kBf16, kFp16}) {
    const BackwardCall call(bwd(dtype, 1, 2, 2, 64, 64, 64), run_seed());
    BwdArgs args = call.args;
    args.dq.dtype = dtype == kBf16 ? kFp16 : kBf16;
    EXPECT_EQ(expect_refused(call, args, StatusCode::kInvalidArgument, "dq"), "") << dtype_name(dtype);
  }
}

// The deterministic kernels take neither chunks nor seqused_q (the chunk arithmetic spilled their
// registers; both have kernels of their own, BwdTraits::kChunksAndSequsedQ): refused, nothing written.
TEST_F(BackwardRefusals, DeterministicWithChunksIsUnsupported) {
  BackwardCase c = causal(bwd(kBf16, 1, 2, 2, 300, 300, 64));
  c.attention_chunk = 128;
  const BackwardCall call(c, run_seed());
  BwdArgs args = call.args;
  args.deterministic = true;
  EXPECT_EQ(expect_refused(call, args, StatusCode::kUnsupported, "attention_chunk"), "");
}

TEST_F(BackwardRefusals, DeterministicWithSequsedQIsUnsupported) {
  const BackwardCall call(bwd(kFp16, 2, 2, 2, 300, 300, 192), run_seed());
  const DeviceBuffer seqused_q = upload(std::vector<int>{129, 300});
  BwdArgs args = call.args;
  args.deterministic = true;
  args.seqused_q = make_tensor(seqused_q.data(), Dtype::kInt32, {2}, DeviceType::kCuda);
  EXPECT_EQ(expect_refused(call, args, StatusCode::kUnsupported, "seqused_q"), "");
}

}  // namespace
}  // namespace hopattn::test
