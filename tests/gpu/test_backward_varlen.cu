// The sm_90a backward on variable-length batches: cu_seqlens_q, cu_seqlens_k and seqused_k, alone and
// combined, with dense q or k where the API allows it, each sequence judged against the float32 GPU
// reference on that sequence alone (backward_varlen_case.cuh). Lengths on both sides of the 64-row q
// blocks and 128-key blocks, empty sequences on either side, causal with more or fewer queries than
// keys per sequence, windows, softcap, GQA/MQA, both head dims and dtypes; the batch cut after each
// sequence (so a block that wrote past its sequence's rows would hit the guard, not the next sequence);
// NaN and Inf in the k and v rows no sequence uses; a random sweep; checks that the harness fails
// spoiled gradients; and the refusals.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gpu/backward_varlen_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

VarlenBackwardCase varlen(std::vector<int> len_q, std::vector<int> len_k, int heads_q, int heads_kv, int head_dim,
                          Dtype dtype) {
  return varlen_case_of<VarlenBackwardCase>(std::move(len_q), std::move(len_k), heads_q, heads_kv, head_dim, dtype);
}

// The lengths the brief of the backward's varlen tests names: the 64- and 128-row edges, 300 and 0,
// with the keys in another order than the queries.
const std::vector<int> kEdgesQ = {1, 63, 64, 65, 127, 128, 129, 300, 0};
const std::vector<int> kEdgesK = {129, 0, 300, 63, 1, 65, 128, 64, 127};

