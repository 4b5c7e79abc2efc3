// Validation of the values inside host int32 tensors: cu_seqlens, seqused_k, seqused_q, page_table.
#include "test_validation_fixture.hpp"

namespace hopattn::test {
namespace {

TEST(ValidationValues, CuSeqlensMustStartAtZero) {
  VarlenCall call;
  set_ints(call.cu_seqlens_q, {1, 4, 9});
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_q", {"entry 0 is 1", "start at 0"}));
}

TEST(ValidationValues, CuSeqlensMustNotDecrease) {
  VarlenCall call;
  set_ints(call.cu_seqlens_k, {0, 6, 5});
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_k", {"non-decreasing"}));
}

TEST(ValidationValues, CuSeqlensQMustEndAtTotalRows) {
  VarlenCall call;
  set_ints(call.cu_seqlens_q, {0, 4, 8});
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_q", {"last entry 8", "9 rows of q"}));
}

TEST(ValidationValues, CuSeqlensKMustEndAtTotalRows) {
  VarlenCall call;
  set_ints(call.cu_seqlens_k, {0, 5, 11});
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_k", {"last entry 11", "12 rows of k"}));
}

TEST(ValidationValues, SequenceLongerThanMaxSeqlenIsRejected) {
  VarlenCall q_side;
  q_side.args.max_seqlen_q = 4;
  EXPECT_TRUE(Invalid(q_side.validate(), "cu_seqlens_q", {"sequence 1 has length 5", "max_seqlen_q 4"}));
  VarlenCall k_side;
  k_side.args.max_seqlen_k = 6;
  EXPECT_TRUE(Invalid(k_side.validate(), "cu_seqlens_k", {"length 7", "max_seqlen_k 6"}));
}

TEST(ValidationValues, EmptySequencesPass) {
  VarlenCall call;
  set_ints(call.cu_seqlens_q, {0, 0, 9});
  call.args.max_seqlen_q = 9;
  EXPECT_TRUE(call.validate().ok()) << call.validate().message();
}

TEST(ValidationValues, SequsedKAbovePagedCapacityIsRejected) {
  PagedCall call;
  set_ints(call.seqused_k, {13, 12});
  EXPECT_TRUE(Invalid(call.validate(), "seqused_k", {"entry 0 is 13", "[0, 12]"}));
}

TEST(ValidationValues, NegativeSequsedKIsRejected) {
  PagedCall call;
  set_ints(call.seqused_k, {4, -1});
  EXPECT_TRUE(Invalid(call.validate(), "seqused_k", {"entry 1 is -1"}));
}

TEST(ValidationValues, SequsedKIsBoundedByEachVarlenSequence) {
  VarlenCall call;
  HostTensor used(Dtype::kInt32, {2});
  set_ints(used, {6, 7});  // sequence 0 has 5 keys
  call.args.seqused_k = used.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "seqused_k", {"entry 0 is 6", "[0, 5]"}));
  set_ints(used, {0, 7});
  EXPECT_TRUE(call.validate().ok()) << call.validate().message();
}

TEST(ValidationValues, SequsedQIsBoundedByEachSequencesRows) {
  VarlenCall varlen;  // query lengths {4, 5}
  HostTensor used(Dtype::kInt32, {2});
  set_ints(used, {4, 6});
  varlen.args.seqused_q = used.tensor();
  EXPECT_TRUE(Invalid(varlen.validate(), "seqused_q", {"entry 1 is 6", "[0, 5]", "query rows"}));
  set_ints(used, {-1, 5});
  EXPECT_TRUE(Invalid(varlen.validate(), "seqused_q", {"entry 0 is -1"}));
  set_ints(used, {0, 5});
  detail::Problem p;
  ASSERT_TRUE(varlen.validate(&p).ok()) << varlen.validate().message();
  EXPECT_TRUE(p.has_seqused_q);

  DenseCall dense;  // seqlen_q 5
  dense.args.seqused_q = used.tensor();
  set_ints(used, {5, 6});
  EXPECT_TRUE(Invalid(dense.validate(), "seqused_q", {"entry 1 is 6", "[0, 5]"}));
  set_ints(used, {5, 2});
  EXPECT_TRUE(dense.validate().ok()) << dense.validate().message();
}

TEST(ValidationValues, PageIndexOutOfRangeIsRejected) {
  for (int bad : {6, -1}) {
    PagedCall call;
    set_ints(call.page_table, {5, 0, 3, 1, bad, 2});
    EXPECT_TRUE(Invalid(call.validate(), "page_table", {"entry (1, 1)", "[0, 6)"})) << bad;
  }
}

TEST(ValidationValues, CudaInt32ValuesAreTrusted) {
  // Reading device memory would need a sync, so values on CUDA are not checked (documented).
  HostTensor q(Dtype::kBFloat16, {9, 4, 64}), kv(Dtype::kBFloat16, {12, 2, 64}), out(Dtype::kBFloat16, {9, 4, 64});
  HostTensor cu_q(Dtype::kInt32, {3}), cu_k(Dtype::kInt32, {3});
  set_ints(cu_q, {7, 1, 2});  // invalid on the host
  set_ints(cu_k, {0, 5, 12});
  FwdArgs args;
  args.q = q.tensor();
  args.k = args.v = kv.tensor();
  args.out = out.tensor();
  args.cu_seqlens_q = cu_q.tensor();
  args.cu_seqlens_k = cu_k.tensor();
  args.max_seqlen_q = 5;
  args.max_seqlen_k = 7;
  detail::Problem p;
  EXPECT_TRUE(Invalid(detail::validate_forward(args, &p), "cu_seqlens_q"));
  move_to_cuda({&args.q, &args.k, &args.v, &args.out, &*args.cu_seqlens_q, &*args.cu_seqlens_k});
  EXPECT_TRUE(detail::validate_forward(args, &p).ok()) << detail::validate_forward(args, &p).message();
}

}  // namespace
}  // namespace hopattn::test
