// The on-device oracle of the FP8 forward tests (fp8_case.cu runs it for test_fp8_forward*.cu):
// attention in float32 over the e4m3 codes and descales the kernel reads, one block per query row, with
// a bound per output element and a tolerance per LSE row for what the kernel's rounding may move them by.
//
// Tolerance: a bound per output element, computed by the oracle from the same inputs as the sum of
// what each key's rounding can move the output by (the kernel's own arithmetic need not be
// reproduced bit for bit, and is not: it rounds P against a running max, block by block from the last
// key). With p_j the softmax weight of key j, u_j = v_scale_j v_jc and o the exact output:
//  - P rounded to e4m3 (2^8 offset): 2^-4 relative in the normal range, after an f16 step (2^-11):
//    (2^-4 + 2^-11) p_j |u_j|; in the subnormal range 2^-10 absolute of 256: 2^-18 |u_j| / L, where
//    L = sum_j exp(s_j - max) >= 1, times r_j >= 1 where the kernel scales P down by 1 / r_j first
//    (the grouped kernels' v descale groups: r_j = the largest v block scale of key j's aligned
//    192-key block over key j's).
//  - The score itself: the S = Q K^T QGMMA adds the products of each instruction with only ~13-14
//    mantissa bits, truncated (a Hopper FP8 tensor-core property), an error relative to the size of
//    the summed products rather than of the score: 2^-9 sum_c |q_c k_jc| (scaled like the scores; 4x
//    the error ArchFp8Wgmma measured), plus softcap 2^-10 for the kernel's tanh.approx under a
//    softcap. A score off by d moves the output by p_j (u_j - o) d to first order: 2^-9 mag_j p_j |u_j -
//    o|. On peaky rows (q amplitude 4) this is the larger term: an H200 run of 2026-12-02 (HOPATTN_TEST_SEED
//    17340103136352234049) put a two-key row 0.70 off, which a host model of the truncation reproduced
//    to two decimals (perf-notes, session 21).
//  - The bound: min(sum_j b_j, 7 sqrt(sum_j b_j^2)) (rounding errors of many keys add like a random
//    walk) + 3 * 2^-9 |o| (the f16 row sum and the bf16 store) + 1e-5.
// Host models of the kernel put its error at 0.2-0.3 of this bound over 200 seeds of the long-key
// case; a wrong block scale, a dropped key block or a key permutation moves outputs by O(|v|) on peaky
// rows, far past it. The oracle also keeps `emul`, the output with P rounded to e4m3 against the row's
// max, which a failure prints beside the kernel's. LSE does not see the P rounding: |lse - lse_ref| <=
// 2e-3 + 2^-9 max_j mag_j (+ softcap 2^-10), and -inf exactly where a row sees no key.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace hopattn::test {

struct OracleArgs {
  const std::uint8_t *q, *k, *v;                            // contiguous (b, s, h, d) e4m3 codes (v: dv)
  const float *q_head, *k_head, *v_head;                    // (batch, heads_kv) or null
  const float *q_block, *k_block, *v_block;                 // (batch, heads, blocks) or null
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, d, rows_q, rows_kv, blocks_q, blocks_kv;
  int window_left, window_right;  // bottom-right aligned, -1 unbounded (causal: window_right 0)
  float softmax_scale, softcap;   // softcap 0: off
  // Outputs (check_against_oracle allocates them):
  float *ref = nullptr, *emul = nullptr, *lse = nullptr;  // dense (b, sq, hq, dv) and (b, hq, sq)
  float* bound = nullptr;          // dense (b, sq, hq, dv): how far out may be from ref (the header)
  float* lse_tolerance = nullptr;  // (b, hq, sq): what the QGMMA accumulation may move the row's LSE by
  int attention_chunk = 0;  // 0 = off; else only keys in the chunk of the row's diagonal (floor division)
  int dv = 0;               // v's and out's head dim (v (b, sk, hkv, dv), out (b, sq, hq, dv)); 0: d
};

// Runs the oracle on problem `o` (its output pointers are filled here) and compares: empty when
// every output element is within its bound and every LSE row within its tolerance, else why not.
// out_at(i): the kernel's element i in the dense (batch, seqlen_q, heads_q, dv) order; lse_at(r): its
// LSE row r in (batch, heads_q, seqlen_q) order, or empty where the case has no LSE.
std::string check_against_oracle(OracleArgs o, const std::function<double(std::int64_t)>& out_at,
                                 const std::function<float(std::int64_t)>& lse_at);

}  // namespace hopattn::test
