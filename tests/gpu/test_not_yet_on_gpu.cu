// Features that the CPU reference backend has and the sm_90a forward kernels refuse (kUnsupported
// naming the argument) until their kernel code has run on a GPU, writing nothing: attention_chunk
// (branch wip/attention-chunk-kernels). Left at its default (chunk 0) it runs as before (every other
// GPU test). The backward's refusals
// are checked beside its others (BackwardRefusals, test_backward.cu).
#include <functional>
#include <string>

#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

class NotYetOnGpu : public HopperTest {};

constexpr DenseExtents kShape{1, 2, 2, 70, 130, 64};
constexpr std::int64_t kQElements = 1LL * 70 * 2 * 64, kKvElements = 1LL * 130 * 2 * 64, kLseElements = 2 * 70;

struct Refusal {
  const char* argument;                  // what the message must name
  std::function<void(FwdArgs&)> set_it;  // turns the feature on
};

TEST_F(NotYetOnGpu, ForwardRefusesAndWritesNothing) {
  const std::uint64_t seed = run_seed();
  const Refusal refusals[] = {
      {"attention_chunk", [](FwdArgs& a) { a.attention_chunk = 16; }},
  };
  for (const Refusal& refusal : refusals) {
    for (const Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat8E4M3}) {
      SCOPED_TRACE(std::string(refusal.argument) + ", " + dtype_name(dtype));
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
      refusal.set_it(args);
      const Status status = forward(args);
      HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.message();
      EXPECT_NE(status.message().find(refusal.argument), std::string::npos) << status.message();
      EXPECT_EQ(count_unpoisoned(out.data(), Dtype::kBFloat16, kQElements), 0);
      EXPECT_EQ(count_unpoisoned(lse.data(), Dtype::kFloat32, kLseElements), 0);
    }
  }
}

}  // namespace
}  // namespace hopattn::test
