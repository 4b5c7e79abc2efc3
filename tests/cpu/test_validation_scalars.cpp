// Validation and normalization of the scalar arguments: scale, softcap, window, causal, num_splits.
#include <climits>
#include <cmath>
#include <limits>

#include "test_validation_fixture.hpp"

namespace hopattn::test {
namespace {

using detail::Problem;

TEST(ValidationScalars, SoftmaxScaleMustBeFinite) {
  for (float scale : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
    DenseCall call;
    call.args.softmax_scale = scale;
    EXPECT_TRUE(Invalid(call.validate(), "softmax_scale", {"finite"})) << scale;
  }
}

TEST(ValidationScalars, ExplicitSoftmaxScaleIsKept) {
  DenseCall call;
  call.args.softmax_scale = 0.37f;
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_EQ(p.softmax_scale, 0.37f);
}

TEST(ValidationScalars, SoftcapMustBeFiniteAndNonNegative) {
  for (float cap : {-0.5f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    DenseCall call;
    call.args.softcap = cap;
    EXPECT_TRUE(Invalid(call.validate(), "softcap", {"finite and >= 0"})) << cap;
  }
}

TEST(ValidationScalars, PositiveSoftcapIsKept) {
  DenseCall call;
  call.args.softcap = 30.0f;
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_EQ(p.softcap, 30.0f);
}

TEST(ValidationScalars, WindowLeftBelowMinusOneIsRejected) {
  DenseCall call;
  call.args.window_left = -2;
  EXPECT_TRUE(Invalid(call.validate(), "window_left", {"-2", "-1 for unbounded"}));
}

TEST(ValidationScalars, WindowRightBelowMinusOneIsRejected) {
  DenseCall call;
  call.args.window_right = INT_MIN;
  EXPECT_TRUE(Invalid(call.validate(), "window_right", {"-1 for unbounded"}));
}

TEST(ValidationScalars, NegativeAttentionChunkIsRejected) {
  DenseCall call;
  call.args.attention_chunk = -3;
  EXPECT_TRUE(Invalid(call.validate(), "attention_chunk", {"-3", ">= 0"}));
}

TEST(ValidationScalars, AttentionChunksThatMaskNothingAreOffAndLongOnesCapped) {
  // DenseCall: seqlen_q 5 <= seqlen_k 7. A chunk of 7 keys or more holds every key and every diagonal.
  DenseCall call;
  Problem p;
  for (int chunk : {7, 8, INT_MAX}) {
    call.args.attention_chunk = chunk;
    ASSERT_TRUE(call.validate(&p).ok());
    EXPECT_EQ(p.attention_chunk, 0) << chunk;
  }
  call.args.attention_chunk = 6;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_EQ(p.attention_chunk, 6);
  // With seqused_k (the key lengths unknown here), a long chunk is only capped at seqlen_q + seqlen_k.
  const std::vector<std::int32_t> used = {7, 3};
  call.args.seqused_k = make_tensor(const_cast<std::int32_t*>(used.data()), Dtype::kInt32, {2}, DeviceType::kHost);
  call.args.attention_chunk = INT_MAX;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_EQ(p.attention_chunk, 5 + 7);
  // So with seqused_q (fewer rows move the diagonals left, before key 0).
  const std::vector<std::int32_t> used_q = {5, 1};
  call.args.seqused_k.reset();
  call.args.seqused_q = make_tensor(const_cast<std::int32_t*>(used_q.data()), Dtype::kInt32, {2}, DeviceType::kHost);
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate().message();
  EXPECT_EQ(p.attention_chunk, 5 + 7);
}

TEST(ValidationScalars, CausalWithPositiveWindowRightIsAContradiction) {
  DenseCall call;
  call.args.causal = true;
  call.args.window_right = 2;
  EXPECT_TRUE(Invalid(call.validate(), "causal", {"window_right 2"}));
}

TEST(ValidationScalars, CausalFoldsIntoWindowMinusOneZero) {
  for (int right : {-1, 0}) {
    DenseCall call;
    call.args.causal = true;
    call.args.window_right = right;
    Problem p;
    ASSERT_TRUE(call.validate(&p).ok()) << p.window_right;
    EXPECT_TRUE(p.causal);
    EXPECT_EQ(p.window_left, -1);
    EXPECT_EQ(p.window_right, 0);
  }
}

TEST(ValidationScalars, WindowMinusOneZeroIsCausal) {
  DenseCall call;
  call.args.window_right = 0;
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_TRUE(p.causal);
}

TEST(ValidationScalars, CausalWithWindowLeftIsALocalWindow) {
  // flash-attention's rule: causal means exactly the window (-1, 0); with a left bound it is local.
  DenseCall call;
  call.args.causal = true;
  call.args.window_left = 3;
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_FALSE(p.causal);
  EXPECT_EQ(p.window_left, 3);
  EXPECT_EQ(p.window_right, 0);
}

TEST(ValidationScalars, WindowsCoveringEveryKeyBecomeUnbounded) {
  // seqlen_q 5, seqlen_k 7: a left window above 7 or a right window above 5 masks nothing.
  DenseCall call;
  call.args.window_left = INT_MAX;
  call.args.window_right = INT_MAX;
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_FALSE(p.causal);

  call.args.window_left = 7;
  call.args.window_right = 5;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_EQ(p.window_left, 7);
  EXPECT_EQ(p.window_right, 5);
}

TEST(ValidationScalars, NegativeNumSplitsIsRejected) {
  DenseCall call;
  call.args.num_splits = -1;
  EXPECT_TRUE(Invalid(call.validate(), "num_splits", {"0 (heuristic)"}));
  call.args.num_splits = 3;
  EXPECT_TRUE(call.validate().ok());
}

}  // namespace
}  // namespace hopattn::test
