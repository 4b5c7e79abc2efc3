// Validation of ranks and shapes for the dense, varlen and paged layouts, heads and head_dim.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "test_validation_fixture.hpp"

namespace hopattn::test {
namespace {

TEST(ValidationLayout, DenseQMustBeRank4) {
  DenseCall call;
  HostTensor q(Dtype::kBFloat16, {10, 4, 33});
  call.args.q = q.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "q", {"rank 3", "(batch, seqlen_q, heads_q, head_dim)"}));
}

TEST(ValidationLayout, DenseKMustBeRank4) {
  DenseCall call;
  HostTensor k(Dtype::kBFloat16, {14, 2, 33});
  call.args.k = k.tensor();
  call.args.v = k.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "k", {"(batch, seqlen_k, heads_kv, head_dim)"}));
}

TEST(ValidationLayout, ZeroBatchIsRejected) {
  DenseCall call;
  call.args.q.shape[0] = 0;
  EXPECT_TRUE(Invalid(call.validate(), "q", {"batch", ">= 1"}));
}

TEST(ValidationLayout, KBatchMustMatchQ) {
  DenseCall call;
  call.args.k.shape[0] = 1;
  EXPECT_TRUE(Invalid(call.validate(), "k", {"batch 1", "q's 2"}));
}

TEST(ValidationLayout, VMustHaveKShape) {
  DenseCall call;
  call.args.v.shape[1] = 6;
  EXPECT_TRUE(Invalid(call.validate(), "v", {"(2, 6, 2, 33)", "k's (2, 7, 2, 33)"}));
}

// flash-attention 3's headdim_v: v's last extent may differ from k's (host tensors: 1..512), and out
// then ends in it. On CUDA tensors the kernels take it under their head-dim rule: a multiple of 8 up to
// 256 at 16 bits, of 16 in FP8.
TEST(ValidationLayout, VMayHaveAHeadDimOfItsOwn) {
  DenseCall call;  // q, k head_dim 33
  HostTensor v(Dtype::kBFloat16, {2, 7, 2, 20}), out(Dtype::kBFloat16, {2, 5, 4, 20});
  call.args.v = v.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "out", {"q's (2, 5, 4, 33)", "v's head_dim 20", "(2, 5, 4, 20)"}));
  call.args.out = out.tensor();
  detail::Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate().message();
  EXPECT_EQ(p.head_dim, 33);
  EXPECT_EQ(p.head_dim_v, 20);
  call.args.v.shape[3] = 513;
  EXPECT_TRUE(Invalid(call.validate(), "v", {"head_dim 513", "1..512"}));

  for (int head_dim_v : {128, 24, 256}) {
    DenseCall cuda(64);
    HostTensor v_cuda(Dtype::kBFloat16, {2, 7, 2, head_dim_v}), out_cuda(Dtype::kBFloat16, {2, 5, 4, head_dim_v});
    cuda.args.v = v_cuda.tensor();
    cuda.args.out = out_cuda.tensor();
    cuda.to_cuda();
    ASSERT_TRUE(cuda.validate(&p).ok()) << head_dim_v << ": " << cuda.validate().message();
    EXPECT_EQ(p.head_dim_v, head_dim_v);
    EXPECT_EQ(detail::widest_head_dim(p), std::max(64, head_dim_v));
  }
  for (int head_dim_v : {20, 264}) {
    DenseCall cuda(64);
    HostTensor v_cuda(Dtype::kBFloat16, {2, 7, 2, head_dim_v}), out_cuda(Dtype::kBFloat16, {2, 5, 4, head_dim_v});
    cuda.args.v = v_cuda.tensor();
    cuda.args.out = out_cuda.tensor();
    cuda.to_cuda();
    const std::string named = "head_dim " + std::to_string(head_dim_v);
    EXPECT_TRUE(Fails(cuda.validate(), StatusCode::kUnsupported, "v",
                      {named.c_str(), "multiple of 8 from 8 to 256", "for v"}));
  }
  for (int head_dim_v : {64, 16, 256, 40, 264}) {
    DenseCall fp8(192, Dtype::kFloat8E4M3);
    HostTensor v_fp8(Dtype::kFloat8E4M3, {2, 7, 2, head_dim_v}), out_fp8(Dtype::kBFloat16, {2, 5, 4, head_dim_v});
    fp8.args.v = v_fp8.tensor();
    fp8.args.out = out_fp8.tensor();
    fp8.to_cuda();
    if (head_dim_v % 16 == 0 && head_dim_v <= 256) {
      ASSERT_TRUE(fp8.validate(&p).ok()) << head_dim_v << ": " << fp8.validate().message();
      EXPECT_EQ(p.head_dim_v, head_dim_v);
      continue;
    }
    const std::string named = "head_dim " + std::to_string(head_dim_v);
    EXPECT_TRUE(Fails(fp8.validate(), StatusCode::kUnsupported, "v",
                      {named.c_str(), "FP8", "a multiple of 16 from 16 to 256", "for v"}));
  }
}

