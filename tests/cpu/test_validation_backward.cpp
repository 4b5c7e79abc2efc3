// Validation of backward(): the shared checks plus dout, the required lse, and dq/dk/dv.
#include "test_validation_fixture.hpp"

namespace hopattn::test {
namespace {

TEST(ValidationBackward, ValidCallFillsProblem) {
  BackwardCall call;
  detail::Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate(&p).message();
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.head_dim, 24);
  EXPECT_EQ(p.seqlen_q, 5);
  EXPECT_EQ(p.seqlen_k, 7);
  EXPECT_FALSE(p.paged);
  EXPECT_TRUE(p.has_lse);
  EXPECT_EQ(p.in_dtype, Dtype::kFloat32);
  EXPECT_EQ(p.out_dtype, Dtype::kFloat32);
}

TEST(ValidationBackward, ValidVarlenCallPasses) {
  BackwardCall call;
  HostTensor cu_q(Dtype::kInt32, {3}), cu_k(Dtype::kInt32, {3});
  set_ints(cu_q, {0, 2, 10});
  set_ints(cu_k, {0, 7, 7});  // the second sequence has no keys
  for (Tensor* t : {&call.args.q, &call.args.out, &call.args.dout, &call.args.dq})
    *t = call.q.view({10, 4, 24}, {96, 24, 1});
  for (Tensor* t : {&call.args.k, &call.args.v, &call.args.dk, &call.args.dv}) *t = call.k.view({7, 2, 24}, {48, 24, 1});
  call.args.lse = call.lse.view({4, 5}, {5, 1});
  call.args.cu_seqlens_q = cu_q.tensor();
  call.args.cu_seqlens_k = cu_k.tensor();
  call.args.max_seqlen_q = 8;
  call.args.max_seqlen_k = 7;
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"(heads_q, total_q)", "(4, 10)"}));
  call.args.lse = call.lse.view({4, 10}, {10, 1});
  detail::Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate(&p).message();
  EXPECT_TRUE(p.varlen_q);
  EXPECT_TRUE(p.varlen_k);
}

TEST(ValidationBackward, DsinkNeedsTheSinkAndBothAreFloat32PerQHead) {
  BackwardCall call;  // 4 q heads
  HostTensor sinks(Dtype::kFloat32, {4}), dsink(Dtype::kFloat32, {4}), short_dsink(Dtype::kFloat32, {3});
  sinks.fill_random(3);
  call.args.dsink = dsink.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "dsink", {"learnable_sink"}));
  call.args.learnable_sink = sinks.tensor();
  ASSERT_TRUE(call.validate().ok()) << call.validate().message();
  call.args.dsink = short_dsink.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "dsink", {"(heads_q)", "(3)"}));
  call.args.dsink.reset();  // the sink alone: the gradients of q, k and v see it through lse
  ASSERT_TRUE(call.validate().ok()) << call.validate().message();
}

TEST(ValidationBackward, LseIsRequired) {
  BackwardCall call;
  call.args.lse.data = nullptr;
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"null"}));
}

TEST(ValidationBackward, LseMustBeFloat32) {
  BackwardCall call(64, Dtype::kBFloat16);
  call.args.lse.dtype = Dtype::kBFloat16;
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"float32"}));
}

TEST(ValidationBackward, LseShapeIsBatchHeadsSeqlen) {
  BackwardCall call;
  call.args.lse.shape[2] = 4;
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"(batch, heads_q, seqlen_q)"}));
}

TEST(ValidationBackward, Fp8IsUnsupported) {
  BackwardCall call(64, Dtype::kFloat8E4M3);
  EXPECT_TRUE(Fails(call.validate(), StatusCode::kUnsupported, "q", {"float8_e4m3", "backward"}));
}

TEST(ValidationBackward, QueryGradientsMustHaveQShape) {
  for (const char* name : {"out", "dout", "dq"}) {
    BackwardCall call;
    call.tensor(name)->shape[1] = 4;
    EXPECT_TRUE(Invalid(call.validate(), name, {"q's (2, 5, 4, 24)"}));
  }
}

TEST(ValidationBackward, DkMustHaveKShape) {
  BackwardCall call;
  call.args.dk.shape[2] = 1;
  EXPECT_TRUE(Invalid(call.validate(), "dk", {"k's (2, 7, 2, 24)"}));
}

TEST(ValidationBackward, DvMustHaveVShape) {
  BackwardCall call;
  call.args.dv.shape[1] = 6;
  EXPECT_TRUE(Invalid(call.validate(), "dv", {"v's (2, 7, 2, 24)"}));
}

TEST(ValidationBackward, GradientsMustHaveQDtype) {
  for (const char* name : {"out", "dout", "dq", "dk", "dv"}) {
    BackwardCall call(64, Dtype::kBFloat16);
    call.tensor(name)->dtype = Dtype::kFloat16;  // same element size: the buffer still fits
    EXPECT_TRUE(Invalid(call.validate(), name, {"float16", "q's bfloat16"}));
  }
}

TEST(ValidationBackward, KDtypeMustMatchQ) {
  BackwardCall call(64, Dtype::kFloat16);
  call.args.k.dtype = Dtype::kBFloat16;
  EXPECT_TRUE(Invalid(call.validate(), "k", {"bfloat16", "q's float16"}));
}

TEST(ValidationBackward, ScalarsAreChecked) {
  BackwardCall call;
  call.args.causal = true;
  call.args.window_right = 1;
  EXPECT_TRUE(Invalid(call.validate(), "causal", {"window_right 1"}));
}

// v's own head dim (FA3's headdim_v): out and dout end in it, dv has v's shape, dq q's.
TEST(ValidationBackward, VHeadDimOfItsOwnShapesOutDoutAndDv) {
  BackwardCall call;  // head_dim 24
  HostTensor v(Dtype::kFloat32, {2, 7, 2, 8}), out(Dtype::kFloat32, {2, 5, 4, 8});
  HostTensor dout(Dtype::kFloat32, {2, 5, 4, 8}), dv(Dtype::kFloat32, {2, 7, 2, 8});
  call.args.v = v.tensor();
  call.args.out = out.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "dout", {"v's head_dim 8", "(2, 5, 4, 8)"}));
  call.args.dout = dout.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "dv", {"v's (2, 7, 2, 8)"}));
  call.args.dv = dv.tensor();
  EXPECT_TRUE(call.validate().ok()) << call.validate().message();
}

TEST(ValidationBackward, HostLengthsAreChecked) {
  BackwardCall call;
  HostTensor used(Dtype::kInt32, {2});
  set_ints(used, {7, 8});
  call.args.seqused_k = used.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "seqused_k", {"entry 1 is 8", "[0, 7]"}));
  call.args.seqused_k.reset();
  call.args.seqused_q = used.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "seqused_q", {"entry 0 is 7"}));
}

TEST(ValidationBackward, MixedDevicesAreRejected) {
  BackwardCall call(64, Dtype::kBFloat16);
  call.args.dv.device = DeviceType::kCuda;
  EXPECT_TRUE(Invalid(call.validate(), "dv", {"one device"}));
}

TEST(ValidationBackward, CudaGradientsMustBeTmaAligned) {
  BackwardCall call(64, Dtype::kBFloat16);
  call.to_cuda();
  ASSERT_TRUE(call.validate().ok()) << call.validate().message();
  call.args.dq.data = static_cast<char*>(call.args.dq.data) + 8;
  EXPECT_TRUE(Invalid(call.validate(), "dq", {"16-byte"}));
}

}  // namespace
}  // namespace hopattn::test
