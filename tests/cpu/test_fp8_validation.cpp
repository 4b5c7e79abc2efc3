// Every quantize_fp8 argument error: kInvalidArgument, and a message that names the argument.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "cpu/test_fp8_util.hpp"

namespace {

using fp8_test::QuantCase;
using hopattn::Dtype;
using hopattn::QuantGranularity;
using hopattn::QuantizeArgs;
using hopattn::StatusCode;

QuantCase valid_case(QuantGranularity g = QuantGranularity::kPerBlock, bool hadamard = true, int d = 64) {
  static std::mt19937_64 rng{std::random_device{}()};
  return fp8_test::make_case({2, 5, 7, 4, 2, d}, Dtype::kBFloat16, g, hadamard, rng, 2, 3);
}

struct Broken {
  const char* what;
  std::function<void(QuantCase&)> breaks;
  const char* names;  // expected in the message
};

TEST(Fp8Validation, ValidCaseIsAccepted) {
  for (QuantGranularity g : {QuantGranularity::kPerTensor, QuantGranularity::kPerHead, QuantGranularity::kPerBlock}) {
    QuantCase c = valid_case(g);
    const hopattn::Status s = hopattn::quantize_fp8(c.args);
    EXPECT_TRUE(s.ok()) << s.message();
  }
}

TEST(Fp8Validation, EveryErrorNamesItsArgument) {
  const Broken cases[] = {
      {"q null", [](QuantCase& c) { c.args.q.data = nullptr; }, "q has no data"},
      {"q float32", [](QuantCase& c) { c.args.q.dtype = Dtype::kFloat32; }, "q must be bfloat16 or float16"},
      {"k fp8", [](QuantCase& c) { c.args.k.dtype = Dtype::kFloat8E4M3; }, "k must be bfloat16 or float16"},
      {"v rank", [](QuantCase& c) { c.args.v.rank = 3; }, "v must have rank 4"},
      {"q zero extent", [](QuantCase& c) { c.args.q.shape[1] = 0; }, "q has extent 0"},
      {"k dtype differs", [](QuantCase& c) { c.args.k.dtype = Dtype::kFloat16; }, "k must have q's dtype"},
      {"v dtype differs", [](QuantCase& c) { c.args.v.dtype = Dtype::kFloat16; }, "v must have q's dtype"},
      {"k batch", [](QuantCase& c) { c.args.k.shape[0] = 3; }, "k must have shape"},
      {"k head dim", [](QuantCase& c) { c.args.k.shape[3] = 32; }, "k must have shape"},
      {"v seqlen", [](QuantCase& c) { c.args.v.shape[1] = 6; }, "v must have shape"},
      {"q last stride", [](QuantCase& c) { c.args.q.stride[3] = 2; }, "q must be contiguous in its last dimension"},
      {"k negative stride", [](QuantCase& c) { c.args.k.stride[1] = -1; }, "k has a negative stride"},
      {"k on another device", [](QuantCase& c) { c.args.k.device = hopattn::DeviceType::kCuda; }, "k is on cuda:0"},
      {"q8 dtype", [](QuantCase& c) { c.args.q8.dtype = Dtype::kBFloat16; }, "q8 must be float8_e4m3"},
      {"k8 shape", [](QuantCase& c) { c.args.k8.shape[2] = 4; }, "k8 must have shape"},
      {"v8 null", [](QuantCase& c) { c.args.v8.data = nullptr; }, "v8 has no data"},
      {"v8 last stride", [](QuantCase& c) { c.args.v8.stride[3] = 0; }, "v8: neither its last dimension"},
      {"q8 device", [](QuantCase& c) { c.args.q8.device_index = 1; }, "q8 is on host"},
      {"q_descale dtype", [](QuantCase& c) { c.args.q_descale.dtype = Dtype::kFloat16; }, "q_descale must be float32"},
      {"k_descale blocks", [](QuantCase& c) { c.args.k_descale.shape[2] = 2; }, "k_descale must have shape"},
      {"v_descale rank", [](QuantCase& c) { c.args.v_descale.rank = 2; }, "v_descale must have rank 3"},
      {"v_descale null", [](QuantCase& c) { c.args.v_descale.data = nullptr; }, "v_descale has no data"},
      {"block_rows_q", [](QuantCase& c) { c.args.block_rows_q = 0; }, "block_rows_q must be >= 1"},
      {"block_rows_kv", [](QuantCase& c) { c.args.block_rows_kv = -4; }, "block_rows_kv must be >= 1"},
      {"granularity", [](QuantCase& c) { c.args.granularity = static_cast<QuantGranularity>(7); }, "granularity 7"},
  };
  for (const Broken& b : cases) {
    QuantCase c = valid_case();
    b.breaks(c);
    const hopattn::Status s = hopattn::quantize_fp8(c.args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.what << ": " << s.message();
    EXPECT_NE(s.message().find(b.names), std::string::npos) << b.what << ": " << s.message();
    for (int t = 0; t < 3; ++t) {  // nothing written on error
      for (std::uint8_t code : c.codes[t]) ASSERT_EQ(code, fp8_test::kPoisonCode) << b.what;
    }
  }
}

TEST(Fp8Validation, DescaleShapeFollowsGranularity) {
  QuantCase per_head = valid_case(QuantGranularity::kPerHead);
  per_head.args.q_descale.shape[1] = 2;  // heads_q is 4
  hopattn::Status s = hopattn::quantize_fp8(per_head.args);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("q_descale must have shape (batch, heads) for kPerHead = (2, 4)"), std::string::npos)
      << s.message();

  QuantCase per_tensor = valid_case(QuantGranularity::kPerTensor);
  per_tensor.args.k_descale.shape[0] = 2;
  s = hopattn::quantize_fp8(per_tensor.args);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("k_descale must have shape (1)"), std::string::npos) << s.message();
}

// The transform runs over blocks of the largest power of two dividing d: d a multiple of 16 up to 256.
TEST(Fp8Validation, HadamardNeedsAMultipleOf16UpTo256) {
  for (int d : {16, 96, 192, 240}) {
    QuantCase c = valid_case(QuantGranularity::kPerBlock, true, d);
    const hopattn::Status s = hopattn::quantize_fp8(c.args);
    EXPECT_TRUE(s.ok()) << d << ": " << s.message();
  }
  for (int d : {8, 40, 100, 272, 512}) {
    QuantCase c = valid_case(QuantGranularity::kPerBlock, true, d);
    const hopattn::Status s = hopattn::quantize_fp8(c.args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << d;
    EXPECT_NE(s.message().find("hadamard (incoherent processing) needs head dim d a multiple of 16 from 16 to 256"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("got d = " + std::to_string(d)), std::string::npos) << s.message();
    c.args.hadamard = false;  // without the transform any d works
    EXPECT_TRUE(hopattn::quantize_fp8(c.args).ok()) << d;
  }
}

TEST(Fp8Validation, CudaTensorsWithoutHopperAnswerWithoutTouchingMemory) {
  if (hopattn::hopper_available()) GTEST_SKIP() << "a Hopper GPU is present; tests/gpu covers CUDA tensors";
  QuantCase c = valid_case();
  for (int t = 0; t < 3; ++t) {
    c.input(t).device = c.output(t).device = c.descale(t).device = hopattn::DeviceType::kCuda;
  }
  const hopattn::Status s = hopattn::quantize_fp8(c.args);
  EXPECT_TRUE(s.code() == StatusCode::kNoDevice || s.code() == StatusCode::kUnsupported) << s.message();
  EXPECT_FALSE(s.message().empty());
}

}  // namespace
