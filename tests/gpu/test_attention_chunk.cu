// Chunked attention (FwdArgs / BwdArgs::attention_chunk) on the sm_90a kernels against the float32
// GPU references: the 16-bit forward (dense, packed GQA, variable lengths, paged caches, decoding
// steps) and the backward (dense, variable lengths; the deterministic kernels refuse chunks:
// test_backward.cu). Chunks smaller than a K block and
// larger, chunk edges inside tiles, alone and with causal masks and windows, and diagonals before
// key 0 (seqlen_q > seqlen_k: those rows see no key). The FP8 forward's chunk cases are in
// test_fp8_forward.cu and test_fp8_forward_varlen.cu (its oracle, fp8_oracle.cuh); the random sweeps
// draw chunks too.
#include <string>
#include <vector>

#include "gpu/backward_case.cuh"
#include "gpu/backward_varlen_case.cuh"
#include "gpu/forward_case.cuh"
#include "gpu/gpu_test_util.cuh"
#include "gpu/paged_case.cuh"
#include "gpu/varlen_case.cuh"

namespace hopattn::test {
namespace {

constexpr Dtype kBf16 = Dtype::kBFloat16, kFp16 = Dtype::kFloat16;

struct Mask {
  bool causal;
  int left, right, chunk;
};

// Masks every length list below runs under: chunks alone, under causal, under windows.
const Mask kMasks[] = {
    {false, -1, -1, 64},  {true, -1, -1, 100}, {true, -1, -1, 1},  {false, 30, 10, 7},
    {true, 200, -1, 128}, {false, -1, -1, 333}, {true, -1, -1, 1000},
};

template <class Case>
void set(Case& c, const Mask& m) {
  c.causal = m.causal, c.window_left = m.left, c.window_right = m.right, c.attention_chunk = m.chunk;
}

class AttentionChunk : public HopperTest {};

TEST_F(AttentionChunk, DenseForwardMatchesReference) {
  const std::uint64_t seed = run_seed();
  struct Shape {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    Dtype dtype;
  };
  const Shape shapes[] = {
      {2, 4, 2, 300, 300, 128, kBf16}, {1, 2, 1, 257, 1000, 64, kFp16}, {1, 3, 1, 700, 300, 256, kBf16},
      {2, 2, 2, 513, 129, 96, kBf16},  {1, 8, 1, 3, 2000, 128, kBf16},  {1, 2, 2, 2048, 2048, 64, kBf16},
  };
  int index = 0;
  for (const Shape& s : shapes)
    for (const Mask& m : kMasks) {
      ForwardCase c;
      c.batch = s.batch, c.heads_q = s.heads_q, c.heads_kv = s.heads_kv, c.seqlen_q = s.seqlen_q;
      c.seqlen_k = s.seqlen_k, c.head_dim = s.head_dim, c.dtype = s.dtype;
      set(c, m);
      for (const auto pack : {KernelOptions::PackGqa::kAuto, KernelOptions::PackGqa::kOn}) {
        KernelOptions options;
        options.pack_gqa = pack;
        const CaseResult r = run_forward_case(c, options, splitmix64(seed + index++));
        if (r.kind == CaseResult::kUnsupported && pack == KernelOptions::PackGqa::kOn) continue;  // d 256
        EXPECT_EQ(r.kind, CaseResult::kPassed) << c.describe() << " pack_gqa " << int(pack) << "\n  " << r.detail;
      }
    }
}

TEST_F(AttentionChunk, VariableLengthForwardMatchesReference) {
  const std::uint64_t seed = run_seed();
  int index = 0;
  for (const Mask& m : kMasks)
    for (int d : {64, 128}) {
      VarlenCase c = varlen_case_of<VarlenCase>({37, 300, 1, 1000, 129}, {101, 300, 700, 999, 64}, 4, 2, d, kBf16);
      set(c, m);
      std::string why = run_varlen_case(c, splitmix64(seed + index++));
      EXPECT_TRUE(why.empty()) << c.describe() << "\n" << why;
      // Decoding steps from seqused_k (the transposed-tile and split kernels).
      VarlenCase decode = varlen_case_of<VarlenCase>({1, 4, 1}, {2000, 3000, 517}, 8, 2, d, kFp16);
      decode.varlen_k = false, decode.len_k = {3000, 3000, 3000}, decode.seqused_k = {{2000, 2999, 517}};
      decode.varlen_q = false, decode.len_q = {4, 4, 4};
      set(decode, m);
      why = run_varlen_case(decode, splitmix64(seed + index++));
      EXPECT_TRUE(why.empty()) << decode.describe() << "\n" << why;
    }
}

TEST_F(AttentionChunk, PagedForwardMatchesReference) {
  const std::uint64_t seed = run_seed();
  int index = 0;
  for (const Mask& m : kMasks) {
    PagedCase c;
    c.len_q = {1, 1, 1, 1}, c.len_k = {1500, 77, 2048, 640};
    c.heads_q = 8, c.heads_kv = 2, c.head_dim = 128, c.page_size = 64;
    set(c, m);
    std::string why = run_paged_case(c, splitmix64(seed + index++));
    EXPECT_TRUE(why.empty()) << c.describe() << "\n" << why;
    c.len_q = {300, 300, 300, 300}, c.len_k = {900, 300, 1200, 333}, c.page_size = 256;
    why = run_paged_case(c, splitmix64(seed + index++));
    EXPECT_TRUE(why.empty()) << c.describe() << "\n" << why;
    // The row-page copies: pages of 1 key, and d 64's pages of 16 in a launch that is not a decoding step.
    c.head_dim = 64;
    for (const int page_size : {1, 16}) {
      c.page_size = page_size;
      why = run_paged_case(c, splitmix64(seed + index++));
      EXPECT_TRUE(why.empty()) << c.describe() << "\n" << why;
    }
  }
}

TEST_F(AttentionChunk, DenseBackwardMatchesReference) {
  const std::uint64_t seed = run_seed();
  int index = 0;
  for (const int d : {64, 128, 192, 256})
    for (const Mask& m : kMasks) {
      BackwardCase c;
      c.dtype = d == 128 ? kFp16 : kBf16, c.batch = 2, c.heads_q = 4, c.heads_kv = 2;
      c.seqlen_q = d == 64 ? 700 : 333, c.seqlen_k = d == 64 ? 300 : 517, c.head_dim = d;
      set(c, m);
      const std::string why = run_backward_case(c, splitmix64(seed + index++));
      EXPECT_TRUE(why.empty()) << c.describe() << "\n" << why;
    }
}

TEST_F(AttentionChunk, VariableLengthBackwardMatchesReference) {
  const std::uint64_t seed = run_seed();
  int index = 0;
  for (const Mask& m : kMasks)
    for (const int d : {64, 128}) {
      VarlenBackwardCase c =
          varlen_case_of<VarlenBackwardCase>({37, 300, 1, 700}, {101, 300, 500, 333}, 4, 1, d, kBf16);
      set(c, m);
      const std::string why = run_varlen_backward_case(c, splitmix64(seed + index++));
      EXPECT_TRUE(why.empty()) << c.describe() << "\n" << why;
    }
}

}  // namespace
}  // namespace hopattn::test