// qv (FA3's): out's shape, q's dtype, 16/32-bit tensors; its default scale is 1/sqrt(d + d_v). On CUDA
// tensors the sm_90a kernel takes q/k head dim 64 with v, qv and out 512 (DeepSeek's MLA decoding), bf16
// or fp16: such calls pass validation. Other pairs are refused with kUnsupported naming qv, 64 and 512,
// by validation or by the dispatch (which needs a GPU to reach: tests/gpu/test_qv_forward.cu,
// QvUnsupported); FP8 inputs are refused here.
TEST(ValidationLayout, QvHasOutsShapeAndQsDtypeOnHostTensors) {
  DenseCall call;  // bf16, head_dim 33
  HostTensor qv(Dtype::kBFloat16, {2, 5, 4, 33}), wrong_shape(Dtype::kBFloat16, {2, 5, 4, 32});
  HostTensor wrong_dtype(Dtype::kFloat16, {2, 5, 4, 33});
  call.args.qv = wrong_shape.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "qv", {"v's head_dim 33", "(2, 5, 4, 33)"}));
  call.args.qv = wrong_dtype.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "qv", {"float16", "q's dtype"}));
  call.args.qv = qv.tensor();
  detail::Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate().message();
  EXPECT_FLOAT_EQ(p.softmax_scale, 1.0f / std::sqrt(66.0f));
  call.args.softmax_scale = 0.25f;
  ASSERT_TRUE(call.validate(&p).ok());
  EXPECT_EQ(p.softmax_scale, 0.25f);
  for (Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat16}) {
    DenseCall cuda(64, dtype);
    HostTensor v512(dtype, {2, 7, 2, 512}), qv512(dtype, {2, 5, 4, 512}), out512(dtype, {2, 5, 4, 512});
    cuda.args.v = v512.tensor();
    cuda.args.out = out512.tensor();
    cuda.args.qv = qv512.tensor();
    cuda.to_cuda();
    move_to_cuda({&*cuda.args.qv});
    ASSERT_TRUE(cuda.validate(&p).ok()) << dtype_name(dtype) << ": " << cuda.validate().message();
    EXPECT_EQ(p.head_dim, 64);
    EXPECT_EQ(p.head_dim_v, 512);
    EXPECT_FLOAT_EQ(p.softmax_scale, 1.0f / std::sqrt(576.0f));
  }
  for (const auto& [head_dim, head_dim_v] : {std::pair{64, 64}, std::pair{64, 128}, std::pair{64, 256},
                                             std::pair{128, 128}, std::pair{128, 512}}) {
    DenseCall cuda(head_dim);
    HostTensor v_cuda(Dtype::kBFloat16, {2, 7, 2, head_dim_v}), qv_cuda(Dtype::kBFloat16, {2, 5, 4, head_dim_v}),
        out_cuda(Dtype::kBFloat16, {2, 5, 4, head_dim_v});
    cuda.args.v = v_cuda.tensor();
    cuda.args.out = out_cuda.tensor();
    cuda.args.qv = qv_cuda.tensor();
    cuda.to_cuda();
    move_to_cuda({&*cuda.args.qv});
    const Status s = cuda.validate();
    if (s.ok()) continue;  // the dispatch refuses it (GPU test QvUnsupported.EachRefusedArgumentIsNamed)
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << head_dim << "/" << head_dim_v << ": " << s.message();
    for (const char* named : {"qv", "64", "512"})
      EXPECT_NE(s.message().find(named), std::string::npos)
          << head_dim << "/" << head_dim_v << ": message lacks '" << named << "': " << s.message();
  }

  DenseCall fp8(64, Dtype::kFloat8E4M3);
  HostTensor qv8(Dtype::kFloat8E4M3, {2, 5, 4, 64});
  fp8.args.qv = qv8.tensor();
  EXPECT_TRUE(Fails(fp8.validate(), StatusCode::kUnsupported, "qv", {"float8_e4m3"}));
}

