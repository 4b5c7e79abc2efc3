// Head dims other than the kernels' tile widths (kPaddedHeadDims, gpu_test_util.cuh): the 16-bit
// forward and the backward run any multiple of 8 up to 256 in the next wider kernel; the
// TMA loads zero-fill the columns past d and the stores (TMA and register) leave them out. The random
// sweeps draw such dims a quarter of the time; here every one of them runs, every time: dense forward
// cases (causal or not, odd lengths, one query row, GQA, LSE, contiguous rows and rows followed by
// poisoned padding, where a store past d shows), a variable-length batch, a paged cache and decoding
// steps (GQA packed, split), the backward dense and variable-length, and the refusals of what has no
// kernel: 16-bit dims that are no multiple of 8 or above 256, FP8 dims that are no multiple of 16 or
// above 256 (the backward's refusal of d 264: test_backward_varlen.cu, BackwardVarlenRefusals; FP8's
// padded dims: test_fp8_head_dims.cu).
#include <cmath>
#include <cstdint>
#include <iterator>
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

// Which of the list d is: the cases alternate dtypes and page sizes along it.
int index_of_dim(int d) {
  for (int i = 0; i < static_cast<int>(std::size(kPaddedHeadDims)); ++i)
    if (kPaddedHeadDims[i] == d) return i;
  return 0;
}

std::string dim_name(const ::testing::TestParamInfo<int>& info) { return "d" + std::to_string(info.param); }

// A dense forward (ForwardCase, Layout) or backward (BackwardCase, BackwardLayout) case.
template <class Case, class CaseLayout>
Case dense_case(int d, int b, int hq, int hkv, int sq, int sk, Dtype dtype, bool causal, CaseLayout layout) {
  Case c;
  c.batch = b, c.heads_q = hq, c.heads_kv = hkv, c.seqlen_q = sq, c.seqlen_k = sk, c.head_dim = d;
  c.dtype = dtype, c.causal = causal, c.layout = layout;
  return c;
}

ForwardCase dense(int d, int b, int hq, int hkv, int sq, int sk, Dtype dtype, bool causal, Layout layout) {
  return dense_case<ForwardCase>(d, b, hq, hkv, sq, sk, dtype, causal, layout);
}

class PaddedHeadDimForward : public HopperTest, public ::testing::WithParamInterface<int> {};

// Each case with the default kernel and with every speed switch off (the ablation stores its own way).
TEST_P(PaddedHeadDimForward, DenseCasesMatchReference) {
  const int d = GetParam();
  const std::uint64_t seed = run_seed();
  const ForwardCase cases[] = {
      dense(d, 2, 4, 2, 77, 300, Dtype::kBFloat16, true, Layout::kContiguous),
      dense(d, 1, 8, 2, 77, 300, Dtype::kFloat16, false, Layout::kPaddedRows),
      dense(d, 3, 8, 2, 1, 129, Dtype::kBFloat16, false, Layout::kPaddedRows),  // one query row
      dense(d, 1, 4, 2, 300, 77, Dtype::kFloat16, true, Layout::kContiguous),   // rows that see no key
  };
  int index = 0;
  for (const ForwardCase& c : cases) {
    for (const KernelOptions& options : {KernelOptions{}, KernelOptions{false, false, false, false}}) {
      const CaseResult r = run_forward_case(c, options, splitmix64(seed + index++));
      EXPECT_EQ(r.kind, CaseResult::kPassed) << c.describe() << (options.warp_specialized ? "" : " switches off")
                                             << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << r.detail;
    }
  }
}

