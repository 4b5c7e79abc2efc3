// Validation of each tensor on its own (data, rank, extents, strides, dtype codes), of devices, and of
// dtypes; plus valid calls that must pass and fill the Problem.
#include <climits>
#include <cmath>

#include "test_validation_fixture.hpp"

namespace hopattn::test {
namespace {

using detail::Problem;

TEST(Validation, ValidDenseCallFillsEveryProblemField) {
  DenseCall call;
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate(&p).message();
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.head_dim, 33);
  EXPECT_EQ(p.seqlen_q, 5);
  EXPECT_EQ(p.seqlen_k, 7);
  EXPECT_FALSE(p.varlen_q);
  EXPECT_FALSE(p.varlen_k);
  EXPECT_FALSE(p.has_seqused_k);
  EXPECT_FALSE(p.has_seqused_q);
  EXPECT_FALSE(p.paged);
  EXPECT_EQ(p.page_size, 0);
  EXPECT_EQ(p.pages_per_seq, 0);
  EXPECT_EQ(p.num_pages, 0);
  EXPECT_FLOAT_EQ(p.softmax_scale, 1.0f / std::sqrt(33.0f));
  EXPECT_FALSE(p.causal);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_EQ(p.softcap, 0.0f);
  EXPECT_EQ(p.in_dtype, Dtype::kBFloat16);
  EXPECT_EQ(p.out_dtype, Dtype::kBFloat16);
  EXPECT_TRUE(p.has_lse);
  EXPECT_EQ(p.device, DeviceType::kHost);
  EXPECT_EQ(p.device_index, 0);
}

TEST(Validation, ValidVarlenCallFillsLengths) {
  VarlenCall call;
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate(&p).message();
  EXPECT_TRUE(p.varlen_q);
  EXPECT_TRUE(p.varlen_k);
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.seqlen_q, 5);
  EXPECT_EQ(p.seqlen_k, 7);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.head_dim, 16);
  EXPECT_EQ(p.in_dtype, Dtype::kFloat16);
}

TEST(Validation, ValidPagedCallFillsPaging) {
  PagedCall call;
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate(&p).message();
  EXPECT_TRUE(p.paged);
  EXPECT_FALSE(p.varlen_k);
  EXPECT_TRUE(p.has_seqused_k);
  EXPECT_EQ(p.num_pages, 6);
  EXPECT_EQ(p.page_size, 4);
  EXPECT_EQ(p.pages_per_seq, 3);
  EXPECT_EQ(p.seqlen_k, 12);
  EXPECT_EQ(p.seqlen_q, 3);
  EXPECT_FALSE(p.has_lse);
}

TEST(Validation, ValidFp8CallWithDescalesGivesBf16Out) {
  DenseCall call(64, Dtype::kFloat8E4M3);
  HostTensor descale(Dtype::kFloat32, {2, 2});
  descale.fill_random(fresh_seed(), 0.5, 2.0);
  call.args.q_descale = call.args.k_descale = call.args.v_descale = descale.tensor();
  Problem p;
  ASSERT_TRUE(call.validate(&p).ok()) << call.validate(&p).message();
  EXPECT_EQ(p.in_dtype, Dtype::kFloat8E4M3);
  EXPECT_EQ(p.out_dtype, Dtype::kBFloat16);
}

TEST(Validation, StridedViewsPass) {
  // q, k, v as views into one packed (batch, seqlen, 3, heads, d) buffer: only the last dim is contiguous.
  HostTensor qkv(Dtype::kBFloat16, {1, 6, 3, 2, 40});
  qkv.fill_random(fresh_seed());
  HostTensor out(Dtype::kBFloat16, {1, 6, 2, 40});
  DenseCall call;
  const std::int64_t row = 3 * 2 * 40;
  call.args.q = qkv.view({1, 6, 2, 40}, {6 * row, row, 40, 1}, 0);
  call.args.k = qkv.view({1, 6, 2, 40}, {6 * row, row, 40, 1}, 80);
  call.args.v = qkv.view({1, 6, 2, 40}, {6 * row, row, 40, 1}, 160);
  call.args.out = out.tensor();
  call.args.lse.reset();
  EXPECT_TRUE(call.validate().ok()) << call.validate().message();
}