TEST(ValidationLayout, OutMustHaveQShape) {
  DenseCall call;
  call.args.out.shape[1] = 4;
  EXPECT_TRUE(Invalid(call.validate(), "out", {"q's (2, 5, 4, 33)"}));
}

TEST(ValidationLayout, DenseLseShapeIsBatchHeadsSeqlen) {
  DenseCall call;
  HostTensor lse(Dtype::kFloat32, {2, 5, 4});
  call.args.lse = lse.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"(batch, heads_q, seqlen_q)", "(2, 4, 5)"}));
}

TEST(ValidationLayout, VarlenLseShapeIsHeadsTotal) {
  VarlenCall call;
  HostTensor lse(Dtype::kFloat32, {2, 4, 5});
  call.args.lse = lse.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"(heads_q, total_q)", "(4, 9)"}));
}

TEST(ValidationLayout, VarlenQMustBeRank3) {
  VarlenCall call;
  HostTensor q(Dtype::kFloat16, {1, 9, 4, 16});
  call.args.q = q.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "q", {"rank 4", "(total_q, heads_q, head_dim)", "cu_seqlens_q"}));
}

TEST(ValidationLayout, CuSeqlensQMustBeRank1) {
  VarlenCall call;
  HostTensor cu(Dtype::kInt32, {3, 1});
  call.args.cu_seqlens_q = cu.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_q", {"rank 1", "(batch + 1)"}));
}

TEST(ValidationLayout, CuSeqlensQNeedsTwoEntries) {
  VarlenCall call;
  call.args.cu_seqlens_q->shape[0] = 1;
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_q", {"batch + 1 >= 2"}));
}

TEST(ValidationLayout, VarlenNeedsMaxSeqlenQAtLeastOne) {
  VarlenCall call;
  call.args.max_seqlen_q = 0;
  EXPECT_TRUE(Invalid(call.validate(), "max_seqlen_q", {">= 1"}));
}

TEST(ValidationLayout, NegativeMaxSeqlenIsRejected) {
  DenseCall dense;
  dense.args.max_seqlen_q = -1;
  EXPECT_TRUE(Invalid(dense.validate(), "max_seqlen_q", {">= 0"}));
  VarlenCall varlen;
  varlen.args.max_seqlen_k = -4;
  EXPECT_TRUE(Invalid(varlen.validate(), "max_seqlen_k", {">= 0"}));
}

TEST(ValidationLayout, VarlenKMustBeRank3) {
  VarlenCall call;
  HostTensor k(Dtype::kFloat16, {2, 6, 2, 16});
  call.args.k = call.args.v = k.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "k", {"(total_k, heads_kv, head_dim)", "cu_seqlens_k"}));
}

TEST(ValidationLayout, CuSeqlensKMustMatchBatch) {
  VarlenCall call;
  HostTensor cu(Dtype::kInt32, {4});
  set_ints(cu, {0, 5, 12, 12});
  call.args.cu_seqlens_k = cu.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_k", {"4 entries", "batch + 1 = 3"}));
}

TEST(ValidationLayout, VarlenQOverDenseKPasses) {
  VarlenCall call;
  HostTensor k(Dtype::kFloat16, {2, 7, 2, 16});
  k.fill_random(fresh_seed());
  call.args.k = call.args.v = k.tensor();
  call.args.cu_seqlens_k.reset();
  detail::Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate(&p).message();
  EXPECT_TRUE(p.varlen_q);
  EXPECT_FALSE(p.varlen_k);
  EXPECT_EQ(p.seqlen_k, 7);
}

TEST(ValidationLayout, PagedKMustBeRank4) {
  PagedCall call;
  HostTensor k(Dtype::kBFloat16, {24, 2, 16});
  call.args.k = call.args.v = k.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "k", {"(num_pages, page_size, heads_kv, head_dim)", "page_table"}));
}

