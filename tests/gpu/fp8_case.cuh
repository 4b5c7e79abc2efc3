// The cases of the FP8 forward tests (test_fp8_forward*.cu): the sm_90a FP8 forward against an
// on-device oracle (fp8_oracle.cuh) on the same e4m3 codes and scales: random configurations (head dims
// 64/128/256, causal or not, sliding windows, softcap, GQA, odd lengths and length 1, LSE, per-head and
// per-block descales, every kernel option, out with padded rows), dense and variable-length batches
// (each sequence checked against the oracle on its own), fresh data per run, poisoned outputs. The case
// structs, the calls that run them (fp8_case.cu), the random case generators and the suite's fixture.
#pragma once

#include <cstdint>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.cuh"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {

struct Fp8Case {
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 128;
  int head_dim_v = 0;  // v's and out's head dim; 0: head_dim
  bool causal = false, with_lse = true;
  int window_left = -1, window_right = -1;  // -1: unbounded; causal is window_right 0
  int attention_chunk = 0;                   // 0: off
  float softcap = 0.0f;                      // 0: off
  int out_pad = 0;  // > 0: out rows padded by this many elements (a multiple of 8: 16-byte strides)
  float q_amplitude = 1.0f;  // larger: peakier softmax
  bool head_scales = false, block_scales = false;
  int rows_q = 128, rows_kv = 128;
  int num_splits = 0;  // the API's: 0 heuristic, 1 never, n pieces per tile
  // v passed keys-contiguous: a (batch, heads_kv, d, seqlen_k rounded up to 16 + v_key_pad) buffer,
  // its padding poisoned with e4m3 NaN, viewed as (batch, seqlen_k, heads_kv, d).
  bool v_keys_contiguous = false;
  int v_key_pad = 0;
  // > 0 (with block_scales): v blocks 1, 4, 7, ... of every (batch, kv head) all zeros, with this v
  // block scale (zero_v_blocks).
  float zero_v_block_scale = 0.0f;
  KernelOptions options;

  std::string describe() const {
    std::ostringstream s;
    s << "b " << batch << " hq " << heads_q << " hkv " << heads_kv << " sq " << seqlen_q << " sk " << seqlen_k
      << " d " << head_dim << (causal ? " causal" : "") << (with_lse ? " lse" : "") << " qamp " << q_amplitude
      << " window (" << window_left << ", " << window_right << ")"
      << (head_scales ? " head-scales" : "");
    if (head_dim_v > 0) s << " dv " << head_dim_v;
    if (attention_chunk > 0) s << " chunk " << attention_chunk;
    if (softcap > 0.0f) s << " softcap " << softcap;
    if (out_pad > 0) s << " out-pad " << out_pad;
    if (block_scales) s << " block-scales " << rows_q << "/" << rows_kv;
    if (num_splits != 0) s << " num_splits " << num_splits;
    if (v_keys_contiguous) s << " v keys-contiguous (key pad " << v_key_pad << ")";
    if (zero_v_block_scale > 0.0f) s << " zero v blocks scaled " << zero_v_block_scale;
    s << " pingpong " << options.pingpong << " overlap " << options.intra_wg_overlap << " persistent "
      << options.persistent;
    return s.str();
  }
};

// A variable-length FP8 batch (cu_seqlens_q / cu_seqlens_k / seqused_k / a paged cache): sequence b
// has lens_q[b] queries and lens_k[b] keys, of which it uses used_k[b] (seqused_k; empty: all of
// them). The k and v rows past the keys in use are e4m3 NaN (0x7f), as a cache's unwritten rows may
// be. dense_q / dense_k pass equal-length q or k/v as (batch, seqlen, heads, d) without cu_seqlens
// instead; page_size > 0 passes k/v as a paged cache of that page size instead (shuffled pages of
// max(lens_k) keys per sequence, spare pages, everything but the keys in use NaN; seqused_k given).
// used_q (seqused_q; empty: all): the queries each sequence uses; its q rows past them are NaN, and
// its out and lse rows there must keep their poison.
struct Fp8VarlenCase {
  std::vector<int> lens_q, lens_k, used_k, used_q;
  bool dense_q = false, dense_k = false;
  int page_size = 0;
  int heads_q = 4, heads_kv = 2, head_dim = 128;
  int head_dim_v = 0;  // v's and out's head dim; 0: head_dim
  bool causal = false, with_lse = true;
  int window_left = -1, window_right = -1;
  int attention_chunk = 0;
  float softcap = 0.0f, q_amplitude = 2.0f;
  bool head_scales = true, block_scales = false;
  int rows_q = 128, rows_kv = 128;
  int num_splits = 0;  // the API's: 0 heuristic (decoding steps split), 1 never, n pieces per tile
  KernelOptions options;

