// The sm_90a FP8 forward on dense batches against the FP8 oracle (fp8_case.cuh, fp8_oracle.cuh): random
// configurations, fixed corners (every head dim, masks, windows, chunks, softcap, MQA, block descales at
// every supported granularity), long key sequences across the 128/192-key block width switch, all-zero v
// blocks, the tail split, and v given keys-contiguous.
#include <cstdint>
#include <random>
#include <vector>

#include "gpu/fp8_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

TEST_F(Fp8Forward, RandomConfigurationsMatchTheOracle) {
  const std::uint64_t seed = run_seed();
  std::mt19937_64 rng(seed);
  constexpr int kEdges[] = {1, 63, 65, 127, 129, 257};
  constexpr int kEdgeCount = static_cast<int>(sizeof(kEdges) / sizeof(kEdges[0]));
  expect_random_cases_match_oracle(120, seed, [&](int i) {
    const int fq = i < kEdgeCount ? kEdges[i] : 0;
    const int fk = i >= kEdgeCount && i < 2 * kEdgeCount ? kEdges[i - kEdgeCount] : 0;
    return random_fp8_case(rng, fq, fk);
  });
}

// Fixed corners: every head dim with the tail of a K block, causal with more queries than keys (rows
// that see nothing), MQA, block scales at the smallest supported granularity, sliding windows
// (narrower than a K block, rows whose window holds no key), softcap with and without block scales.
TEST_F(Fp8Forward, CornerCases) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8Case> cases;
  for (int d : {64, 128, 256, 192}) {
    Fp8Case c;
    c.head_dim = d, c.batch = 2, c.heads_q = 4, c.heads_kv = 1, c.seqlen_q = 200, c.seqlen_k = 333;
    c.q_amplitude = 4.0f, c.head_scales = true, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
    cases.push_back(c);
    c.causal = true, c.seqlen_q = 300, c.seqlen_k = 100, c.block_scales = false;
    cases.push_back(c);
    c.seqlen_q = 1, c.seqlen_k = 1, c.causal = false;
    cases.push_back(c);
    c.seqlen_q = 333, c.seqlen_k = 517, c.window_left = 37, c.window_right = 5;
    cases.push_back(c);
    c.window_left = 100, c.window_right = -1, c.causal = true;  // local causal window
    cases.push_back(c);
    c.seqlen_q = 600, c.seqlen_k = 200, c.window_left = 3, c.causal = false, c.window_right = -1;  // empty rows
    cases.push_back(c);
    c.seqlen_q = 259, c.seqlen_k = 391, c.window_left = -1, c.softcap = 2.5f;  // most scores capped
    cases.push_back(c);
    c.block_scales = true, c.causal = true, c.softcap = 12.0f;
    cases.push_back(c);
    c.softcap = 0.0f, c.block_scales = false, c.out_pad = 8;  // the O store must leave the padding alone
    cases.push_back(c);
    // Chunked attention: causal chunks of 100 (a tile spans two), chunks of 7 with a window and block
    // descales, and chunks of 64 where diagonals fall before key 0 (those rows see no key).
    c.out_pad = 0, c.attention_chunk = 100;
    cases.push_back(c);
    c.causal = false, c.attention_chunk = 7, c.window_left = 20, c.block_scales = true;
    cases.push_back(c);
    c.seqlen_q = 500, c.seqlen_k = 300, c.window_left = -1, c.attention_chunk = 64, c.block_scales = false;
    cases.push_back(c);
    c.attention_chunk = 0, c.seqlen_q = 259, c.seqlen_k = 391;
  }
  // 192-row k/v descales at head dim 128: the 192-key block-descale kernel at a short length (also
  // under the device script's sanitizers), v in both layouts; at head dim 64 (ordinary v layout) the
  // same kernel and its grouped form (64-row scales: three descale groups a block).
  Fp8Case c;
  c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.seqlen_q = 200, c.seqlen_k = 533;
  c.block_scales = true, c.rows_q = 64, c.rows_kv = 192;
  cases.push_back(c);
  c.head_dim = 64;
  cases.push_back(c);
  c.rows_kv = 64, c.causal = true;
  cases.push_back(c);
  c.head_dim = 128, c.rows_kv = 192;
  c.v_keys_contiguous = true;
  cases.push_back(c);
  // ... and at head dim 256 the 96-key block-descale kernel (ordinary v layout only), and its grouped
  // form for 128- and 32-row scales (32-key descale groups; at 1111 keys the last block's third group
  // lies past the keys).
  c.head_dim = 256, c.v_keys_contiguous = false;
  cases.push_back(c);
  c.causal = false, c.seqlen_k = 1111, c.options.intra_wg_overlap = false;
  cases.push_back(c);
  c.rows_kv = 128;
  cases.push_back(c);
  c.options.intra_wg_overlap = true, c.causal = true;
  cases.push_back(c);
  c.rows_kv = 32, c.seqlen_k = 2100, c.seqlen_q = 70;
  cases.push_back(c);
  expect_cases_match_oracle(cases, seed);
}

