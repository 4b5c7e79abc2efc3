// attention_chunk on CUDA tensors: the sm_90a kernels refuse it (kUnsupported naming attention_chunk)
// until their chunk masks have run on a GPU (branch wip/attention-chunk-kernels), and write nothing.
// attention_chunk 0 is off and runs as before (every other GPU test).
#include <string>

#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

class AttentionChunkRefusal : public HopperTest {};

constexpr DenseExtents kShape{1, 2, 2, 70, 130, 64};
constexpr std::int64_t kQElements = 1LL * 70 * 2 * 64, kKvElements = 1LL * 130 * 2 * 64, kLseElements = 2 * 70;

// What is wrong with a refusal: its code and message, and anything written to the poisoned outputs.
std::string refusal_problems(const Status& status, const void* out, Dtype out_dtype, std::int64_t out_elements) {
  std::string problems;
  if (status.code() != StatusCode::kUnsupported) problems += "expected kUnsupported, got: " + status.message() + "; ";
  if (status.message().find("attention_chunk") == std::string::npos)
    problems += "the message does not name attention_chunk: " + status.message() + "; ";
  if (const std::int64_t n = count_unpoisoned(out, out_dtype, out_elements))
    problems += std::to_string(n) + " output elements written; ";
  return problems;
}

TEST_F(AttentionChunkRefusal, ForwardRefusesChunksAndWritesNothing) {
  const std::uint64_t seed = run_seed();
  for (const Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat8E4M3}) {
    // The inputs' bytes are random either way (FP8 codes from bf16 normals' bytes).
    const std::size_t element_bytes = dtype == Dtype::kFloat8E4M3 ? 1 : 2;
    DeviceBuffer q(kQElements * element_bytes), k(kKvElements * element_bytes), v(kKvElements * element_bytes);
    fill_normal(q.data(), Dtype::kBFloat16, kQElements * element_bytes / 2, seed);
    fill_normal(k.data(), Dtype::kBFloat16, kKvElements * element_bytes / 2, seed + 1);
    fill_normal(v.data(), Dtype::kBFloat16, kKvElements * element_bytes / 2, seed + 2);
    DeviceBuffer out(kQElements * 2), lse(kLseElements * 4);
    poison_nan(out.data(), Dtype::kBFloat16, kQElements);
    poison_nan(lse.data(), Dtype::kFloat32, kLseElements);
    FwdArgs args = dense_cuda_args(kShape, dtype, Dtype::kBFloat16, q.data(), k.data(), v.data(), out.data(),
                                   lse.data());
    args.causal = true;
    args.attention_chunk = 16;
    const Status status = forward(args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(refusal_problems(status, out.data(), Dtype::kBFloat16, kQElements), "") << dtype_name(dtype);
    EXPECT_EQ(count_unpoisoned(lse.data(), Dtype::kFloat32, kLseElements), 0) << dtype_name(dtype);
  }
}

TEST_F(AttentionChunkRefusal, BackwardRefusesChunksAndWritesNothing) {
  const std::uint64_t seed = run_seed();
  DeviceBuffer q(kQElements * 2), k(kKvElements * 2), v(kKvElements * 2), out(kQElements * 2), dout(kQElements * 2),
      lse(kLseElements * 4), dq(kQElements * 2), dk(kKvElements * 2), dv(kKvElements * 2);
  fill_normal(q.data(), Dtype::kBFloat16, kQElements, seed);
  fill_normal(k.data(), Dtype::kBFloat16, kKvElements, seed + 1);
  fill_normal(v.data(), Dtype::kBFloat16, kKvElements, seed + 2);
  fill_normal(out.data(), Dtype::kBFloat16, kQElements, seed + 3);
  fill_normal(dout.data(), Dtype::kBFloat16, kQElements, seed + 4);
  fill_normal(lse.data(), Dtype::kFloat32, kLseElements, seed + 5);
  poison_nan(dq.data(), Dtype::kBFloat16, kQElements);
  poison_nan(dk.data(), Dtype::kBFloat16, kKvElements);
  poison_nan(dv.data(), Dtype::kBFloat16, kKvElements);
  const FwdArgs shapes = dense_cuda_args(kShape, Dtype::kBFloat16, Dtype::kBFloat16, q.data(), k.data(), v.data(),
                                         out.data(), lse.data());
  BwdArgs args;
  args.q = shapes.q, args.k = shapes.k, args.v = shapes.v, args.out = shapes.out, args.lse = *shapes.lse;
  const auto like = [](Tensor t, void* data) {
    t.data = data;
    return t;
  };
  args.dout = like(shapes.q, dout.data());
  args.dq = like(shapes.q, dq.data());
  args.dk = like(shapes.k, dk.data());
  args.dv = like(shapes.k, dv.data());
  args.causal = true;
  args.attention_chunk = 16;
  const Status status = backward(args);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(refusal_problems(status, dq.data(), Dtype::kBFloat16, kQElements), "");
  EXPECT_EQ(count_unpoisoned(dk.data(), Dtype::kBFloat16, kKvElements), 0);
  EXPECT_EQ(count_unpoisoned(dv.data(), Dtype::kBFloat16, kKvElements), 0);
}

}  // namespace
}  // namespace hopattn::test