std::vector<NamedCase<VarlenBackwardCase>> corner_cases() {
  std::vector<NamedCase<VarlenBackwardCase>> cases;
  const auto add = [&](std::string name, VarlenBackwardCase c) { cases.push_back({std::move(name), std::move(c)}); };

  add("Edges_d64_bf16_gqa", varlen(kEdgesQ, kEdgesK, 8, 2, 64, kBf16));
  add("Edges_d128_fp16_mha", varlen(kEdgesQ, kEdgesK, 2, 2, 128, kFp16));
  add("Edges_d192_fp16_gqa", varlen(kEdgesQ, kEdgesK, 4, 2, 192, kFp16));
  add("Edges_d256_bf16_gqa", varlen(kEdgesQ, kEdgesK, 4, 2, 256, kBf16));
  {
    VarlenBackwardCase c = varlen(kEdgesQ, kEdgesK, 4, 1, 64, kFp16);
    c.causal = true;  // bottom-right per sequence: where len_q > len_k the first rows see no key
    add("Edges_d64_fp16_causal_mqa", c);
  }
  {
    VarlenBackwardCase c = varlen(kEdgesQ, kEdgesK, 4, 2, 128, kBf16);
    c.causal = true;
    add("Edges_d128_bf16_causal_gqa", c);
  }
  {
    VarlenBackwardCase c = varlen(kEdgesQ, kEdgesK, 4, 2, 128, kBf16);
    c.window_left = 37, c.window_right = 11;
    add("Edges_d128_bf16_window37_11", c);
  }
  {
    VarlenBackwardCase c = varlen(kEdgesQ, kEdgesK, 2, 1, 64, kFp16);
    c.window_left = 100, c.window_right = 0;
    add("Edges_d64_fp16_window100_0", c);
  }
  {
    VarlenBackwardCase c = varlen(kEdgesQ, kEdgesK, 4, 2, 64, kBf16);
    c.softcap = 30.0f, c.amplitude = 8.0f;
    add("Edges_d64_bf16_softcap30", c);
  }
  {
    VarlenBackwardCase c = varlen(kEdgesQ, kEdgesK, 8, 2, 128, kFp16);
    c.causal = true, c.softcap = 30.0f, c.amplitude = 6.0f, c.softmax_scale = 0.2f;
    add("Edges_d128_fp16_causal_softcap30_scale", c);
  }
  {
    VarlenBackwardCase c = varlen({300, 129, 7, 65}, {100, 1, 7, 64}, 8, 2, 128, kBf16);
    c.causal = true;  // the first len_q - len_k rows of each sequence see no key: dq 0
    add("CausalMoreQueriesThanKeys", c);
  }
  {
    VarlenBackwardCase c = varlen({1, 64, 129, 17}, {700, 513, 257, 130}, 4, 2, 64, kBf16);
    c.causal = true;  // keys before the diagonal band of the few queries
    add("CausalFewerQueriesThanKeys", c);
  }
  {
    VarlenBackwardCase c = varlen({200, 0, 129, 0}, {300, 77, 0, 0}, 8, 2, 128, kFp16);
    c.causal = true;  // no queries: dk = dv = 0; no keys: dq = 0
    add("EmptySequencesOnEitherSide", c);
  }
  add("SingleSequence", varlen({777}, {555}, 4, 4, 128, kBf16));
  {
    VarlenBackwardCase c = varlen({100, 128, 5, 300}, {300, 300, 300, 300}, 4, 1, 128, kBf16);
    c.varlen_k = false, c.seqused_k = {{300, 1, 0, 171}}, c.causal = true;
    add("SequsedK_VarlenQ_DenseK_causal", c);
  }
  {
    VarlenBackwardCase c = varlen({129, 129, 129}, {300, 300, 300}, 4, 2, 64, kFp16);
    c.varlen_q = false, c.varlen_k = false, c.seqused_k = {{300, 129, 0}};
    c.window_left = 37, c.window_right = 11;
    add("SequsedK_DenseQ_DenseK_window37_11", c);
  }
  {
    VarlenBackwardCase c = varlen({256, 1, 130, 64}, {400, 300, 130, 65}, 4, 2, 128, kBf16);
    c.seqused_k = {{257, 0, 130, 1}}, c.softcap = 30.0f, c.amplitude = 6.0f;
    add("SequsedK_VarlenQ_VarlenK_softcap30", c);
  }
  {
    VarlenBackwardCase c = varlen({100, 333, 1}, {333, 333, 333}, 8, 2, 64, kFp16);
    c.varlen_k = false, c.causal = true;
    add("VarlenQ_DenseK_causal", c);
  }
  {
    VarlenBackwardCase c = varlen({200, 200, 200}, {1, 500, 129}, 4, 4, 128, kBf16);
    c.varlen_q = false, c.window_left = 100, c.window_right = 0;
    add("DenseQ_VarlenK_window100_0", c);
  }
  {
    VarlenBackwardCase c = varlen({129, 1, 300}, {129, 1, 300}, 4, 2, 128, kBf16);
    c.packed_qkv = true, c.causal = true;
    add("PackedQkv_d128_bf16_causal", c);
  }
  {
    VarlenBackwardCase c = varlen({64, 0, 257}, {64, 0, 257}, 3, 1, 64, kFp16);
    c.packed_qkv = true, c.padded_rows = true, c.causal = true, c.window_left = 100;
    add("PackedQkv_PaddedRows_d64_fp16_mqa_causal_window100", c);
  }
  // seqused_q: q, dout, out and lse hold NaN past each sequence's rows in use, which must reach no
  // gradient; dq there must be 0. Block edges, none and all rows used.
  {
    VarlenBackwardCase c = varlen({200, 129, 64, 7}, {300, 129, 64, 7}, 8, 2, 128, kBf16);
    c.seqused_q = {{129, 0, 63, 7}}, c.causal = true;
    add("SequsedQ_VarlenQ_VarlenK_causal", c);
  }
  {
    VarlenBackwardCase c = varlen({257, 257, 257}, {300, 300, 300}, 4, 2, 64, kFp16);
    c.varlen_q = false, c.varlen_k = false, c.seqused_q = {{1, 257, 128}};
    c.window_left = 37, c.window_right = 11;
    add("SequsedQ_DenseQ_DenseK_window37_11", c);
  }
  {
    VarlenBackwardCase c = varlen({130, 65}, {400, 65}, 4, 1, 256, kBf16);
    c.seqused_q = {{65, 64}}, c.seqused_k = {{257, 1}}, c.causal = true, c.softcap = 30.0f, c.amplitude = 6.0f;
    add("SequsedQ_SequsedK_d256_causal_softcap30", c);
  }
  {
    VarlenBackwardCase c = varlen({190, 70}, {190, 200}, 4, 2, 192, kFp16);
    c.seqused_q = {{129, 65}};
    add("SequsedQ_d192", c);
  }
  return cases;
}