// Head dims 128 and 64 switch to 192-key blocks from 2048 keys on (fwd_fp8/traits.cuh): both sides of
// the switch, a partial last block of either width, a last block that is exactly full (8448 = 44 x
// 192), causal, MQA, the kernel options and block descales in 192- and 384-row blocks (128- and 64-row:
// the grouped kernel); each with v in both layouts (keys-contiguous: the 192-key kernel's V^T loads
// and permuted K rows; head dim 64 keeps 128-key blocks there, which take only rows of 128s).
TEST_F(Fp8Forward, LongKeySequencesAcrossTheBlockWidthSwitch) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8Case> cases;
  for (int d : {128, 64}) {
    for (int seqlen_k : {2047, 2048, 8333, 8448}) {
      Fp8Case c;
      c.head_dim = d, c.heads_q = 3, c.heads_kv = 1, c.seqlen_q = 201, c.seqlen_k = seqlen_k;
      c.q_amplitude = 4.0f, c.head_scales = true;
      cases.push_back(c);
      c.causal = true, c.with_lse = false, c.seqlen_q = 77;
      cases.push_back(c);
    }
  }
  Fp8Case c = cases.back();
  c.options.pingpong = false;
  cases.push_back(c);
  c.options.intra_wg_overlap = false;
  cases.push_back(c);
  // Block descales whose k/v rows are whole 64-key descale groups take the 192-key kernel too
  // (fwd_fp8/launch.cuh): 192 or 64 rows at any length, 384 and 128 from 2048 keys on. 128 and 64
  // rows change scale inside a block; at 8300 keys the last block's third group lies past the keys
  // (its entry would be past the descales').
  const Fp8Case first_of_head_dim[] = {cases[0], cases[8]};  // d 128, d 64
  for (const Fp8Case& first : first_of_head_dim) {
    c = first;
    c.block_scales = true, c.rows_q = 64, c.rows_kv = 192;
    cases.push_back(c);
    c.rows_kv = 384, c.seqlen_k = 8333, c.causal = true, c.seqlen_q = 77;
    cases.push_back(c);
    c.rows_kv = 128, c.seqlen_k = 8300;
    cases.push_back(c);
    c.causal = false, c.seqlen_k = 2100, c.seqlen_q = 130;
    cases.push_back(c);
    c.rows_kv = 64, c.seqlen_k = 333, c.options.intra_wg_overlap = false;
    cases.push_back(c);
    c.rows_kv = 192;
    cases.push_back(c);
  }
  const std::size_t key_ordered = cases.size();
  for (std::size_t i = 0; i < key_ordered; ++i) {
    c = cases[i];
    if (c.head_dim == 64 && c.block_scales && c.rows_kv % 128 != 0) continue;  // refused there (above)
    c.v_keys_contiguous = true;
    cases.push_back(c);
  }
  expect_cases_match_oracle(cases, seed);
}

// All-zero v blocks (1, 4, 7, ...) with the scales quantizers write for them: 1 (quantize_fp8's), and
// an amax clamped at 1e-12 over 448 (2^-48.7), far below its neighbours' [1/4, 4]. Their keys keep
// their weight in the row sums, which the output's scale shows (a key left out of l scales every
// output of its row up). The grouped kernels (128- and 64-row scales at head dims 128 and 64 from
// 2048 keys, 128- and 32-row at 256) take such a block's P down by its scale over its neighbour's:
// below 2^-10 their f16 row sums would lose it. The one-group kernels (192-row at 128 and 64, 96-row at 256, and
// the 128-key kernels at 1111 keys) change O's v units to the tiny scale and back.
TEST_F(Fp8Forward, ZeroVBlocksKeepTheirKeysInTheRowSums) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8Case> cases;
  for (float scale : {1.0f, 1e-12f / 448.0f}) {
    for (int d : {128, 256, 64}) {
      for (int rows_kv : {128, d == 256 ? 32 : 64, d == 256 ? 96 : 192}) {
        Fp8Case c;
        c.head_dim = d, c.heads_q = 2, c.heads_kv = 1, c.seqlen_q = 130, c.seqlen_k = 2100;
        c.block_scales = true, c.rows_q = 64, c.rows_kv = rows_kv, c.zero_v_block_scale = scale;
        cases.push_back(c);
        c.causal = true, c.q_amplitude = 4.0f, c.seqlen_k = 1111;
        cases.push_back(c);
      }
    }
  }
  expect_cases_match_oracle(cases, seed);
}