TEST(Validation, EmptyHostSequencesPass) {
  // seqlen_q 0 and seqlen_k 0 are well-defined on the host: nothing to compute / rows that see no key.
  // An empty tensor may come with a real address or with none (PyTorch's empty CPU tensors have none).
  for (auto [sq, sk] : {std::pair{0, 3}, std::pair{3, 0}}) {
    for (bool null_when_empty : {false, true}) {
      HostTensor q(Dtype::kFloat32, {1, sq, 2, 8}), kv(Dtype::kFloat32, {1, sk, 2, 8}),
          out(Dtype::kFloat32, {1, sq, 2, 8});
      FwdArgs args;
      args.q = q.tensor();
      args.k = args.v = kv.tensor();
      args.out = out.tensor();
      float storage[1];
      for (Tensor* t : {&args.q, &args.k, &args.v, &args.out})
        if (t->numel() == 0) t->data = null_when_empty ? nullptr : storage;
      const std::string where = "sq=" + std::to_string(sq) + " sk=" + std::to_string(sk) +
                                (null_when_empty ? " null" : " addressed");
      Problem p;
      EXPECT_TRUE(detail::validate_forward(args, &p).ok()) << where;
      EXPECT_TRUE(forward(args).ok()) << where;
    }
  }
}

TEST(Validation, NullDataOfEveryTensorIsRejected) {
  VarlenCall call;
  HostTensor seqused(Dtype::kInt32, {2}), seqused_q(Dtype::kInt32, {2});
  set_ints(seqused, {5, 7});
  set_ints(seqused_q, {4, 0});
  call.args.seqused_k = seqused.tensor();
  call.args.seqused_q = seqused_q.tensor();
  ASSERT_TRUE(call.validate().ok()) << call.validate().message();
  const std::pair<const char*, Tensor*> tensors[] = {
      {"q", &call.args.q},           {"k", &call.args.k},
      {"v", &call.args.v},           {"out", &call.args.out},
      {"lse", &*call.args.lse},      {"cu_seqlens_q", &*call.args.cu_seqlens_q},
      {"cu_seqlens_k", &*call.args.cu_seqlens_k}, {"seqused_k", &*call.args.seqused_k},
      {"seqused_q", &*call.args.seqused_q}};
  for (auto [name, tensor] : tensors) {
    void* data = tensor->data;
    tensor->data = nullptr;
    EXPECT_TRUE(Invalid(call.validate(), name, {"null"}));
    tensor->data = data;
  }
}

TEST(Validation, NullPageTableAndDescaleAreRejected) {
  PagedCall paged;
  paged.args.page_table->data = nullptr;
  EXPECT_TRUE(Invalid(paged.validate(), "page_table", {"null"}));

  DenseCall fp8(64, Dtype::kFloat8E4M3);
  HostTensor descale(Dtype::kFloat32, {2, 2});
  fp8.args.k_descale = descale.tensor();
  fp8.args.k_descale->data = nullptr;
  EXPECT_TRUE(Invalid(fp8.validate(), "k_descale", {"null"}));
}

TEST(Validation, RankOutsideOneToFourIsRejected) {
  for (int rank : {0, -1, 5, INT_MAX}) {
    DenseCall call;
    call.args.k.rank = rank;
    EXPECT_TRUE(Invalid(call.validate(), "k", {"rank", "1..4"})) << "rank " << rank;
  }
}

TEST(Validation, NegativeExtentIsRejected) {
  DenseCall call;
  call.args.v.shape[1] = -7;
  EXPECT_TRUE(Invalid(call.validate(), "v", {"-7", "extents must be in [0, 2147483647]"}));
}