class BackwardVarlenCorners : public HopperTest,
                              public ::testing::WithParamInterface<NamedCase<VarlenBackwardCase>> {};

TEST_P(BackwardVarlenCorners, EverySequenceMatchesReference) {
  const std::uint64_t seed = run_seed();
  const VarlenBackwardCase& c = GetParam().c;
  const std::string problems = run_varlen_backward_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Corners, BackwardVarlenCorners, ::testing::ValuesIn(corner_cases()), CaseName());

// NaN and +Inf in every k and v row no sequence uses: between a sequence's seqused_k entry and its
// stored end, and after the last sequence of a varlen k. A key block that straddles a sequence's last
// key in use loads them, its own and the next sequence's (each consumer zeroes those of its 64 keys);
// blocks past the keys in use (no steps) still store dk = dv = 0. Plain, causal, softcap (where NaN in
// K would reach dS through the tanh's slope) and the deterministic kernels; both head dims and dtypes.
std::vector<NamedCase<VarlenBackwardCase>> non_finite_tail_cases() {
  struct Mode {
    const char* name;
    bool causal;
    float softcap;
    bool deterministic;
  };
  const Mode modes[] = {{"", false, 0.0f, false},
                        {"_causal", true, 0.0f, false},
                        {"_softcap30", false, 30.0f, false},
                        {"_causal_deterministic", true, 0.0f, true}};
  std::vector<NamedCase<VarlenBackwardCase>> cases;
  for (const float value : {NAN, INFINITY}) {
    for (const int d : {64, 128}) {
      for (const Dtype dtype : {kBf16, kFp16}) {
        for (const Mode& m : modes) {
          const std::string name = std::string(std::isnan(value) ? "Nan" : "Inf") + m.name + "_d" +
                                   std::to_string(d) + "_" + dtype_name(dtype);
          // Used keys ending one key into a block (257), at 1, inside a block's second 64 keys (350) and
          // its first (37), at 0 and on the 64-key edge (192); the last sequence's last block also reads
          // the trailing rows.
          VarlenBackwardCase packed = varlen({1, 80, 200, 129, 3, 64}, {300, 130, 400, 50, 7, 250}, 4, 2, d, dtype);
          packed.seqused_k = {{257, 1, 350, 37, 0, 192}};
          packed.trailing_k_rows = 200;
          // Dense k: the rows past seqused_k up to the entry's end (TMA's zero fill after it).
          VarlenBackwardCase dense = varlen({100, 100, 100}, {500, 500, 500}, 4, 1, d, dtype);
          dense.varlen_q = false, dense.varlen_k = false, dense.seqused_k = {{317, 1, 448}};
          // cu_seqlens_k alone: only the rows after the last sequence are in no sequence.
          VarlenBackwardCase trailing = varlen({129, 64}, {300, 77}, 4, 4, d, dtype);
          trailing.trailing_k_rows = 200;
          for (VarlenBackwardCase* c : {&packed, &dense, &trailing}) {
            c->causal = m.causal, c->softcap = m.softcap, c->deterministic = m.deterministic;
            if (m.softcap > 0.0f) c->amplitude = 6.0f;
            c->unused_row_value = value;
          }
          cases.push_back({name + "_VarlenK", packed});
          cases.push_back({name + "_DenseK", dense});
          cases.push_back({name + "_RowsAfterTheLastSequence", trailing});
        }
      }
    }
  }
  return cases;
}

class BackwardVarlenNonFiniteTail : public HopperTest,
                                    public ::testing::WithParamInterface<NamedCase<VarlenBackwardCase>> {};

TEST_P(BackwardVarlenNonFiniteTail, GradientsAreThoseOfTheUsedKeysAlone) {
  const std::uint64_t seed = run_seed();
  const VarlenBackwardCase& c = GetParam().c;
  const std::string problems = run_varlen_backward_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Tails, BackwardVarlenNonFiniteTail, ::testing::ValuesIn(non_finite_tail_cases()),
                         CaseName());

