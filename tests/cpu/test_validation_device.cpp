// A valid call on CUDA tensors passes validation; without a usable Hopper GPU dispatch refuses it
// with a status that says why, and writes nothing.
#include <cuda_runtime_api.h>

#include <cmath>

#include "test_validation_fixture.hpp"

namespace hopattn::test {
namespace {

TEST(ValidationDevice, CudaTensorsWithoutHopperAreRefused) {
  if (hopper_available()) GTEST_SKIP() << "a Hopper GPU is present; CUDA tensors would run for real";
  DenseCall call(128);
  call.to_cuda();
  ASSERT_TRUE(call.validate().ok()) << call.validate().message();
  const Status s = forward(call.args);
#if HOPATTN_TEST_SM90_BUILD
  int count = 0;
  const bool any_gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  if (any_gpu) {
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
    EXPECT_NE(s.message().find("compute capability 9.0"), std::string::npos) << s.message();
  } else {
    EXPECT_EQ(s.code(), StatusCode::kNoDevice) << s.message();
    EXPECT_NE(s.message().find("no CUDA device"), std::string::npos) << s.message();
  }
#else
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  EXPECT_NE(s.message().find("HOPATTN_SM90=OFF"), std::string::npos) << s.message();
#endif
  for (double x : call.out.to_double()) ASSERT_TRUE(std::isnan(x));
}

}  // namespace
}  // namespace hopattn::test
