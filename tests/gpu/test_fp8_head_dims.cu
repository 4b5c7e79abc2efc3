// FP8 head dims other than the kernels' widths (64, 128, 256), and v with a head dim of its own, against
// the FP8 oracle: the kernel of the width that holds the wider of q's and v's head dims runs them, its
// TMA loads zero-filling the columns past each (q and k past d, v past dv) and its stores (TMA and
// register) leaving out's columns past dv alone. The random sweeps of test_fp8_forward*.cu draw such
// dims one case in four; here every one runs, every time: dense cases (causal, GQA, odd lengths, one
// query row, block descales, out rows followed by poisoned padding, v keys-contiguous, the tail split),
// a variable-length batch, a paged cache and a decoding step (GQA packed, split).
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/fp8_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

struct HeadDims {
  int d, dv;  // dv 0: v has q's head dim
};

// Either side of the 64, 128 and 192 widths, the smallest, 192 itself and 240; then v of its own width:
// DeepSeek's 192 / 128 and 160 / 64 (the 192-wide kernel with 128-wide V and O tiles), narrower and
// wider than q's in one kernel, and across kernels.
const HeadDims kDims[] = {{16, 0},   {48, 0},    {96, 0},   {112, 0},  {144, 0},   {192, 0},  {240, 0},
                          {192, 128}, {160, 64}, {128, 64}, {64, 128}, {96, 160}, {256, 32}};

std::string dims_name(const ::testing::TestParamInfo<HeadDims>& info) {
  return "d" + std::to_string(info.param.d) + (info.param.dv > 0 ? "_dv" + std::to_string(info.param.dv) : "");
}

class Fp8HeadDims : public Fp8Forward, public ::testing::WithParamInterface<HeadDims> {};

Fp8Case dense(const HeadDims& dims, int b, int hq, int hkv, int sq, int sk) {
  Fp8Case c;
  c.head_dim = dims.d, c.head_dim_v = dims.dv;
  c.batch = b, c.heads_q = hq, c.heads_kv = hkv, c.seqlen_q = sq, c.seqlen_k = sk;
  c.head_scales = true, c.q_amplitude = 2.0f;
  return c;
}

TEST_P(Fp8HeadDims, DenseCasesMatchTheOracle) {
  const HeadDims dims = GetParam();
  std::vector<Fp8Case> cases;
  Fp8Case c = dense(dims, 2, 4, 2, 77, 300);
  c.causal = true;
  cases.push_back(c);
  c = dense(dims, 1, 8, 2, 300, 77);  // causal with rows that see no key
  c.causal = true, c.out_pad = 16;
  cases.push_back(c);
  c = dense(dims, 3, 8, 2, 1, 129);  // one query row
  cases.push_back(c);
  c = dense(dims, 2, 4, 1, 200, 333);  // block descales
  c.block_scales = true, c.rows_q = 64, c.rows_kv = 128, c.q_amplitude = 4.0f;
  cases.push_back(c);
  c = dense(dims, 1, 2, 1, 150, 517);  // V^T in memory
  c.v_keys_contiguous = true, c.v_key_pad = 16, c.window_left = 100, c.window_right = 20;
  cases.push_back(c);
  c = dense(dims, 1, 3, 1, 64, 4100);  // the tail split's pieces merged (up to 128 wide)
  c.num_splits = 4;
  cases.push_back(c);
  c = dense(dims, 1, 2, 2, 333, 333);  // softcap, every switch off
  c.softcap = 5.0f, c.options.pingpong = false, c.options.intra_wg_overlap = false;
  cases.push_back(c);
  expect_cases_match_oracle(cases, run_seed());
}

TEST_P(Fp8HeadDims, VarlenPagedAndDecodingMatchTheOracle) {
  const HeadDims dims = GetParam();
  const bool packs = std::max(dims.d, dims.dv) <= 128;  // the GQA-packing kernels are up to 128 wide
  std::vector<Fp8VarlenCase> cases;
  Fp8VarlenCase c;
  c.head_dim = dims.d, c.head_dim_v = dims.dv;
  c.lens_q = {1, 127, 129, 0, 300}, c.lens_k = {300, 1, 129, 65, 77}, c.used_k = {257, 1, 129, 0, 70};
  c.causal = true;
  cases.push_back(c);
  c.used_k = {};
  c.lens_q = {33, 1, 200}, c.lens_k = {500, 1000, 64}, c.page_size = 64, c.causal = false;  // a paged cache
  c.block_scales = true, c.rows_q = 64, c.rows_kv = 128;
  cases.push_back(c);
  c.lens_q = {1, 1, 1, 1}, c.lens_k = {2000, 17, 700, 4096}, c.page_size = 16, c.block_scales = false;  // decoding
  c.heads_q = 8, c.heads_kv = 2, c.num_splits = 3;
  if (packs) c.options.pack_gqa = KernelOptions::PackGqa::kOn;
  cases.push_back(c);
  expect_cases_match_oracle(cases, run_seed());
}

INSTANTIATE_TEST_SUITE_P(Padded, Fp8HeadDims, ::testing::ValuesIn(kDims), dims_name);

}  // namespace
}  // namespace hopattn::test
