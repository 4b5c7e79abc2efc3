// v's two layouts: the ordinary one (last dimension contiguous) and keys contiguous (stride[1] == 1,
// V^T in memory), which only float8_e4m3 dense inputs take. Validation sets Problem::v_keys_contiguous,
// prefers the ordinary layout when both hold, and refuses every other use with a message naming v (v8
// for quantize_fp8).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "common/host_tensor.hpp"
#include "cpu/test_fp8_util.hpp"
#include "cpu/test_validation_fixture.hpp"
#include "hopattn/quantize.hpp"

namespace hopattn::test {
namespace {

// A (batch, seqlen_k, heads_kv, d) view with the keys contiguous, into `storage` (at least batch *
// heads_kv * d * padded_keys elements): a (batch, heads_kv, d, padded_keys) buffer.
Tensor keys_contiguous_view(const HostTensor& storage, std::int64_t batch, std::int64_t seqlen_k,
                            std::int64_t heads_kv, std::int64_t d, std::int64_t padded_keys) {
  return storage.view({batch, seqlen_k, heads_kv, d}, {heads_kv * d * padded_keys, 1, d * padded_keys, padded_keys});
}

// DenseCall's v (2, 7, 2, d) with its keys contiguous, padded to `padded_keys`.
struct KeysContiguousCall : DenseCall {
  explicit KeysContiguousCall(Dtype dtype = Dtype::kFloat8E4M3, std::int64_t padded_keys = 7, int d = 64)
      : DenseCall(d, dtype), storage(dtype, {2, 2, d, padded_keys}) {
    args.v = keys_contiguous_view(storage, 2, 7, 2, d, padded_keys);
  }
  HostTensor storage;
};

TEST(ValidationVLayout, Fp8DenseKeysContiguousIsFlagged) {
  KeysContiguousCall call;
  detail::Problem problem;
  Status status = call.validate(&problem);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(problem.v_keys_contiguous);

  DenseCall ordinary(64, Dtype::kFloat8E4M3);
  status = ordinary.validate(&problem);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_FALSE(problem.v_keys_contiguous);
}

TEST(ValidationVLayout, OrdinaryLayoutWinsWhenBothHold) {
  detail::Problem problem;
  // head_dim 1: the last dimension is contiguous whatever its stride.
  KeysContiguousCall one_column(Dtype::kFloat8E4M3, 7, 1);
  ASSERT_TRUE(one_column.validate(&problem).ok());
  EXPECT_FALSE(problem.v_keys_contiguous);
  // One key with stride[1] == stride[3] == 1.
  DenseCall one_key(64, Dtype::kFloat8E4M3);
  HostTensor k(Dtype::kFloat8E4M3, {2, 1, 2, 64});
  one_key.args.k = k.tensor();
  one_key.args.v = k.view({2, 1, 2, 64}, {128, 1, 64, 1});
  ASSERT_TRUE(one_key.validate(&problem).ok());
  EXPECT_FALSE(problem.v_keys_contiguous);
  // One key with stride[3] != 1: keys contiguous (its stride[1] is never stepped).
  HostTensor storage(Dtype::kFloat8E4M3, {2, 2, 64, 16});
  one_key.args.v = storage.view({2, 1, 2, 64}, {2048, 5, 1024, 16});
  const Status status = one_key.validate(&problem);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(problem.v_keys_contiguous);
}

TEST(ValidationVLayout, KeysContiguousNeedsFp8) {
  for (Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat16, Dtype::kFloat32}) {
    KeysContiguousCall call(dtype);
    EXPECT_TRUE(Invalid(call.validate(), "v", {"keys contiguous", dtype_name(dtype), "only float8_e4m3 dense"}));
  }
}

TEST(ValidationVLayout, KeysContiguousNeedsDenseKeys) {
  PagedCall paged;  // v (6 pages, 4 keys, 2 heads, 16): each page's V^T in memory
  for (Tensor* t : {&paged.args.q, &paged.args.k, &paged.args.v}) t->dtype = Dtype::kFloat8E4M3;
  paged.args.v = keys_contiguous_view(paged.v, 6, 4, 2, 16, 4);
  paged.args.v.dtype = Dtype::kFloat8E4M3;
  EXPECT_TRUE(Invalid(paged.validate(), "v", {"keys contiguous", "paged (page_table)"}));

  VarlenCall varlen;  // v (12 keys, 2 heads, 16) with the keys contiguous
  for (Tensor* t : {&varlen.args.q, &varlen.args.k, &varlen.args.v}) t->dtype = Dtype::kFloat8E4M3;
  varlen.args.out.dtype = Dtype::kBFloat16;
  varlen.args.v = varlen.v.view({12, 2, 16}, {1, 16 * 12, 12});
  varlen.args.v.dtype = Dtype::kFloat8E4M3;
  EXPECT_TRUE(Invalid(varlen.validate(), "v", {"keys contiguous (stride[0] == 1", "varlen (cu_seqlens_k)"}));
}

TEST(ValidationVLayout, NeitherLayoutIsRefused) {
  for (Dtype dtype : {Dtype::kFloat8E4M3, Dtype::kBFloat16}) {
    DenseCall call(32, dtype);  // v (2, 7, 2, 32) read at every other element: 64-element rows
    HostTensor wide(dtype, {2, 7, 2, 64});
    call.args.v = wide.view({2, 7, 2, 32}, {7 * 2 * 64, 2 * 64, 64, 2});
    EXPECT_TRUE(Invalid(call.validate(), "v", {"neither its last dimension (stride[3] is 2)", "stride[1] == 1"}));
  }
}

TEST(ValidationVLayout, BackwardRefusesKeysContiguous) {
  BackwardCall call;  // float32, v (2, 7, 2, 24)
  HostTensor storage(Dtype::kFloat32, {2, 2, 24, 7});
  call.args.v = keys_contiguous_view(storage, 2, 7, 2, 24, 7);
  EXPECT_TRUE(Invalid(call.validate(), "v", {"keys contiguous", "float32"}));
}

TEST(ValidationVLayout, CudaKeysContiguousNeeds16ByteStridesBesidesTheKeys) {
  KeysContiguousCall unpadded(Dtype::kFloat8E4M3, 7);  // stride[3] = 7 bytes
  unpadded.to_cuda();
  EXPECT_TRUE(Invalid(unpadded.validate(), "v", {"dimension 3 has stride 7", "keys'", "16 bytes"}));

  KeysContiguousCall padded(Dtype::kFloat8E4M3, 16);  // strides 2048, 1, 1024, 16 bytes
  padded.to_cuda();
  detail::Problem problem;
  const Status status = padded.validate(&problem);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(problem.v_keys_contiguous);
}

// quantize_fp8's v8 follows the same rules; its messages start with "quantize_fp8: v8: ".
Status quantize_with(const std::function<void(fp8_test::QuantCase&)>& change) {
  static std::mt19937_64 rng{std::random_device{}()};
  fp8_test::QuantCase c =
      fp8_test::make_case({2, 5, 7, 4, 2, 64}, Dtype::kBFloat16, QuantGranularity::kPerBlock, false, rng);
  change(c);
  return quantize_fp8(c.args);
}

::testing::AssertionResult QuantizeInvalid(const Status& status, const std::string& detail) {
  if (status.code() == StatusCode::kInvalidArgument && status.message().rfind("quantize_fp8: v8: ", 0) == 0 &&
      status.message().find(detail) != std::string::npos)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message lacks 'quantize_fp8: v8: ' or '" << detail
                                       << "': " << status.message();
}

TEST(ValidationVLayout, QuantizeV8FollowsTheSameRules) {
  const Status host = quantize_with([](fp8_test::QuantCase& c) { fp8_test::store_v8_keys_contiguous(c, 7); });
  EXPECT_TRUE(host.ok()) << host.message();
  EXPECT_TRUE(QuantizeInvalid(quantize_with([](fp8_test::QuantCase& c) { c.args.v8.stride[3] = 2; }),
                              "neither its last dimension (stride[3] is 2)"));
  const Status cuda = quantize_with([](fp8_test::QuantCase& c) {
    fp8_test::store_v8_keys_contiguous(c, 7);
    for (int t = 0; t < 3; ++t)
      for (Tensor* x : {&c.input(t), &c.output(t), &c.descale(t)}) x->device = DeviceType::kCuda;
  });
  EXPECT_TRUE(QuantizeInvalid(cuda, "dimension 3 has stride 7"));
}

}  // namespace
}  // namespace hopattn::test
