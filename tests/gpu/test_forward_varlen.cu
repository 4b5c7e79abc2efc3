// The sm_90a forward on variable-length batches: cu_seqlens_q, cu_seqlens_k and seqused_k, alone and
// combined, with dense q or k where the API allows it. Each sequence is an ordinary attention problem
// of its own lengths (masks bottom-right aligned per sequence), so each is judged against the float32
// GPU reference run on that sequence alone, through batch-1 views into the packed buffers, by the rule
// of the dense tests (forward_case.cu), with the helpers and checks of sequence_checks.cuh. Outputs
// are poisoned with NaN and bracketed by poisoned guard rows: every row must be written, and nothing
// around or between the logical rows. A tile holding the last rows of one sequence must not spill into
// the next one; the prefix test makes every sequence the last of a batch once, so that such a spill
// lands in the guard instead of racing with the next sequence's own (correct) write. Rows a sequence
// stores but does not use (past its seqused_k entry) and rows after the last sequence may hold NaN or
// +Inf, as memory nobody wrote may: a sequence's last K/V block loads them, and they must not reach out.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_test_util.cuh"
#include "gpu/sequence_checks.cuh"
#include "gpu/transposed_decode_shapes.cuh"
#include "gpu/varlen_case.cuh"
#include "sm90/host/tile_counters.hpp"

