// The FP8 transposed decoding loop (fwd_fp8/transposed_decode.cuh) against the FP8 oracle
// (fp8_case.cuh): the shapes of transposed_decode_shapes.cuh, and small ones for compute-sanitizer.
#include <cstdint>
#include <vector>

#include "gpu/fp8_case.cuh"
#include "gpu/gpu_test_util.cuh"
#include "gpu/transposed_decode_shapes.cuh"

namespace hopattn::test {
namespace {

// One decoding case of a transposed_decode_shapes.cuh shape: caches of 1 key to several blocks with
// ragged ends (2500 keys take 192-key blocks but when paged, block-scaled or softcapped); the case's
// index picks whether it is causal, windowed, softcapped or paged.
Fp8VarlenCase decoding_case(const TransposedDecodeShape& shape, int d, int num_splits, int index) {
  Fp8VarlenCase c;
  c.head_dim = d, c.heads_q = shape.heads_q, c.heads_kv = shape.heads_kv, c.lens_q = shape.len_q;
  c.lens_k = {2500, 1, 193, 1100}, c.used_k = {2499, 1, 193, 1000};
  c.options.pack_gqa = shape.pack;
  c.num_splits = num_splits;
  c.q_amplitude = 4.0f;
  c.causal = index % 3 == 0;
  if (index % 4 == 1) c.window_left = 300, c.window_right = 0;
  if (index % 5 == 3) c.softcap = 15.0f;
  if (index % 7 == 4) c.page_size = index % 2 == 0 ? 16 : 256;
  return c;
}

// Tiles of at most 8 live rows run transposed in the d 64 decoding kernels
// (fwd_fp8/transposed_decode.cuh), tiles of 9 or more the ordinary loop; d 128 runs the same shapes
// through the ordinary loop alone. Batches with tiles of exactly 8 and 9 rows side by side
// (transposed_decode_shapes.cuh, the 16-bit suite's too), split or not, causal, windowed, softcapped,
// per-block k/v scales (whose v scale changes between a tile's blocks), paged, and the schedules
// without overlap or ping-pong.
TEST_F(Fp8Forward, TransposedDecodeCornerCases) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  int index = 0;
  for (const TransposedDecodeShape& shape : transposed_decode_shapes()) {
    for (const int d : {64, 128}) {
      for (const int num_splits : {0, 3}) {
        Fp8VarlenCase c = decoding_case(shape, d, num_splits, index);
        if (index % 6 == 2) c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
        if (index % 8 == 5) c.options.intra_wg_overlap = false;
        if (index % 8 == 6) c.options.pingpong = false;
        cases.push_back(c);
        ++index;
      }
    }
  }
  expect_cases_match_oracle(cases, seed);
}

// Decoding steps at the wide head dims (160-256) in the d 256 decoding kernel, every tile transposed
// (wide_decode_shapes: at most 8 live rows a tile, packed or not; 9 rows take the ordinary kernel),
// split by the heuristic or in 3, draft rows causal; block scales (unpacked: q's are per query head;
// 64-key blocks), those of 96 k/v rows (the ordinary kernel's 96-key blocks) beside them, a dense step
// and DeepSeek's 192 / 128.
TEST_F(Fp8Forward, WideDecodeCornerCases) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  int index = 0;
  for (const TransposedDecodeShape& shape : wide_decode_shapes()) {
    for (const int d : {256, 192, 160}) {
      for (const int num_splits : {0, 3}) {
        Fp8VarlenCase c = decoding_case(shape, d, num_splits, index);
        c.causal = c.causal || shape.len_q[0] > 1;
        if (index % 9 == 2 && shape.pack != KernelOptions::PackGqa::kOn)
          c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
        cases.push_back(c);
        ++index;
      }
    }
  }
  for (const int rows_kv : {192, 96}) {
    Fp8VarlenCase c = decoding_case(wide_decode_shapes()[0], 256, 0, 1);
    c.block_scales = true, c.rows_q = 64, c.rows_kv = rows_kv;
    cases.push_back(c);
  }
  Fp8VarlenCase dense;  // a dense step (q and k/v as batches), 16/8 heads
  dense.head_dim = 256, dense.heads_q = 16, dense.heads_kv = 8, dense.lens_q = {1, 1, 1};
  dense.lens_k = {3000, 3000, 3000}, dense.dense_q = dense.dense_k = true;
  cases.push_back(dense);
  Fp8VarlenCase v128 = dense;  // DeepSeek's 192 / 128, in the 256-wide kernel
  v128.head_dim = 192, v128.head_dim_v = 128, v128.heads_q = 8, v128.heads_kv = 8, v128.lens_k = {700, 1, 2000};
  v128.dense_q = v128.dense_k = false;
  cases.push_back(v128);
  expect_cases_match_oracle(cases, seed);
}

// The transposed loop on small shapes, for compute-sanitizer (scripts/device_tests.sh): tiles of 8
// live rows and of 1, split and not, a softcap, block scales, a page size, 192-key blocks (2100 keys);
// d 128 (the ordinary loop) beside them, and d 256 (the decoding kernel, but with block scales).
TEST_F(Fp8Forward, TransposedDecodeSmall) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  for (const int d : {64, 128, 256}) {
    Fp8VarlenCase c;
    c.head_dim = d, c.heads_q = 8, c.heads_kv = 1, c.lens_q = {1, 1}, c.lens_k = {300, 5}, c.num_splits = 2;
    cases.push_back(c);
    c.heads_kv = 8, c.num_splits = 1, c.softcap = 5.0f, c.causal = true;  // MHA: one live row a tile
    cases.push_back(c);
    c.softcap = 0.0f, c.block_scales = true, c.rows_q = 64, c.rows_kv = 128, c.page_size = d == 64 ? 16 : 0;
    cases.push_back(c);
    c.heads_kv = 2, c.block_scales = false, c.page_size = 0, c.lens_k = {2100, 40}, c.num_splits = 0;
    cases.push_back(c);
  }
  expect_cases_match_oracle(cases, seed);
}

}  // namespace
}  // namespace hopattn::test