TEST(Validation, ExtentAboveInt32IsRejected) {
  DenseCall call;
  call.args.q.shape[1] = std::int64_t{1} << 40;
  EXPECT_TRUE(Invalid(call.validate(), "q", {"extents must be in [0, 2147483647]"}));
}

TEST(Validation, NegativeStrideIsRejected) {
  DenseCall call;
  call.args.out.stride[0] = -1;
  EXPECT_TRUE(Invalid(call.validate(), "out", {"strides must be >= 0"}));
}

TEST(Validation, NonContiguousLastDimensionIsRejected) {
  DenseCall call;
  call.args.k.stride[3] = 2;
  EXPECT_TRUE(Invalid(call.validate(), "k", {"contiguous (stride 1)"}));
}

TEST(Validation, OffsetsBeyondInt64AreRejected) {
  DenseCall call;
  call.args.q.stride[0] = INT64_MAX / 2;
  EXPECT_TRUE(Invalid(call.validate(), "q", {"int64"}));
}

TEST(Validation, PointerMisalignedForItsElementsIsRejected) {
  DenseCall call;
  call.args.lse->data = static_cast<char*>(call.args.lse->data) + 2;  // float32 needs 4-byte alignment
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"aligned", "float32"}));
}

TEST(Validation, UnknownDtypeCodeIsRejected) {
  DenseCall call;
  call.args.v.dtype = static_cast<Dtype>(42);
  EXPECT_TRUE(Invalid(call.validate(), "v", {"dtype code 42"}));
}

TEST(Validation, UnknownDeviceCodeIsRejected) {
  DenseCall call;
  call.args.out.device = static_cast<DeviceType>(7);
  EXPECT_TRUE(Invalid(call.validate(), "out", {"kHost or kCuda"}));
}

TEST(Validation, NegativeCudaDeviceIndexIsRejected) {
  DenseCall call(64);
  call.to_cuda();
  for (Tensor* t : {&call.args.q, &call.args.k, &call.args.v, &call.args.out, &*call.args.lse}) t->device_index = -1;
  EXPECT_TRUE(Invalid(call.validate(), "q", {"device_index -1"}));
}

TEST(Validation, TensorsOnDifferentDeviceTypesAreRejected) {
  DenseCall call(64);
  call.args.k.device = DeviceType::kCuda;
  EXPECT_TRUE(Invalid(call.validate(), "k", {"cuda:0", "host", "one device"}));
}

TEST(Validation, TensorsOnDifferentCudaDevicesAreRejected) {
  DenseCall call(64);
  call.to_cuda();
  call.args.lse->device_index = 1;
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"cuda:1", "cuda:0"}));
}

TEST(Validation, HostDeviceIndexIsIgnored) {
  DenseCall call;
  call.args.v.device_index = 3;
  EXPECT_TRUE(call.validate().ok()) << call.validate().message();
}

TEST(Validation, Int32InputsAreRejected) {
  DenseCall call;
  HostTensor q(Dtype::kInt32, {2, 5, 4, 33});
  call.args.q = q.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "q", {"int32", "float16, bfloat16, float8_e4m3 or float32"}));
}

TEST(Validation, KDtypeMismatchNamesBothDtypes) {
  DenseCall call;
  HostTensor k(Dtype::kFloat16, {2, 7, 2, 33});
  call.args.k = k.tensor();
  const Status s = call.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "k: dtype float16 does not match q's bfloat16; q, k and v must share one dtype");
}

TEST(Validation, VDtypeMismatchIsRejected) {
  DenseCall call;
  HostTensor v(Dtype::kFloat32, {2, 7, 2, 33});
  call.args.v = v.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "v", {"float32", "bfloat16", "one dtype"}));
}

TEST(Validation, OutDtypeMustMatchQ) {
  DenseCall call;
  HostTensor out(Dtype::kFloat16, {2, 5, 4, 33});
  call.args.out = out.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "out", {"float16", "q's dtype"}));
}

TEST(Validation, Fp8OutMustBeBf16) {
  DenseCall call(64, Dtype::kFloat8E4M3);
  HostTensor out(Dtype::kFloat8E4M3, {2, 5, 4, 64});
  call.args.out = out.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "out", {"bfloat16"}));
}

