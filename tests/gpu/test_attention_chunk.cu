// attention_chunk on CUDA tensors: the sm_90a forward kernels refuse it (kUnsupported naming
// attention_chunk) until their chunk masks have run on a GPU (branch wip/attention-chunk-kernels), and
// write nothing. attention_chunk 0 is off and runs as before (every other GPU test). The backward's
// refusal is checked beside its others (BackwardRefusals, test_backward.cu).
#include <string>

#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

class AttentionChunkRefusal : public HopperTest {};

constexpr DenseExtents kShape{1, 2, 2, 70, 130, 64};
constexpr std::int64_t kQElements = 1LL * 70 * 2 * 64, kKvElements = 1LL * 130 * 2 * 64, kLseElements = 2 * 70;

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
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << dtype_name(dtype) << ": " << status.message();
    EXPECT_NE(status.message().find("attention_chunk"), std::string::npos) << status.message();
    EXPECT_EQ(count_unpoisoned(out.data(), Dtype::kBFloat16, kQElements), 0) << dtype_name(dtype);
    EXPECT_EQ(count_unpoisoned(lse.data(), Dtype::kFloat32, kLseElements), 0) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace hopattn::test
