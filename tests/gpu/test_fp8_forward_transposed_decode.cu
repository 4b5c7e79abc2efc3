// The FP8 transposed decoding loop (fwd_fp8/transposed_decode.cuh) against the FP8 oracle
// (fp8_case.cuh): the shapes of transposed_decode_shapes.cuh, and small ones for compute-sanitizer.
#include <cstdint>
#include <vector>

#include "gpu/fp8_case.cuh"
#include "gpu/gpu_test_util.cuh"
#include "gpu/transposed_decode_shapes.cuh"

namespace hopattn::test {
namespace {

// Tiles of at most 8 live rows run transposed in the d 64 decoding kernels
// (fwd_fp8/transposed_decode.cuh), tiles of 9 or more the ordinary loop; d 128 runs the same shapes
// through the ordinary loop alone. Batches with tiles of exactly 8 and 9 rows side by side
// (transposed_decode_shapes.cuh, the 16-bit suite's too), caches of 1 key to several blocks with
// ragged ends (2500 keys take 192-key blocks but when paged, block-scaled or softcapped), split or not,
// causal, windowed, softcapped, per-block k/v scales (whose v scale changes between a tile's blocks),
// paged, and the schedules without overlap or ping-pong.
TEST_F(Fp8Forward, TransposedDecodeCornerCases) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  int index = 0;
  for (const TransposedDecodeShape& shape : transposed_decode_shapes()) {
    for (const int d : {64, 128}) {
      for (const int num_splits : {0, 3}) {
        Fp8VarlenCase c;
        c.head_dim = d, c.heads_q = shape.heads_q, c.heads_kv = shape.heads_kv, c.lens_q = shape.len_q;
        c.lens_k = {2500, 1, 193, 1100}, c.used_k = {2499, 1, 193, 1000};
        c.options.pack_gqa = shape.pack;
        c.num_splits = num_splits;
        c.q_amplitude = 4.0f;
        c.causal = index % 3 == 0;
        if (index % 4 == 1) c.window_left = 300, c.window_right = 0;
        if (index % 5 == 3) c.softcap = 15.0f;
        if (index % 6 == 2) c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
        if (index % 7 == 4) c.page_size = index % 2 == 0 ? 16 : 256;
        if (index % 8 == 5) c.options.intra_wg_overlap = false;
        if (index % 8 == 6) c.options.pingpong = false;
        cases.push_back(c);
        ++index;
      }
    }
  }
  expect_cases_match_oracle(cases, seed);
}

// The transposed loop on small shapes, for compute-sanitizer (scripts/device_tests.sh): tiles of 8
// live rows and of 1, split and not, a softcap, block scales, a page size, 192-key blocks (2100 keys);
// d 128 (the ordinary loop) beside them.
TEST_F(Fp8Forward, TransposedDecodeSmall) {
  const std::uint64_t seed = run_seed();
  std::vector<Fp8VarlenCase> cases;
  for (const int d : {64, 128}) {
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