// Small batches for compute-sanitizer (scripts/device_tests.sh): sequences cut inside a q block and a
// key block, an empty one on each side, causal GQA, softcap, a window, seqused_k, NaN in the rows past
// the keys in use (zeroed in shared memory before wgmma reads them).
std::vector<NamedCase<VarlenBackwardCase>> sanitizer_cases() {
  std::vector<NamedCase<VarlenBackwardCase>> cases;
  {
    VarlenBackwardCase c = varlen({65, 0, 130}, {129, 40, 0}, 4, 2, 64, kBf16);
    c.causal = true;
    cases.push_back({"Causal_d64_bf16_gqa", c});
  }
  {
    VarlenBackwardCase c = varlen({1, 100}, {70, 130}, 2, 1, 128, kFp16);
    c.softcap = 30.0f, c.amplitude = 6.0f, c.window_left = 16, c.window_right = 4, c.seqused_k = {{33, 130}};
    cases.push_back({"SoftcapWindowSeqused_d128_fp16", c});
  }
  {
    VarlenBackwardCase c = varlen({65, 30}, {200, 130}, 2, 1, 128, kBf16);
    c.seqused_k = {{100, 1}}, c.causal = true, c.unused_row_value = NAN;
    cases.push_back({"NanPastSeqused_d128_bf16", c});
  }
  {
    // At d 256 both consumers clear half the column blocks of the same key rows.
    VarlenBackwardCase c = varlen({65, 30}, {100, 70}, 2, 1, 256, kFp16);
    c.seqused_k = {{37, 1}}, c.causal = true, c.unused_row_value = NAN;
    cases.push_back({"NanPastSeqused_d256_fp16", c});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(SanitizerSmall, BackwardVarlenCorners, ::testing::ValuesIn(sanitizer_cases()), CaseName());

class BackwardVarlen : public HopperTest {};

// Each sequence in turn is the last of the batch (the batch cut after it), so that dq, dk or dv rows
// written past its end land in the trailing guard, where they show, instead of in the next sequence's
// rows, where its own (correct) stores may hide them.
TEST_F(BackwardVarlen, NoSequenceWritesPastItsEnd) {
  const std::uint64_t seed = run_seed();
  const std::vector<int> len_q = {129, 63, 1, 257, 128, 0, 127, 65}, len_k = {129, 300, 5, 257, 128, 40, 1, 64};
  int index = 0;
  for (const auto& [d, dtype] : {std::pair{64, kFp16}, std::pair{128, kBf16}}) {
    VarlenBackwardCase full = varlen(len_q, len_k, 4, 2, d, dtype);
    full.causal = d == 128;
    for (int n = 1; n <= full.batch(); ++n) {
      const VarlenBackwardCase c = full.prefix(n);
      const std::string problems = run_varlen_backward_case(c, splitmix64(seed + index++));
      EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
    }
  }
}

// (head, query, key) pairs per random case: the reference's scratch takes 16 bytes of each.
constexpr double kMaxSweepPairs = 2e6;
constexpr int kSweepCases = 30;

TEST_F(BackwardVarlen, RandomBatchesMatchReference) {
  random_sweep(
      kSweepCases, [](std::mt19937_64& rng) { return random_varlen_backward_case(rng, kMaxSweepPairs); },
      run_varlen_backward_case);
}

// The checks must be able to fail: a zeroed dv row of one sequence, a gradient for a key past
// seqused_k, and a write into dq's guard are each reported; the unspoiled call passes.
TEST_F(BackwardVarlen, SpoiledGradientsAreReported) {
  const std::uint64_t seed = run_seed();
  VarlenBackwardCase c = varlen({100, 129, 64}, {130, 200, 65}, 4, 2, 64, kBf16);
  c.seqused_k = {{90, 200, 65}};
  const std::vector<std::string> reports = spoiled_gradient_reports(c, seed);
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(reports[0], "") << "the unspoiled call (HOPATTN_TEST_SEED=" << seed << ")";
  EXPECT_NE(reports[1].find("dv: max|"), std::string::npos) << "a zeroed dv row: " << reports[1];
  EXPECT_NE(reports[2].find("keys past seqused_k"), std::string::npos) << "an unused key's dk: " << reports[2];
  EXPECT_NE(reports[3].find("dq: "), std::string::npos) << "a write into dq's guard: " << reports[3];
}

class BackwardVarlenRefusals : public HopperTest {};

// Head dim 264 has no kernel (the widest is 256; the forward refuses it too, so the call is built
// without one); max_seqlen_k 0 with cu_seqlens_k cannot size the grid. Both are refused, naming why,
// before anything is written.
TEST_F(BackwardVarlenRefusals, HeadDim264AndMaxSeqlenK0) {
  const std::uint64_t seed = run_seed();
  const std::vector<int> len_q = {100, 0, 129}, len_k = {300, 1, 129};
  const std::vector<int> starts_q = prefix_sums(len_q), starts_k = prefix_sums(len_k);
  struct Mode {
    const char* name;
    int head_dim, max_seqlen_k;
    StatusCode code;
    const char* must_mention;
  };
  for (const Mode& m : {Mode{"head dim 264", 264, 300, StatusCode::kUnsupported, "head_dim 264"},
                        Mode{"max_seqlen_k 0", 128, 0, StatusCode::kInvalidArgument, "max_seqlen_k"}}) {
    RowBuffer q = make_rows(kBf16, starts_q.back(), 4, m.head_dim, false, 0);
    RowBuffer k = make_rows(kBf16, starts_k.back(), 2, m.head_dim, false, 0);
    RowBuffer v = make_rows(kBf16, starts_k.back(), 2, m.head_dim, false, 0);
    fill_inputs(q, k, v, seed, 1.0f);
    RowBuffer out = make_rows(kBf16, starts_q.back(), 4, m.head_dim, false, 0);
    RowBuffer dout = make_rows(kBf16, starts_q.back(), 4, m.head_dim, false, 0);
    fill_normal(out.storage.data(), kBf16, out.elements, splitmix64(seed ^ 4));
    fill_normal(dout.storage.data(), kBf16, dout.elements, splitmix64(seed ^ 5));
    RowBuffer dq = make_rows(kBf16, starts_q.back(), 4, m.head_dim, false, 0);
    RowBuffer dk = make_rows(kBf16, starts_k.back(), 2, m.head_dim, false, 0);
    RowBuffer dv = make_rows(kBf16, starts_k.back(), 2, m.head_dim, false, 0);
    for (const RowBuffer* g : {&dq, &dk, &dv}) poison_nan(g->storage.data(), kBf16, g->elements);
    LseBuffer lse(starts_q, true, 4);
    HOPATTN_CUDA_CHECK(cudaMemset(lse.storage.data(), 0, lse.storage.bytes()));
    const DeviceBuffer cu_q = upload(starts_q), cu_k = upload(starts_k);

    BwdArgs args;
    args.q = q.view.api_tensor(starts_q, true), args.k = k.view.api_tensor(starts_k, true);
    args.v = v.view.api_tensor(starts_k, true), args.out = out.view.api_tensor(starts_q, true);
    args.dout = dout.view.api_tensor(starts_q, true), args.lse = lse.api_tensor;
    args.dq = dq.view.api_tensor(starts_q, true), args.dk = dk.view.api_tensor(starts_k, true);
    args.dv = dv.view.api_tensor(starts_k, true);
    args.cu_seqlens_q = make_tensor(cu_q.data(), Dtype::kInt32, {4}, DeviceType::kCuda);
    args.cu_seqlens_k = make_tensor(cu_k.data(), Dtype::kInt32, {4}, DeviceType::kCuda);
    args.max_seqlen_q = 129, args.max_seqlen_k = m.max_seqlen_k;
    args.causal = true;
    const Status status = backward(args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(status.code(), m.code) << m.name << ": " << status.message();
    EXPECT_NE(status.message().find(m.must_mention), std::string::npos) << m.name << ": " << status.message();
    for (const RowBuffer* g : {&dq, &dk, &dv})
      EXPECT_EQ(count_unpoisoned(g->storage.data(), kBf16, g->elements), 0) << m.name << ": a gradient was written";
  }
}

}  // namespace
}  // namespace hopattn::test