namespace hopattn::test {
namespace {

std::vector<NamedCase<VarlenCase>> corner_cases() {
  // Lengths either side of the 128-row tile edges, the key lengths in another order than the queries'.
  const std::vector<int> edges_q = {1, 127, 128, 129, 255, 257}, edges_k = {257, 1, 129, 128, 127, 255};
  std::vector<NamedCase<VarlenCase>> cases;
  const auto add = [&](std::string name, VarlenCase c) { cases.push_back({std::move(name), std::move(c)}); };

  add("TileEdges_d64_bf16_gqa", varlen(edges_q, edges_k, 8, 2, 64, kBf16));
  {
    VarlenCase c = varlen(edges_q, edges_k, 4, 1, 64, kFp16);
    c.causal = true;  // len_q 257 > len_k 255: its first two rows see no key
    add("TileEdges_d64_fp16_causal_mqa", c);
  }
  {
    VarlenCase c = varlen(edges_q, edges_k, 8, 2, 128, kBf16);
    c.window_left = 100, c.window_right = 0;
    add("TileEdges_d128_bf16_window100_0", c);
  }
  {
    VarlenCase c = varlen(edges_q, edges_k, 2, 2, 128, kFp16);
    c.window_left = 37, c.window_right = 11, c.with_lse = false;
    add("TileEdges_d128_fp16_window37_11_nolse", c);
  }
  {
    VarlenCase c = varlen(edges_q, edges_k, 4, 2, 256, kBf16);
    c.causal = true, c.softcap = 30.0f;
    add("TileEdges_d256_bf16_causal_softcap30", c);
  }
  add("TileEdges_d256_fp16_mqa", varlen(edges_q, edges_k, 4, 1, 256, kFp16));
  {
    VarlenCase c = varlen({200, 0, 129}, {300, 77, 129}, 8, 2, 128, kFp16);
    c.causal = true;
    add("EmptyQuerySequenceInTheMiddle", c);
  }
  // d 64 launches whose longest sequence has more than 4096 keys take the 192-key blocks (shipped_configs.cuh):
  // ragged ends of those blocks, a tile of one row beside prefill tiles.
  {
    VarlenCase c = varlen({130, 1, 300}, {4500, 4097, 5000}, 4, 2, 64, kBf16);
    c.causal = true;
    add("LongKeys_d64_bf16_causal", c);
  }
  add("LongKeys_d64_fp16", varlen({129, 64}, {4200, 4353}, 2, 1, 64, kFp16));
  // Sequences 1 and 3 have no keys: out 0 and LSE -inf for all their rows.
  add("SequencesWithoutKeys", varlen({64, 100, 1, 30}, {70, 0, 33, 0}, 4, 2, 64, kBf16));
  {
    VarlenCase c = varlen({300, 129, 7}, {100, 1, 7}, 8, 2, 128, kBf16);
    c.causal = true;  // the first len_q - len_k rows of each sequence see no key
    add("CausalMoreQueriesThanKeys", c);
  }
  {
    VarlenCase c = varlen({1, 64, 129}, {3000, 2000, 257}, 2, 1, 256, kFp16);
    c.window_left = 37, c.window_right = 11;
    add("MoreKeysThanQueries_window37_11", c);
  }
  {
    VarlenCase c = varlen({1000}, {1000}, 4, 4, 128, kBf16);
    c.causal = true, c.softcap = 30.0f;
    add("SingleSequence_causal_softcap30", c);
  }
  {
    VarlenCase c = varlen({1, 500, 128, 0, 77, 257, 1024, 33, 129, 255}, {1, 700, 64, 10, 77, 256, 1000, 2000, 129, 1},
                          6, 3, 64, kFp16);
    c.causal = true, c.with_lse = false;
    add("TenMixedLengths_causal", c);
  }
  {
    VarlenCase c = varlen({100, 128, 5, 600}, {600, 600, 600, 600}, 4, 1, 128, kBf16);
    c.varlen_k = false, c.seqused_k = {{600, 1, 0, 317}}, c.causal = true;
    add("SequsedK_VarlenQ_DenseK_causal", c);
  }
  {
    VarlenCase c = varlen({129, 129, 129}, {500, 500, 500}, 4, 2, 64, kFp16);
    c.varlen_q = false, c.varlen_k = false, c.seqused_k = {{500, 129, 0}};
    c.window_left = 37, c.window_right = 11;
    add("SequsedK_DenseQ_DenseK_window37_11", c);
  }
  {
    VarlenCase c = varlen({256, 1, 130}, {400, 300, 130}, 4, 2, 256, kBf16);
    c.seqused_k = {{257, 0, 130}}, c.softcap = 30.0f;
    add("SequsedK_VarlenQ_VarlenK_softcap30", c);
  }
  {
    VarlenCase c = varlen({100, 333, 1}, {333, 333, 333}, 8, 2, 128, kFp16);
    c.varlen_k = false, c.causal = true;
    add("VarlenQ_DenseK_causal", c);
  }
  {
    VarlenCase c = varlen({200, 200, 200}, {1, 500, 129}, 4, 4, 64, kBf16);
    c.varlen_q = false, c.window_left = 100, c.window_right = 0;
    add("DenseQ_VarlenK_window100_0", c);
  }
  {
    VarlenCase c = varlen({129, 1, 300}, {129, 1, 300}, 4, 2, 128, kBf16);
    c.packed_qkv = true, c.causal = true;
    add("PackedQkv_d128_bf16_causal", c);
  }
  {
    VarlenCase c = varlen({64, 0, 257}, {64, 0, 257}, 3, 1, 64, kFp16);
    c.packed_qkv = true, c.padded_rows = true, c.causal = true, c.window_left = 100;
    add("PackedQkv_PaddedRows_d64_fp16_mqa_causal_window100", c);
  }
  {
    VarlenCase c = varlen({255, 3}, {3, 255}, 2, 1, 256, kFp16);
    c.padded_rows = true, c.causal = true;
    add("PaddedRows_d256_fp16_causal", c);
  }
  // seqused_q: each sequence's first rows are its queries (causal aligned to them); q holds NaN past
  // them, and out and lse there must keep their poison. Tile edges, none and all rows used.
  {
    VarlenCase c = varlen({200, 129, 64, 7}, {300, 129, 64, 7}, 8, 2, 128, kBf16);
    c.seqused_q = {{129, 0, 63, 7}}, c.causal = true;
    add("SequsedQ_VarlenQ_VarlenK_causal", c);
  }
  {
    VarlenCase c = varlen({257, 257, 257}, {300, 300, 300}, 4, 2, 64, kFp16);
    c.varlen_q = false, c.varlen_k = false, c.seqused_q = {{1, 257, 128}};
    c.window_left = 37, c.window_right = 11;
    add("SequsedQ_DenseQ_DenseK_window37_11", c);
  }
  {
    VarlenCase c = varlen({130, 65}, {400, 65}, 4, 1, 256, kBf16);
    c.seqused_q = {{65, 64}}, c.seqused_k = {{257, 1}}, c.causal = true, c.softcap = 30.0f;
    add("SequsedQ_SequsedK_d256_causal_softcap30", c);
  }
  {
    VarlenCase c = varlen({4, 4, 4}, {900, 900, 900}, 16, 2, 64, kBf16);  // speculative decoding steps
    c.varlen_q = false, c.varlen_k = false, c.seqused_q = {{1, 0, 3}}, c.causal = true;
    c.seqused_k = {{900, 20, 499}};
    add("SequsedQ_DecodingSteps_causal", c);
  }
  return cases;
}

class ForwardVarlenCorners : public HopperTest, public ::testing::WithParamInterface<NamedCase<VarlenCase>> {};

TEST_P(ForwardVarlenCorners, EverySequenceMatchesReference) {
  const std::uint64_t seed = run_seed();
  const VarlenCase& c = GetParam().c;
  const std::string problems = run_varlen_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Corners, ForwardVarlenCorners, ::testing::ValuesIn(corner_cases()), CaseName());

// The corners again with GQA packing forced on (KernelOptions::PackGqa::kOn: every tile holds all the
// query heads of a K/V head, long sequences and ratio 1 included), and with every tile split into 3
// pieces (plan_varlen_split), packed and not. Head dims 64 and 128: those kernels pack and split.
std::vector<NamedCase<VarlenCase>> packed_and_split_corner_cases() {
  std::vector<NamedCase<VarlenCase>> cases;
  for (const NamedCase<VarlenCase>& corner : corner_cases()) {
    if (corner.c.head_dim > 128) continue;
    VarlenCase packed = corner.c, split = corner.c, both = corner.c;
    packed.pack_gqa = both.pack_gqa = KernelOptions::PackGqa::kOn;
    split.num_splits = both.num_splits = 3;
    split.pack_gqa = KernelOptions::PackGqa::kOff;
    cases.push_back({corner.name + "_Packed", packed});
    cases.push_back({corner.name + "_Split3", split});
    cases.push_back({corner.name + "_PackedSplit3", both});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(PackedAndSplit, ForwardVarlenCorners, ::testing::ValuesIn(packed_and_split_corner_cases()),
                         CaseName());

// Decoding steps as a serving engine runs them: one (or a few) query rows per sequence against caches
// of unequal lengths, GQA ratios that divide the 128-row tile and ones that do not (7: Qwen-like 28/4,
// 3, 48 / 16...), causal (bottom-right aligned) or windowed, packed by default and split by the
// heuristic (few tiles), by a forced count, or not at all.
std::vector<NamedCase<VarlenCase>> decode_cases() {
  std::vector<NamedCase<VarlenCase>> cases;
  struct Heads {
    int q, kv;
  };
  int index = 0;
  for (const Heads heads : {Heads{8, 2}, Heads{28, 4}, Heads{6, 2}, Heads{32, 1}, Heads{4, 4}}) {
    for (const int d : {64, 128}) {
      for (const int num_splits : {0, 1, 5}) {
        const Dtype dtype = index % 2 == 0 ? kBf16 : kFp16;
        VarlenCase c = varlen({1, 1, 1, 1}, {3000, 1, 700, 129}, heads.q, heads.kv, d, dtype);
        c.num_splits = num_splits;
        c.causal = index % 3 == 0;
        if (index % 4 == 1) c.window_left = 200, c.window_right = 0;
        if (index % 5 == 2) c.softcap = 20.0f;
        const std::string name = "Hq" + std::to_string(heads.q) + "Hkv" + std::to_string(heads.kv) + "_d" +
                                 std::to_string(d) + "_splits" + std::to_string(num_splits);
        cases.push_back({name, c});
        VarlenCase speculative = c;  // a few draft tokens per sequence, and seqused_k below the stored keys
        speculative.len_q = {4, 1, 3, 2};
        speculative.causal = true;
        speculative.seqused_k = {{2999, 1, 512, 100}};
        cases.push_back({name + "_Speculative", speculative});
        ++index;
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Decode, ForwardVarlenCorners, ::testing::ValuesIn(decode_cases()), CaseName());

// Split launches of far more pieces than CTAs (320 tiles in 3 pieces: a persistent launch, each CTA
// taking pieces of several tiles, and a combine grid of 320 tiles); one or two query rows a tile,
// packed (16/8 heads) or not (MHA), at each head dim that splits variable-length launches (256: the
// decoding kernel).
std::vector<NamedCase<VarlenCase>> many_pieces_cases() {
  std::vector<NamedCase<VarlenCase>> cases;
  constexpr int kSequences = 40;
  std::vector<int> one_row(kSequences, 1), drafts(kSequences), len_k(kSequences);
  for (int i = 0; i < kSequences; ++i) {
    drafts[i] = 1 + i % 2;
    len_k[i] = 1 + (i * 997) % 2100;
  }
  int index = 0;
  for (const int d : {64, 128, 256}) {
    VarlenCase mha = varlen(one_row, len_k, 8, 8, d, index++ % 2 == 0 ? kBf16 : kFp16);
    mha.num_splits = 3;
    mha.causal = d != 128;
    cases.push_back({"Mha_d" + std::to_string(d) + "_splits3", mha});
    VarlenCase packed = varlen(drafts, len_k, 16, 8, d, index++ % 2 == 0 ? kBf16 : kFp16);
    packed.num_splits = 3;
    packed.causal = true;
    if (d == 128) packed.window_left = 300, packed.window_right = 0;
    cases.push_back({"PackedDrafts_d" + std::to_string(d) + "_splits3", packed});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(ManyPieces, ForwardVarlenCorners, ::testing::ValuesIn(many_pieces_cases()), CaseName());

// Tiles of at most 8 live rows run transposed at d 64 (fwd/transposed_decode.cuh), tiles of 9 or more
// the ordinary loop; d 128 runs the same shapes through the ordinary loop alone. Batches with tiles of
// exactly 8 and 9 rows side by side (transposed_decode_shapes.cuh, the FP8 suite's too), caches of 1
// key to several key blocks of d 64 with ragged ends, split or not, causal, windowed or softcapped.
// One decoding case of a transposed_decode_shapes.cuh shape: caches of 1 key to several key blocks with
// ragged ends; the case's index picks the dtype and whether it is causal, windowed or softcapped.
NamedCase<VarlenCase> decoding_case(const TransposedDecodeShape& shape, int d, int num_splits, int index) {
  VarlenCase c = varlen(shape.len_q, {2500, 1, 193, 1100}, shape.heads_q, shape.heads_kv, d,
                        index % 2 == 0 ? kBf16 : kFp16);
  c.pack_gqa = shape.pack;
  c.num_splits = num_splits;
  c.causal = index % 3 == 0;
  if (index % 4 == 1) c.window_left = 300, c.window_right = 0;
  if (index % 5 == 3) c.softcap = 15.0f;
  return {std::string(shape.name) + "_d" + std::to_string(d) + "_splits" + std::to_string(num_splits), c};
}

std::vector<NamedCase<VarlenCase>> transposed_decode_cases() {
  std::vector<NamedCase<VarlenCase>> cases;
  int index = 0;
  for (const TransposedDecodeShape& shape : transposed_decode_shapes()) {
    for (const int d : {64, 128}) {
      for (const int num_splits : {0, 3}) cases.push_back(decoding_case(shape, d, num_splits, index++));
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(TransposedDecode, ForwardVarlenCorners, ::testing::ValuesIn(transposed_decode_cases()),
                         CaseName());

// Decoding steps at the wide head dims (136-256) in the d 256 decoding kernel, every tile transposed
// (wide_decode_shapes: at most 8 live rows a tile, packed or not; 9 rows take the ordinary kernel),
// split by the heuristic, in 3 or not at all, draft rows causal; d 136 and 192 run padded to 256.
std::vector<NamedCase<VarlenCase>> wide_decode_cases() {
  std::vector<NamedCase<VarlenCase>> cases;
  int index = 0;
  for (const TransposedDecodeShape& shape : wide_decode_shapes()) {
    for (const int d : {256, 192, 136}) {
      for (const int num_splits : {0, 1, 3}) {
        if (d != 256 && num_splits == 1) continue;
        NamedCase<VarlenCase> c = decoding_case(shape, d, num_splits, index++);
        c.c.causal = c.c.causal || shape.len_q[0] > 1;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(WideDecode, ForwardVarlenCorners, ::testing::ValuesIn(wide_decode_cases()), CaseName());

// NaN and +Inf in every k and v row no sequence uses: between a sequence's seqused_k entry and the next
// sequence (varlen k) or its dense row's end (dense k), and after the last sequence in a varlen k (with
// seqused_k or cu_seqlens_k alone). Each
// used key count leaves such rows in its last K/V block at every block width (64 keys at d 256, 128 at
// d 64 and 128; d 64 takes 192-key blocks in the varlen k cases, whose longest sequence stores more than
// 4096 keys), causal or not.
std::vector<NamedCase<VarlenCase>> non_finite_tail_cases() {
  std::vector<NamedCase<VarlenCase>> cases;
  for (const float value : {NAN, INFINITY}) {
    for (const int d : kNativeHeadDims) {
      for (const Dtype dtype : {kBf16, kFp16}) {
        for (const bool causal : {false, true}) {
          const std::string name = std::string(std::isnan(value) ? "Nan" : "Inf") + (causal ? "_causal" : "") + "_d" +
                                   std::to_string(d) + "_" + dtype_name(dtype);
          VarlenCase packed = varlen({1, 80, 200, 129, 3}, {300, 130, 4300, 50, 7}, 4, 2, d, dtype);
          packed.seqused_k = {{257, 1, 4230, 37, 0}};
          packed.trailing_k_rows = 200;
          VarlenCase dense = varlen({100, 100, 100}, {500, 500, 500}, 4, 1, d, dtype);
          dense.varlen_q = false, dense.varlen_k = false, dense.seqused_k = {{317, 1, 499}};
          VarlenCase trailing = varlen({129, 64}, {300, 77}, 4, 4, d, dtype);
          trailing.trailing_k_rows = 200;  // without seqused_k: the last sequence's last block reads them
          for (VarlenCase* c : {&packed, &dense, &trailing}) c->causal = causal, c->unused_row_value = value;
          cases.push_back({name + "_VarlenK", packed});
          cases.push_back({name + "_DenseK", dense});
          cases.push_back({name + "_RowsAfterTheLastSequence", trailing});
        }
      }
    }
  }
  return cases;
}

class ForwardVarlenNonFiniteTail : public HopperTest, public ::testing::WithParamInterface<NamedCase<VarlenCase>> {};

TEST_P(ForwardVarlenNonFiniteTail, OutputIsThatOfTheUsedKeysAlone) {
  const std::uint64_t seed = run_seed();
  const VarlenCase& c = GetParam().c;
  const std::string problems = run_varlen_case(c, seed);
  EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
}

INSTANTIATE_TEST_SUITE_P(Tails, ForwardVarlenNonFiniteTail, ::testing::ValuesIn(non_finite_tail_cases()),
                         CaseName());

// The same cases with K/V loaded by the producer warpgroup's cp.async copies (KernelOptions::kv_loads =
// kCopyThreads; kAuto takes them only for decoding launches of at least 64 MiB of K/V, larger than
// these): the copies zero-fill the rows past a sequence's keys (no V tail is cleared in shared memory
// then, so NaN and Inf there must still not reach the output) and the columns past a padded head dim.
// Head dims 64 and 128, and padded dims: where those kernels exist.
std::vector<NamedCase<VarlenCase>> with_kv_copies(std::vector<NamedCase<VarlenCase>> cases) {
  std::vector<NamedCase<VarlenCase>> out =
      with_kv_loads(std::move(cases), KernelOptions::KvLoads::kCopyThreads, 128, "_KvCopies");
  for (const int d : {40, 72, 112}) {
    VarlenCase padded = varlen({1, 77, 200}, {300, 129, 1000}, 8, 2, d, kBf16);
    padded.kv_loads = KernelOptions::KvLoads::kCopyThreads;
    out.push_back({"PaddedHeadDim" + std::to_string(d) + "_KvCopies", padded});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(CornersKvCopies, ForwardVarlenCorners, ::testing::ValuesIn(with_kv_copies(corner_cases())),
                         CaseName());
INSTANTIATE_TEST_SUITE_P(DecodeKvCopies, ForwardVarlenCorners, ::testing::ValuesIn(with_kv_copies(decode_cases())),
                         CaseName());
INSTANTIATE_TEST_SUITE_P(TransposedDecodeKvCopies, ForwardVarlenCorners,
                         ::testing::ValuesIn(with_kv_copies(transposed_decode_cases())), CaseName());
INSTANTIATE_TEST_SUITE_P(TailsKvCopies, ForwardVarlenNonFiniteTail,
                         ::testing::ValuesIn(with_kv_copies(non_finite_tail_cases())), CaseName());
// Decoding steps from rows at head dims up to 64 take the copies by default (params_builder.hpp,
// takes_kv_copy_kernel); the same d 64 cases by TMA (KernelOptions::kv_loads = kTma) keep those kernels
// tested.
std::vector<NamedCase<VarlenCase>> with_kv_tma_at_d64(std::vector<NamedCase<VarlenCase>> cases) {
  return with_kv_loads(std::move(cases), KernelOptions::KvLoads::kTma, 64, "_KvTma");
}

INSTANTIATE_TEST_SUITE_P(DecodeKvTma, ForwardVarlenCorners, ::testing::ValuesIn(with_kv_tma_at_d64(decode_cases())),
                         CaseName());
INSTANTIATE_TEST_SUITE_P(TransposedDecodeKvTma, ForwardVarlenCorners,
                         ::testing::ValuesIn(with_kv_tma_at_d64(transposed_decode_cases())), CaseName());
// Persistent CTAs each taking pieces of several tiles, whose pieces share their tiles' blocks
// (split_plan.hpp, SharedTileBlocks): a CTA's next visit starts while its last claims are settled.
INSTANTIATE_TEST_SUITE_P(ManyPiecesKvCopies, ForwardVarlenCorners,
                         ::testing::ValuesIn(with_kv_copies(many_pieces_cases())), CaseName());

class ForwardVarlen : public HopperTest {};

// The copy kernels' split pieces claim their tiles' blocks from counters that the tile's last claim
// zeroes. Launches take the counter slots in turn (host/tile_counters.hpp), so a counter left over would
// give a later launch's pieces a wrong share: more launches than slots, each checked.
TEST_F(ForwardVarlen, KvCopiesSharingPiecesLeaveTheirCountersZero) {
  const std::uint64_t seed = run_seed();
  VarlenCase c = varlen({1, 1, 2}, {3000, 1900, 905}, 8, 2, 64, kBf16);
  c.kv_loads = KernelOptions::KvLoads::kCopyThreads;
  c.num_splits = 5;
  c.causal = true;
  for (int run = 0; run < sm90::kTileCounterSlots + 8; ++run) {
    const std::string problems = run_varlen_case(c, seed + run);
    ASSERT_TRUE(problems.empty()) << "launch " << run << ": " << c.describe() << " (HOPATTN_TEST_SEED=" << seed
                                  << ")\n  " << problems;
  }
}

// Each sequence in turn is the last of the batch (the batch cut after it), so rows a tile writes past
// its end land in out's trailing guard (and past its LSE row, in the padding) where they are seen,
// instead of in the next sequence's rows where that sequence's own write may hide them.
TEST_F(ForwardVarlen, NoSequenceWritesPastItsEnd) {
  const std::uint64_t seed = run_seed();
  const std::vector<int> len_q = {129, 255, 1, 257, 128, 0, 127, 65}, len_k = {129, 300, 5, 257, 128, 40, 1, 64};
  int index = 0;
  for (const auto& [d, dtype] : {std::pair{64, kFp16}, std::pair{128, kBf16}, std::pair{256, kFp16}}) {
    VarlenCase full = varlen(len_q, len_k, 4, 2, d, dtype);
    full.causal = d == 128;
    for (int n = 1; n <= full.batch(); ++n) {
      const VarlenCase c = full.prefix(n);
      const std::string problems = run_varlen_case(c, splitmix64(seed + index++));
      EXPECT_TRUE(problems.empty()) << c.describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << problems;
    }
  }
}

// Lengths either side of the 64- and 128-row tile edges: a quarter of the random lengths.
constexpr int kEdgeLengths[] = {1, 63, 64, 65, 127, 128, 129, 255, 256, 257};
constexpr int kMaxLength = 3000;
constexpr int kRandomCases = 40;
// Bound on heads_q * d * sum_b len_q * len_k (most draws are far below): the whole sweep, reference
// included, then takes about a second on an H200.
constexpr double kMaxWork = 4e10;

// Batch 1-6; varlen q, varlen k and seqused_k drawn independently (at least one); lengths log-uniform
// in [1, 3000], often an edge length, sometimes 0 on a varlen side; head dims of draw_head_dim (padded
// ones too), every dtype and GQA ratio; causal, windows, softcap, scale, LSE, padded rows and packed qkv
// at random.
VarlenCase random_varlen_case(std::mt19937_64& rng) {
  VarlenCase c;
  draw_lengths(rng, c, kEdgeLengths, kMaxLength, 0.25);
  draw_settings(rng, c, *std::max_element(c.len_k.begin(), c.len_k.end()));

  // Fewer heads first, then every length (used keys too) by a quarter, until the work fits.
  while (c.work() > kMaxWork) {
    if (!shrink_heads(c)) shrink_lengths(c);
  }
  return c;
}

TEST_F(ForwardVarlen, RandomBatchesMatchReference) {
  random_sweep(kRandomCases, random_varlen_case, run_varlen_case);
}

// KernelOptions::kv_loads = kCopyThreads where no kernel copies K/V (head dim 256; a dense prefill,
// which takes the dense kernels) is refused with kUnsupported naming the option, before anything is
// written. (A paged cache is copied at head dims up to 128 and refused at 256: test_forward_paged.cu.)
TEST_F(ForwardVarlen, KvCopiesWhereNoKernelCopiesAreRefused) {
  const std::vector<int> lens = {129, 65};
  const std::vector<int> starts = prefix_sums(lens);
  for (const auto& [d, varlen] : {std::pair{256, true}, std::pair{128, false}}) {
    const std::vector<int> dense_starts = {0, 129, 258};
    const std::vector<int>& rows = varlen ? starts : dense_starts;
    RowBuffer q = make_rows(kBf16, rows.back(), 4, d, false, 0), k = make_rows(kBf16, rows.back(), 2, d, false, 0),
              v = make_rows(kBf16, rows.back(), 2, d, false, 0), out = make_rows(kBf16, rows.back(), 4, d, false, 0);
    for (const RowBuffer* b : {&q, &k, &v}) fill_normal(b->storage.data(), kBf16, b->elements, 1);
    poison_nan(out.storage.data(), kBf16, out.elements);
    const DeviceBuffer cu = upload(starts);
    FwdArgs args;
    args.q = q.view.api_tensor(rows, varlen);
    args.k = k.view.api_tensor(rows, varlen);
    args.v = v.view.api_tensor(rows, varlen);
    args.out = out.view.api_tensor(rows, varlen);
    if (varlen) {
      args.cu_seqlens_q = args.cu_seqlens_k = make_tensor(cu.data(), Dtype::kInt32, {3}, DeviceType::kCuda);
      args.max_seqlen_q = args.max_seqlen_k = 129;
    }
    args.options.kv_loads = KernelOptions::KvLoads::kCopyThreads;
    const Status status = forward(args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << "d " << d << ": " << status.message();
    EXPECT_NE(status.message().find("kv_loads = kCopyThreads"), std::string::npos) << status.message();
    EXPECT_EQ(count_unpoisoned(out.storage.data(), kBf16, out.elements), 0) << "d " << d << ": out written";
  }
}

}  // namespace
}  // namespace hopattn::test