TEST(Validation, Float32OnCudaIsUnsupported) {
  DenseCall call(64, Dtype::kFloat32);
  call.to_cuda();
  EXPECT_TRUE(Fails(call.validate(), StatusCode::kUnsupported, "q", {"float32", "host"}));
}

TEST(Validation, LseMustBeFloat32) {
  DenseCall call;
  HostTensor lse(Dtype::kBFloat16, {2, 4, 5});
  call.args.lse = lse.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "lse", {"bfloat16", "float32"}));
}

TEST(Validation, LearnableSinkIsFloat32PerQHead) {
  DenseCall call;  // 4 q heads
  HostTensor sinks(Dtype::kFloat32, {4}), wrong_dtype(Dtype::kBFloat16, {4}), per_kv_head(Dtype::kFloat32, {2});
  sinks.fill_random(7);
  call.args.learnable_sink = sinks.tensor();
  ASSERT_TRUE(call.validate().ok()) << call.validate().message();
  call.args.learnable_sink = wrong_dtype.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "learnable_sink", {"bfloat16", "float32"}));
  call.args.learnable_sink = per_kv_head.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "learnable_sink", {"(heads_q)", "(2)"}));
  call.args.learnable_sink = sinks.tensor();
  call.args.learnable_sink->device_index = 1;
  call.args.learnable_sink->device = DeviceType::kCuda;
  EXPECT_TRUE(Invalid(call.validate(), "learnable_sink", {"cuda:1", "host"}));
}

TEST(Validation, CuSeqlensMustBeInt32) {
  VarlenCall call;
  HostTensor cu(Dtype::kFloat32, {3});
  call.args.cu_seqlens_k = cu.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "cu_seqlens_k", {"float32", "int32"}));
}

TEST(Validation, SequsedKMustBeInt32) {
  PagedCall call;
  HostTensor used(Dtype::kFloat32, {2});
  call.args.seqused_k = used.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "seqused_k", {"int32"}));
}

TEST(Validation, SequsedQMustBeInt32) {
  VarlenCall call;
  HostTensor used(Dtype::kFloat16, {2});
  call.args.seqused_q = used.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "seqused_q", {"float16", "int32"}));
}

TEST(Validation, PageTableMustBeInt32) {
  PagedCall call;
  HostTensor table(Dtype::kFloat16, {2, 3});
  call.args.page_table = table.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "page_table", {"int32"}));
}

TEST(Validation, DescalesMustBeFloat32) {
  DenseCall call(64, Dtype::kFloat8E4M3);
  HostTensor descale(Dtype::kBFloat16, {2, 2});
  call.args.v_descale = descale.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "v_descale", {"float32"}));
}

TEST(Validation, DescalesNeedFp8Inputs) {
  DenseCall call;
  HostTensor descale(Dtype::kFloat32, {2, 2});
  descale.fill_random(fresh_seed());
  call.args.q_descale = descale.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "q_descale", {"bfloat16", "float8_e4m3"}));
}

TEST(Validation, DescaleShapeIsBatchByHeadsKv) {
  DenseCall call(64, Dtype::kFloat8E4M3);
  HostTensor descale(Dtype::kFloat32, {2, 4});
  call.args.k_descale = descale.tensor();
  EXPECT_TRUE(Invalid(call.validate(), "k_descale", {"(batch, heads_kv)", "(2, 2)"}));
}

TEST(Validation, InvalidArgumentReachesTheCallerAndLeavesOutputsUntouched) {
  DenseCall call;
  call.args.softcap = -1.0f;
  const Status s = forward(call.args);
  EXPECT_TRUE(Invalid(s, "softcap"));
  for (double x : call.out.to_double()) ASSERT_TRUE(std::isnan(x));
  for (double x : call.lse.to_double()) ASSERT_TRUE(std::isnan(x));
}

}  // namespace
}  // namespace hopattn::test
