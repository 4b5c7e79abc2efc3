// FP8 forward combinations the kernels do not take (keys-contiguous v with variable lengths, chunks or
// seqused_q where no kernel takes them, unsupported descale block granularities, pages TMA cannot load):
// refused with kUnsupported and a message naming the argument, not miscomputed.
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/fp8_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

// Keys-contiguous v (V^T in memory) is a dense-only layout: with cu_seqlens_q the kernel refuses it,
// naming what it takes, before anything is written.
TEST_F(Fp8Forward, KeysContiguousVWithVariableLengthsIsUnsupported) {
  const int batch = 2, sq = 70, sk = 100, h = 2, d = 128;
  DeviceBuffer q = random_e4m3(std::int64_t(batch) * sq * h * d, run_seed(), 1.0f);
  DeviceBuffer k = random_e4m3(std::int64_t(batch) * sk * h * d, run_seed() + 1, 1.0f);
  DeviceBuffer vt = keys_contiguous_copy(k, batch, sk, h, d, sk + 12);
  DeviceBuffer out(std::int64_t(batch) * sq * h * d * 2);
  poison_nan(out.data(), Dtype::kBFloat16, std::int64_t(batch) * sq * h * d);
  const DeviceBuffer cu_q = upload(std::vector<int>{0, sq, 2 * sq});
  FwdArgs args;
  args.q = make_tensor(q.data(), Dtype::kFloat8E4M3, {batch * sq, h, d}, DeviceType::kCuda);
  args.k = make_tensor(k.data(), Dtype::kFloat8E4M3, {batch, sk, h, d}, DeviceType::kCuda);
  const std::int64_t strides[4] = {std::int64_t(h) * d * (sk + 12), 1, std::int64_t(d) * (sk + 12), sk + 12};
  args.v = strided_tensor(vt.data(), Dtype::kFloat8E4M3, {batch, sk, h, d}, strides);
  args.out = make_tensor(out.data(), Dtype::kBFloat16, {batch * sq, h, d}, DeviceType::kCuda);
  args.cu_seqlens_q = make_tensor(cu_q.data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
  args.max_seqlen_q = sq;
  const Status status = forward(args);
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.message();
  EXPECT_NE(status.message().find("keys-contiguous"), std::string::npos) << status.message();
  EXPECT_EQ(count_unpoisoned(out.data(), Dtype::kBFloat16, std::int64_t(batch) * sq * h * d), 0) << "out written";
}

// Chunks and seqused_q run in kernels of their own (launch_forward_fp8_chunks_seqused_q), which take v in
// the ordinary layout, and in the 192- and 256-wide kernels (a q or v head dim above 128) dense batches
// only (the d 256 variable-length kernel spilled with chunks and seqused_q): refused, naming the
// argument and what takes it.
TEST_F(Fp8Forward, ChunksOrSequsedQWithKeysContiguousVOrD256VariableLengthsAreRefused) {
  for (int d : {64, 256}) {
    Fp8Case dense;  // lengths past the chunk: a chunk that masks nothing is turned off before the kernels
    dense.head_dim = d, dense.seqlen_q = 100, dense.seqlen_k = 200, dense.attention_chunk = 64;
    dense.v_keys_contiguous = true;
    const std::string why = run_fp8_case(dense, run_seed());
    EXPECT_NE(why.find("attention_chunk"), std::string::npos) << why;
    EXPECT_NE(why.find("head dim contiguous"), std::string::npos) << why;
  }
  Fp8VarlenCase varlen;
  varlen.head_dim = 256, varlen.lens_q = {70, 30}, varlen.lens_k = {100, 50}, varlen.attention_chunk = 64;
  std::string why = run_fp8_varlen_case(varlen, run_seed());
  EXPECT_NE(why.find("attention_chunk"), std::string::npos) << why;
  EXPECT_NE(why.find("dense batches"), std::string::npos) << why;
  varlen.attention_chunk = 0, varlen.used_q = {50, 30};
  why = run_fp8_varlen_case(varlen, run_seed());
  EXPECT_NE(why.find("seqused_q"), std::string::npos) << why;
  EXPECT_NE(why.find("up to 128 both on any"), std::string::npos) << why;
  varlen.head_dim = 128, varlen.head_dim_v = 192;  // v's head dim takes the 256-wide kernel too
  why = run_fp8_varlen_case(varlen, run_seed());
  EXPECT_NE(why.find("seqused_q"), std::string::npos) << why;
  EXPECT_NE(why.find("head dims above 128"), std::string::npos) << why;
}

// Pages TMA cannot load (1-8 keys, or no power of two) are copied row by row, in the 16-bit kernels only;
// the FP8 kernels load pages by TMA (powers of two from 16): refused, naming page_size and FP8.
TEST_F(Fp8Forward, PagesTmaCannotLoadAreRefused) {
  for (const int page_size : {1, 8, 24}) {
    Fp8VarlenCase c;
    c.head_dim = 128, c.heads_q = 8, c.heads_kv = 2, c.page_size = page_size;
    c.lens_q = {1, 3}, c.lens_k = {40, 40}, c.used_k = {40, 17};
    const std::string why = run_fp8_varlen_case(c, run_seed());
    EXPECT_NE(why.find("page_size " + std::to_string(page_size)), std::string::npos) << why;
    EXPECT_NE(why.find("FP8"), std::string::npos) << why;
  }
}

TEST_F(Fp8Forward, UnsupportedBlockGranularityIsRefusedNotMiscomputed) {
  Fp8Case c;
  c.block_scales = true, c.rows_q = 32;  // the kernel needs multiples of 64
  std::string why = run_fp8_case(c, run_seed());
  EXPECT_NE(why.find("not supported"), std::string::npos) << why;
  // k/v rows: at head dim 128 multiples of 64 (the 192-key kernel's descale groups), not of 32.
  c.head_dim = 128, c.rows_q = 64, c.rows_kv = 32;
  why = run_fp8_case(c, run_seed());
  EXPECT_NE(why.find("not supported"), std::string::npos) << why;
}

}  // namespace
}  // namespace hopattn::test