TEST(ValidationLayout, PagedExcludesCuSeqlensK) {
  PagedCall call;
  HostTensor cu(Dtype::kInt32, {3});
  set_ints(cu, {0, 10, 22});
  call.args.cu_seqlens_k = cu.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_k", {"page_table", "seqused_k"}));
}

TEST(ValidationLayout, PageTableMustBeRank2) {
  PagedCall call;
  HostTensor table(Dtype::kInt32, {6});
  call.args.page_table = table.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "page_table", {"(batch, pages_per_seq)"}));
}

TEST(ValidationLayout, PageTableNeedsOneRowPerSequence) {
  PagedCall call;
  HostTensor table(Dtype::kInt32, {3, 2});
  call.args.page_table = table.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "page_table", {"3 rows", "batch = 2"}));
}

TEST(ValidationLayout, PageTableNeedsAPagePerSequence) {
  PagedCall call;
  call.args.page_table->shape[1] = 0;
  EXPECT_TRUE(Invalid(call.validate(), "page_table", {"pages_per_seq", ">= 1"}));
}

TEST(ValidationLayout, PagedKNeedsPagesOfAtLeastOneKey) {
  PagedCall call;
  call.args.k.shape[1] = call.args.v.shape[1] = 0;
  EXPECT_TRUE(Invalid(call.validate(), "k", {"num_pages and page_size must be >= 1"}));
}

TEST(ValidationLayout, PagedCapacityMustFitInt32) {
  PagedCall call;
  call.args.page_table->shape[1] = 1 << 30;  // * page_size 4 > INT32_MAX keys; never read
  EXPECT_TRUE(Invalid(call.validate(), "page_table", {"pages_per_seq * page_size"}));
}

TEST(ValidationLayout, SequsedKShapeIsBatch) {
  PagedCall call;
  HostTensor used(Dtype::kInt32, {3});
  set_ints(used, {1, 2, 3});
  call.args.seqused_k = used.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "seqused_k", {"(batch)", "(2)"}));
}

TEST(ValidationLayout, SequsedQShapeIsBatch) {
  for (const bool varlen : {false, true}) {
    DenseCall dense;
    VarlenCall packed;
    FwdArgs& args = varlen ? packed.args : dense.args;
    HostTensor used(Dtype::kInt32, {3});
    set_ints(used, {1, 2, 3});
    args.seqused_q = used.tensor();
    EXPECT_TRUE(Invalid(varlen ? packed.validate() : dense.validate(), "seqused_q", {"(batch)", "(2)"})) << varlen;
  }
}

TEST(ValidationLayout, HeadsQMustBePositive) {
  DenseCall call;
  call.args.q.shape[2] = call.args.out.shape[2] = 0;
  EXPECT_TRUE(Invalid(call.validate(), "q", {"heads_q", ">= 1"}));
}

TEST(ValidationLayout, HeadsKvMustBePositive) {
  DenseCall call;
  call.args.k.shape[2] = call.args.v.shape[2] = 0;
  EXPECT_TRUE(Invalid(call.validate(), "k", {"heads_kv", ">= 1"}));
}

TEST(ValidationLayout, HeadsQMustBeAMultipleOfHeadsKv) {
  DenseCall call;
  HostTensor k(Dtype::kBFloat16, {2, 7, 3, 33});
  call.args.k = call.args.v = k.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "k", {"heads_kv 3", "heads_q 4", "multiple"}));
}

TEST(ValidationLayout, KHeadDimMustMatchQ) {
  DenseCall call;
  HostTensor k(Dtype::kBFloat16, {2, 7, 2, 32});
  call.args.k = call.args.v = k.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "k", {"head_dim 32", "q's 33"}));
}

TEST(ValidationLayout, HostHeadDimMustBeOneTo512) {
  for (int d : {0, 513}) {
    DenseCall call(d);
    if (d == 0)
      for (Tensor* t : {&call.args.q, &call.args.k, &call.args.v, &call.args.out}) t->data = call.lse.data();
    EXPECT_TRUE(Invalid(call.validate(), "q", {"1..512"})) << "d=" << d;
  }
}

TEST(ValidationLayout, HostHeadDimBoundariesPass) {
  for (int d : {1, 512}) {
    DenseCall call(d);
    EXPECT_TRUE(call.validate().ok()) << "d=" << d << ": " << call.validate().message();
  }
}