// The tail split (sm90/fwd/split_plan.hpp; the FP8 kernels merge pieces in a second kernel,
// fwd_fp8/split_combine.cuh): one round of tiles and a few more, so the last rounds are cut along the
// keys, at every head dim (d 192 and 256 never split) and both d 128 block widths; explicit pieces;
// single-row decoding over every SM; head descales (the pieces' O carries the v descale, their LSE
// must combine); a softcap; block descales with a softcap (pieces end in different v block scales)
// and alone (that kernel never splits).
TEST_F(Fp8Forward, TailSplitPiecesMergeToTheOracle) {
  const std::uint64_t seed = run_seed();
  const int sms = multiprocessor_count();
  std::vector<Fp8Case> cases;
  for (int d : {64, 128, 256, 192}) {
    for (int seqlen_k : {700, 8333}) {
      if (seqlen_k > 700 && d > 128) continue;  // d 64 and 128 change block width with the keys
      Fp8Case c;
      c.head_dim = d, c.heads_q = 3, c.heads_kv = 1, c.seqlen_k = seqlen_k, c.q_amplitude = 3.0f;
      c.head_scales = true;
      c.seqlen_q = 128 * ((sms + 5) / 3) - 37;  // 3 * ceil(sq / 128) tiles: one round and a few more
      cases.push_back(c);
      c.seqlen_q = 300, c.num_splits = 3, c.with_lse = false;  // 9 tiles in 3 pieces
      cases.push_back(c);
      c.num_splits = 0, c.seqlen_q = 1, c.heads_q = 2, c.with_lse = true;  // decoding
      cases.push_back(c);
    }
  }
  Fp8Case c = cases.front();
  c.softcap = 20.0f, c.num_splits = 4;
  cases.push_back(c);
  c.block_scales = true;
  cases.push_back(c);
  c.softcap = 0.0f;
  cases.push_back(c);
  expect_cases_match_oracle(cases, seed);
}

// v given keys-contiguous (V^T in memory): the kernel loads V^T tiles by TMA and K's rows permuted
// within each 16-key group, except in the K block that reaches the end of the keys, which comes in
// key order and packs P with shuffles (fwd_fp8/fp8_layout.hpp). Key counts around 16-key groups
// (both K maps: two boxes per group for two batches of a length not a multiple of 16, one box per
// block otherwise, including one batch of any length) and 128-key blocks (one block, a partial
// last block, a last block that is exactly full), every head dim, causal and windows (masks over permuted columns), GQA, block scales, softcap, the tail split, and
// the schedules without intra-warpgroup overlap or ping-pong; padded V^T rows whose padding is NaN.
TEST_F(Fp8Forward, KeysContiguousVMatchesTheOracle) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8Case> cases;
  for (int d : {64, 128, 192, 256}) {
    for (int seqlen_k : {1, 15, 17, 128, 333, 1024}) {
      Fp8Case c;
      // One batch at 333 keys: the one-box K map over whole 16-key groups only (20 of them).
      c.head_dim = d, c.batch = seqlen_k == 333 ? 1 : 2, c.heads_q = 4, c.heads_kv = 2, c.seqlen_q = 150;
      c.seqlen_k = seqlen_k;
      c.q_amplitude = 4.0f, c.head_scales = true, c.v_keys_contiguous = true, c.v_key_pad = seqlen_k % 2 ? 0 : 32;
      cases.push_back(c);
    }
    Fp8Case c;
    c.head_dim = d, c.heads_q = 2, c.heads_kv = 1, c.seqlen_q = 333, c.seqlen_k = 517, c.q_amplitude = 4.0f;
    c.v_keys_contiguous = true, c.causal = true;
    cases.push_back(c);
    c.causal = false, c.window_left = 37, c.window_right = 5;
    cases.push_back(c);
    c.window_left = c.window_right = -1, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
    cases.push_back(c);
    c.softcap = 2.5f;
    cases.push_back(c);
    c.block_scales = false, c.softcap = 0.0f, c.options.intra_wg_overlap = false;
    cases.push_back(c);
    c.options.intra_wg_overlap = true, c.options.pingpong = false, c.num_splits = 3;
    cases.push_back(c);
  }
  expect_cases_match_oracle(cases, seed);
}

}  // namespace
}  // namespace hopattn::test
