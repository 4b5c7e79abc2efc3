// The sm_90a FP8 forward on variable-length batches (cu_seqlens_q / cu_seqlens_k / seqused_k /
// seqused_q, dense q or k/v beside the other packed, paged caches), each sequence judged against the FP8
// oracle run on it alone (fp8_case.cuh): random batches and fixed corners.
#include <cstdint>
#include <random>
#include <vector>

#include "gpu/fp8_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

// Variable-length batches (cu_seqlens_q / cu_seqlens_k / seqused_k / seqused_q) against the oracle run
// on each sequence alone: random lengths (empty query sequences, keys and queries in use from none to
// all, the unused rows NaN), every head dim, masks, softcap, GQA, per-head and per-block descales, the kernel options.
TEST_F(Fp8Forward, VariableLengthBatchesMatchTheOracle) {
  const std::uint64_t seed = run_seed();
  std::mt19937_64 rng(seed);
  expect_random_cases_match_oracle(40, seed, [&](int) { return random_fp8_varlen_case(rng); });
}

// Fixed corners of the variable-length kernels: per head dim, a sequence of one query, one with no key
// in use and ragged ones (the NaN rows past seqused_k in a last block's V, which the transposers zero);
// causal with more queries than keys; decoding steps over caches with seqused_k; d 128 from 2048 keys
// (192-key blocks), with and without block descales; q or k/v dense beside the other packed; a softcap
// and a window; the schedules without overlap, ping-pong or the persistent hand-out; GQA packing (by
// default in decoding steps, forced on for longer queries and a dense batch, with a window, softcap,
// MQA, and off; not over q block descales); split pieces merged by the combine kernel (decoding steps
// by default, explicit counts over longer queries, with block descales and a softcap: pieces that end
// in different v block scales); paged caches of 16-256 keys a page (d 128 past 2048 keys: pages take
// 128-key blocks, never the 192-key ones).
TEST_F(Fp8Forward, VariableLengthCornerCases) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  for (int d : {64, 128, 192, 256}) {
    Fp8VarlenCase c;
    c.head_dim = d, c.lens_q = {1, 200, 77}, c.lens_k = {333, 1, 700}, c.used_k = {300, 0, 517};
    c.q_amplitude = 4.0f;
    cases.push_back(c);
    c.causal = true, c.lens_q = {300, 129, 64}, c.lens_k = {100, 129, 65}, c.used_k = {};
    cases.push_back(c);
    c.causal = false, c.lens_q = {1, 1, 1, 1}, c.lens_k = {1000, 1000, 1000, 1000}, c.used_k = {1, 999, 128, 0};
    c.dense_q = c.dense_k = true;  // a decoding step over a dense cache with seqused_k
    cases.push_back(c);
    c.dense_q = c.dense_k = false, c.lens_q = {259, 0, 130}, c.lens_k = {391, 17, 260}, c.used_k = {};
    c.softcap = 2.5f, c.window_left = 37, c.window_right = 5;
    cases.push_back(c);
    c.softcap = 0.0f, c.window_left = c.window_right = -1, c.block_scales = true, c.rows_q = 64;
    cases.push_back(c);
  }
  for (int d : {64, 128}) {  // seqused_q: none, one, a block edge, all (d 256: refused)
    Fp8VarlenCase c;
    c.head_dim = d, c.causal = true, c.lens_q = {200, 129, 64, 7}, c.lens_k = {300, 129, 64, 7};
    c.used_q = {129, 0, 63, 7};
    cases.push_back(c);
    c.causal = false, c.dense_q = c.dense_k = true, c.lens_q = {4, 4}, c.lens_k = {900, 900}, c.used_q = {1, 3};
    c.used_k = {899, 64}, c.block_scales = true, c.rows_q = 64;
    cases.push_back(c);
  }
  Fp8VarlenCase c;
  c.lens_q = {201, 5, 64}, c.lens_k = {2500, 100, 4000}, c.used_k = {2311, 100, 3999};
  cases.push_back(c);
  c.causal = true, c.block_scales = true, c.rows_q = 64, c.rows_kv = 192;
  cases.push_back(c);
  c.head_dim = 64;  // the 192-key one-group block-descale kernel at d 64 too (v134)
  cases.push_back(c);
  c.head_dim = 128, c.rows_kv = 128, c.options.intra_wg_overlap = false;
  cases.push_back(c);
  c.options.intra_wg_overlap = true, c.options.pingpong = false, c.options.persistent = false, c.block_scales = false;
  cases.push_back(c);
  c = Fp8VarlenCase{};
  c.lens_q = {150, 150}, c.dense_q = true, c.lens_k = {700, 33}, c.causal = true;  // dense q, packed k/v
  cases.push_back(c);
  c.dense_q = false, c.lens_q = {150, 7}, c.lens_k = {700, 700}, c.dense_k = true, c.used_k = {650, 700};
  cases.push_back(c);
  for (int d : {64, 128}) {
    c = Fp8VarlenCase{};
    c.head_dim = d, c.heads_q = 8, c.heads_kv = 2, c.q_amplitude = 4.0f;
    c.lens_q = {1, 1, 1}, c.lens_k = {3000, 700, 129}, c.used_k = {2999, 1, 128};  // decoding: packs by default
    cases.push_back(c);
    // Warpgroup 1 of a decoding tile has no live row (mainloop_idle), under either mainloop and without
    // ping-pong turns.
    c.options.intra_wg_overlap = false;
    cases.push_back(c);
    c.options.intra_wg_overlap = true, c.options.pingpong = false;
    cases.push_back(c);
    c.options.pingpong = true;
    c.lens_q = {4, 2, 3}, c.causal = true, c.options.pack_gqa = KernelOptions::PackGqa::kOn;  // speculative rows
    cases.push_back(c);
    c.lens_q = {77, 200, 1}, c.lens_k = {500, 333, 64}, c.used_k = {}, c.causal = false;  // 32 query rows a tile
    c.window_left = 50, c.window_right = 3, c.softcap = 5.0f;
    cases.push_back(c);
    c.window_left = c.window_right = -1, c.softcap = 0.0f, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
    c.lens_q = {2, 1, 1}, c.options.pack_gqa = KernelOptions::PackGqa::kAuto;  // q block descales: never packed
    cases.push_back(c);
    c.block_scales = false, c.heads_q = 32, c.heads_kv = 1, c.options.pack_gqa = KernelOptions::PackGqa::kOn;  // MQA
    c.lens_q = {3, 1}, c.lens_k = {900, 900}, c.dense_q = false, c.dense_k = true;
    cases.push_back(c);
    c.lens_q = {1, 1}, c.dense_q = true;  // a dense FP8 batch packed on request (the variable-length kernels)
    cases.push_back(c);
    c.options.pack_gqa = KernelOptions::PackGqa::kOff, c.used_k = {17, 900};
    cases.push_back(c);
    c = Fp8VarlenCase{};
    c.head_dim = d, c.heads_q = 8, c.heads_kv = 2, c.lens_q = {1, 1}, c.lens_k = {5000, 333}, c.used_k = {4999, 200};
    c.num_splits = 7;  // explicit pieces of a decoding step
    cases.push_back(c);
    c.lens_q = {150, 20, 3}, c.lens_k = {900, 1000, 5}, c.used_k = {}, c.num_splits = 3, c.causal = true;
    cases.push_back(c);
    c.causal = false, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128, c.softcap = 10.0f, c.num_splits = 4;
    cases.push_back(c);
  }
  for (int d : {64, 128, 192, 256}) {
    for (int page_size : {16, 64, 256}) {
      c = Fp8VarlenCase{};
      c.head_dim = d, c.heads_q = 8, c.heads_kv = 2, c.page_size = page_size, c.q_amplitude = 3.0f;
      c.lens_q = {1, 1, 1}, c.lens_k = {900, 900, 900}, c.used_k = {899, 1, 300};  // decoding
      cases.push_back(c);
      c.lens_q = {77, 200}, c.lens_k = {333, 517}, c.used_k = {333, 400}, c.causal = true;  // chunked prefill
      c.block_scales = page_size == 64, c.rows_q = 64, c.rows_kv = 128;
      cases.push_back(c);
    }
  }
  c = Fp8VarlenCase{};
  c.page_size = 64, c.lens_q = {100, 1}, c.lens_k = {2600, 2600}, c.used_k = {2600, 2100};  // past 2048 keys
  cases.push_back(c);
  expect_cases_match_oracle(cases, seed);
}

}  // namespace
}  // namespace hopattn::test