// Sequences around the tile edges, one without queries, one without keys, keys past seqused_k and
// rows after the last sequence full of NaN (as memory nobody wrote may be), padded rows.
TEST_P(PaddedHeadDimForward, VarlenBatchMatchesReference) {
  const int d = GetParam();
  const std::uint64_t seed = run_seed();
  VarlenCase c = varlen({1, 127, 129, 0, 300}, {300, 1, 129, 65, 77}, 4, 2, d,
                        index_of_dim(d) % 2 == 0 ? Dtype::kBFloat16 : Dtype::kFloat16);
  c.seqused_k = {{257, 1, 129, 0, 70}};
  c.trailing_k_rows = 50;
  c.unused_row_value = NAN;
  c.causal = true, c.padded_rows = true;
  const std::string problems = run_varlen_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

// Varlen q (decode and prefill rows) over shuffled pages with NaN in every pool row that is no key.
TEST_P(PaddedHeadDimForward, PagedCacheMatchesReference) {
  const int d = GetParam();
  const std::uint64_t seed = run_seed();
  constexpr int kPageSizes[] = {16, 64, 256};
  const int i = index_of_dim(d);
  PagedCase c = paged({1, 77, 0, 129}, {300, 1000, 17, 0}, kPageSizes[i % 3], 4, 2, d,
                      i % 2 == 0 ? Dtype::kFloat16 : Dtype::kBFloat16);
  c.varlen_q = true, c.causal = true, c.padded_rows = true, c.padded_table = true;
  c.non_key_value = NAN;
  const std::string problems = run_paged_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

// One query row per sequence against caches of unequal lengths, GQA 28/4 (7 rows per K/V head, which
// do not divide a tile), packed where the kernel packs (up to 128), split by the heuristic and in 5.
TEST_P(PaddedHeadDimForward, DecodeStepMatchesReference) {
  const int d = GetParam();
  const std::uint64_t seed = run_seed();
  int index = 0;
  for (const int num_splits : {0, 5}) {
    VarlenCase c = varlen({1, 1, 1, 1}, {3000, 1, 700, 129}, 28, 4, d,
                          (index_of_dim(d) + num_splits) % 2 == 0 ? Dtype::kBFloat16 : Dtype::kFloat16);
    c.causal = true, c.num_splits = num_splits, c.padded_rows = num_splits != 0;
    c.pack_gqa = d <= 128 ? KernelOptions::PackGqa::kOn : KernelOptions::PackGqa::kAuto;
    const std::string problems = run_varlen_case(c, splitmix64(seed + index++));
    EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
  }
}

INSTANTIATE_TEST_SUITE_P(Padded, PaddedHeadDimForward, ::testing::ValuesIn(kPaddedHeadDims), dim_name);

class PaddedHeadDimBackward : public HopperTest, public ::testing::WithParamInterface<int> {};

BackwardCase backward_case(int d, int b, int hq, int hkv, int sq, int sk, Dtype dtype, bool causal,
                           BackwardLayout layout) {
  return dense_case<BackwardCase>(d, b, hq, hkv, sq, sk, dtype, causal, layout);
}

// Contiguous, padded heads (gradients followed by poisoned padding) and a packed dqkv.
TEST_P(PaddedHeadDimBackward, DenseGradientsMatchReference) {
  const int d = GetParam();
  const std::uint64_t seed = run_seed();
  BackwardCase windowed = backward_case(d, 1, 4, 1, 100, 65, Dtype::kBFloat16, false, BackwardLayout::kPaddedHeads);
  windowed.window_left = 16, windowed.window_right = 4;
  const BackwardCase cases[] = {
      backward_case(d, 2, 4, 2, 77, 300, Dtype::kBFloat16, true, BackwardLayout::kContiguous),
      backward_case(d, 1, 2, 1, 129, 129, Dtype::kFloat16, false, BackwardLayout::kPacked),
      windowed,
  };
  int index = 0;
  for (const BackwardCase& c : cases) {
    const std::string problems = run_backward_case(c, splitmix64(seed + index++));
    EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
  }
}

// Sequences around the 64- and 128-row blocks, empty on either side, keys past seqused_k, padded rows.
TEST_P(PaddedHeadDimBackward, VarlenGradientsMatchReference) {
  const int d = GetParam();
  const std::uint64_t seed = run_seed();
  VarlenBackwardCase c;
  c.len_q = {1, 127, 0, 300, 65};
  c.len_k = {129, 300, 65, 77, 0};
  c.seqused_k = {{129, 200, 65, 77, 0}};
  c.heads_q = 4, c.heads_kv = 2, c.head_dim = d;
  c.dtype = index_of_dim(d) % 2 == 0 ? Dtype::kFloat16 : Dtype::kBFloat16;
  c.causal = true, c.padded_rows = true;
  const std::string problems = run_varlen_backward_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Padded, PaddedHeadDimBackward,
                         ::testing::ValuesIn(kPaddedHeadDims), dim_name);

class HeadDimRefusals : public HopperTest {};

// Head dims with no kernel to run them are refused with kUnsupported, naming head_dim and the rule,
// before anything is written: 16-bit ones that are no multiple of 8 or wider than 256, FP8 ones that
// are no multiple of 16 or wider than 256.
TEST_F(HeadDimRefusals, ForwardHeadDimsWithoutAKernelAreUnsupported) {
  struct Refused {
    int head_dim;
    Dtype dtype;
    const char* rule;
  };
  const Refused refused[] = {{100, Dtype::kBFloat16, "a multiple of 8 from 8 to 256"},
                             {264, Dtype::kBFloat16, "a multiple of 8 from 8 to 256"},
                             {4, Dtype::kFloat16, "a multiple of 8 from 8 to 256"},
                             {72, Dtype::kFloat8E4M3, "a multiple of 16 from 16 to 256"},
                             {264, Dtype::kFloat8E4M3, "a multiple of 16 from 16 to 256"}};
  for (const Refused& r : refused) {
    const DenseExtents e{1, 4, 2, 77, 300, r.head_dim};
    const bool fp8 = r.dtype == Dtype::kFloat8E4M3;
    const Dtype out_dtype = fp8 ? Dtype::kBFloat16 : r.dtype;
    const std::int64_t nq = std::int64_t(e.seqlen_q) * e.heads_q * e.head_dim;
    const std::int64_t nkv = std::int64_t(e.seqlen_k) * e.heads_kv * e.head_dim;
    const std::int64_t nlse = std::int64_t(e.heads_q) * e.seqlen_q;
    const std::size_t in_size = dtype_size(r.dtype);
    DeviceBuffer q(nq * in_size), k(nkv * in_size), v(nkv * in_size);
    DeviceBuffer out(nq * dtype_size(out_dtype)), lse(nlse * sizeof(float));
    for (const DeviceBuffer* t : {&q, &k, &v}) {
      // Valid inputs, should a kernel read them: 0x38 is 1.0 in e4m3.
      if (fp8) HOPATTN_CUDA_CHECK(cudaMemset(t->data(), 0x38, t->bytes()));
      else fill_normal(t->data(), r.dtype, t->bytes() / in_size, 1);
    }
    poison_nan(out.data(), out_dtype, nq);
    poison_nan(lse.data(), Dtype::kFloat32, nlse);
    const FwdArgs args = dense_cuda_args(e, r.dtype, out_dtype, q.data(), k.data(), v.data(), out.data(), lse.data());
    const Status status = forward(args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    const std::string what = std::string(dtype_name(r.dtype)) + " d " + std::to_string(r.head_dim);
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << what << ": " << status.message();
    EXPECT_NE(status.message().find("head_dim " + std::to_string(r.head_dim)), std::string::npos)
        << what << ": " << status.message();
    EXPECT_NE(status.message().find(r.rule), std::string::npos) << what << ": " << status.message();
    EXPECT_EQ(count_unpoisoned(out.data(), out_dtype, nq), 0) << what << ": out written";
    EXPECT_EQ(count_unpoisoned(lse.data(), Dtype::kFloat32, nlse), 0) << what << ": lse written";
  }
}

}  // namespace
}  // namespace hopattn::test