// bf16/fp16 on CUDA: any multiple of 8 from 8 to 256 (a non-native one runs in the next wider kernel,
// whose TMA loads need rows of a multiple of 16 bytes); anything else is refused, naming head_dim.
TEST(ValidationLayout, CudaHeadDimsOutsideMultiplesOf8To256AreUnsupported) {
  for (Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat16}) {
    for (int d : {4, 12, 100, 264, 512}) {
      DenseCall call(d, dtype);
      call.to_cuda();
      const std::string named = "head_dim " + std::to_string(d);
      EXPECT_TRUE(Fails(call.validate(), StatusCode::kUnsupported, "q",
                        {named.c_str(), "a multiple of 8 from 8 to 256", "CUDA"}))
          << dtype_name(dtype) << " d=" << d;
    }
  }
}

TEST(ValidationLayout, CudaHeadDimsMultiplesOf8To256Pass) {
  for (Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat16}) {
    for (int d = 8; d <= 256; d += 8) {
      DenseCall call(d, dtype);
      call.to_cuda();
      EXPECT_TRUE(call.validate().ok()) << dtype_name(dtype) << " d=" << d << ": " << call.validate().message();
    }
  }
}

// FP8 kernels are 64, 128 and 256 wide; they run any multiple of 16 up to 256 in the next wider one
// (rows of whole 16-byte units keep TMA's strides), and refuse the rest naming q's head_dim.
TEST(ValidationLayout, CudaFp8HeadDimNotAMultipleOf16IsUnsupported) {
  for (int d : {8, 40, 100, 200, 264}) {
    DenseCall call(d, Dtype::kFloat8E4M3);
    call.to_cuda();
    const std::string named = "head_dim " + std::to_string(d);
    EXPECT_TRUE(Fails(call.validate(), StatusCode::kUnsupported, "q", {named.c_str(), "a multiple of 16 from 16 to 256"}))
        << "d=" << d;
  }
}

TEST(ValidationLayout, CudaFp8HeadDimsMultiplesOf16Pass) {
  for (int d = 16; d <= 256; d += 16) {
    DenseCall call(d, Dtype::kFloat8E4M3);
    call.to_cuda();
    EXPECT_TRUE(call.validate().ok()) << "d=" << d << ": " << call.validate().message();
  }
}

// The backward's arguments pass the same head_dim rule (its kernels' own limit, 128, is the dispatch's).
TEST(ValidationLayout, CudaBackwardHeadDimFollowsTheSameRule) {
  BackwardCall padded(40, Dtype::kBFloat16);
  padded.to_cuda();
  EXPECT_TRUE(padded.validate().ok()) << padded.validate().message();
  BackwardCall odd(100, Dtype::kBFloat16);
  odd.to_cuda();
  EXPECT_TRUE(Fails(odd.validate(), StatusCode::kUnsupported, "q", {"head_dim 100", "a multiple of 8 from 8 to 256"}));
}

TEST(ValidationLayout, CudaBasePointerMustBe16ByteAligned) {
  DenseCall call(64);
  call.to_cuda();
  call.args.v.data = static_cast<char*>(call.args.v.data) + 2;  // still bf16-aligned
  EXPECT_TRUE(Invalid(call.validate(), "v", {"16-byte"}));
}

TEST(ValidationLayout, CudaStridesMustBeMultiplesOf16Bytes) {
  // q rows of 68 bf16 elements (136 bytes) between heads: the last dim is contiguous but TMA cannot stride.
  DenseCall call(64);
  HostTensor q(Dtype::kBFloat16, {2, 5, 4, 68});
  call.args.q = q.view({2, 5, 4, 64}, {5 * 4 * 68, 4 * 68, 68, 1});
  call.to_cuda();
  EXPECT_TRUE(Invalid(call.validate(), "q", {"dimension 2", "multiple of 16 bytes"}));
}

TEST(ValidationLayout, CudaTensorsMustNotBeEmpty) {
  DenseCall call(64);
  call.args.q.shape[1] = call.args.out.shape[1] = 0;
  call.args.lse->shape[2] = 0;
  call.to_cuda();
  EXPECT_TRUE(Fails(call.validate(), StatusCode::kUnsupported, "q", {"empty", "host"}));
}

}  // namespace
}  // namespace hopattn::test