  std::string describe() const {
    const auto list = [](const std::vector<int>& xs) {
      std::ostringstream s;
      for (std::size_t i = 0; i < xs.size(); ++i) s << (i ? "," : "") << xs[i];
      return s.str();
    };
    std::ostringstream s;
    s << "varlen sq {" << list(lens_q) << "} sk {" << list(lens_k) << "}";
    if (!used_k.empty()) s << " seqused_k {" << list(used_k) << "}";
    if (!used_q.empty()) s << " seqused_q {" << list(used_q) << "}";
    if (dense_q) s << " dense q";
    if (dense_k) s << " dense k/v";
    if (page_size > 0) s << " paged " << page_size;
    s << " hq " << heads_q << " hkv " << heads_kv << " d " << head_dim;
    if (head_dim_v > 0) s << " dv " << head_dim_v;
    s << (causal ? " causal" : "")
      << (with_lse ? " lse" : "") << " qamp " << q_amplitude << " window (" << window_left << ", " << window_right
      << ")" << (head_scales ? " head-scales" : "");
    if (attention_chunk > 0) s << " chunk " << attention_chunk;
    if (softcap > 0.0f) s << " softcap " << softcap;
    if (block_scales) s << " block-scales " << rows_q << "/" << rows_kv;
    if (num_splits != 0) s << " num_splits " << num_splits;
    s << " pingpong " << options.pingpong << " overlap " << options.intra_wg_overlap << " persistent "
      << options.persistent << " pack_gqa " << static_cast<int>(options.pack_gqa);
    return s.str();
  }
};

// n e4m3 codes of amplitude * N(0, 1) values drawn from `seed`.
DeviceBuffer random_e4m3(std::int64_t n, std::uint64_t seed, float amplitude);

// n scales drawn uniformly from [lo, hi).
DeviceBuffer random_scales(std::int64_t n, std::mt19937_64& rng, float lo, float hi);

// v block scales in [1/4, 4]: for half of the calls powers of two, as quantize_fp8 writes them (a
// block's v scale equal to the one before leaves O's units exactly as they are), for the other half any
// value (O changes units every block).
DeviceBuffer random_v_block_scales(std::int64_t n, std::mt19937_64& rng);

// v (batch, keys, heads_kv, d, contiguous) copied keys-contiguous into rows of `row_keys` >= keys
// per (batch, head, dim), the rest of each row e4m3 NaN (0x7f): a view that reads past the keys
// sees NaN.
DeviceBuffer keys_contiguous_copy(const DeviceBuffer& v, int batch, int keys, int heads, int d, int row_keys);

// Empty string when the case passes, else why it failed.
std::string run_fp8_case(const Fp8Case& c, std::uint64_t seed);

// Empty string when every sequence of the case matches the oracle, run on that sequence alone (its
// rows of the packed tensors are a dense batch of one), else why not.
std::string run_fp8_varlen_case(const Fp8VarlenCase& c, std::uint64_t seed);

// A random dense case; forced_q / forced_k > 0 fix its query / key count.
Fp8Case random_fp8_case(std::mt19937_64& rng, int forced_q, int forced_k);

// A random variable-length case (paged one time in four).
Fp8VarlenCase random_fp8_varlen_case(std::mt19937_64& rng);

inline std::string run_case(const Fp8Case& c, std::uint64_t seed) { return run_fp8_case(c, seed); }
inline std::string run_case(const Fp8VarlenCase& c, std::uint64_t seed) { return run_fp8_varlen_case(c, seed); }

// Runs each case (seeded from `seed` and its index) and reports every one that misses the oracle.
template <class Case>
void expect_cases_match_oracle(const std::vector<Case>& cases, std::uint64_t seed) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string why = run_case(cases[i], splitmix64(seed + i));
    EXPECT_TRUE(why.empty()) << cases[i].describe() << " (HOPATTN_TEST_SEED=" << seed << ")\n  " << why;
  }
}

// A sweep of `count` random cases, make_case(i) the i-th: each one that misses the oracle is reported,
// up to 10 (then the sweep stops), and a summary line printed.
template <class MakeCase>
void expect_random_cases_match_oracle(int count, std::uint64_t seed, MakeCase make_case) {
  std::cout << "[ seed     ] HOPATTN_TEST_SEED=" << seed << std::endl;
  int passed = 0, failed = 0;
  for (int i = 0; i < count && failed < 10; ++i) {
    const auto c = make_case(i);
    const std::string why = run_case(c, splitmix64(seed + i));
    if (why.empty()) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << "case " << i << " (HOPATTN_TEST_SEED=" << seed << "): " << c.describe() << "\n  " << why;
    }
  }
  std::cout << "[ sweep    ] passed " << passed << ", failed " << failed << std::endl;
}

// The fixture of every FP8 forward test, one class for all of the suite's files (gtest requires it).
class Fp8Forward : public HopperTest {};

}  // namespace hopattn::test
