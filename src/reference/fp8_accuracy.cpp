#include "reference/fp8_accuracy.hpp"

#include <cuda_fp16.h>

#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "hopattn/quantize.hpp"
#include "reference/fp8_attention.hpp"
#include "reference/fp8_baselines.hpp"
#include "reference/fp8_rounding.hpp"

namespace hopattn::reference {
namespace {

// N(0, 1) + N(0, 100) * Bernoulli(0.001): mostly unit normals, one entry in a thousand an outlier of std 10.
std::vector<double> outlier_normals(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::bernoulli_distribution outlier(0.001);
  std::vector<double> x(n);
  for (double& e : x) {
    e = normal(rng);
    if (outlier(rng)) e += 10.0 * normal(rng);
  }
  return x;
}

DenseInputs rounded(const AccuracyShape& shape, const std::vector<double> (&qkv)[3], Dtype dtype) {
  DenseInputs in;
  in.batch = shape.batch;
  in.seqlen_q = in.seqlen_k = shape.seqlen;
  in.heads_q = in.heads_kv = shape.heads;
  in.head_dim = shape.head_dim;
  std::vector<float>* dst[3] = {&in.q, &in.k, &in.v};
  for (int t = 0; t < 3; ++t) {
    dst[t]->resize(qkv[t].size());
    for (std::size_t i = 0; i < qkv[t].size(); ++i) {
      const float x = static_cast<float>(qkv[t][i]);
      (*dst[t])[i] = dtype == Dtype::kBFloat16 ? to_bf16_rn(x) : to_fp16_rn(x);
    }
  }
  return in;
}

// quantize_fp8 on fp16 host tensors, then `attention` (fp8_attention or standard_fp8_attention), output
// rounded to bf16 (the FP8 kernel's output dtype).
std::vector<float> fp8_row(const DenseInputs& in, const AccuracyShape& shape, QuantGranularity granularity,
                           bool hadamard, std::vector<float> (*attention)(const Fp8AttentionArgs&)) {
  const std::int64_t b = in.batch, s = in.seqlen_q, h = in.heads_q, d = in.head_dim;
  std::vector<__half> half[3];
  std::vector<std::uint8_t> codes[3];
  std::vector<float> scales[3];
  const std::vector<float>* src[3] = {&in.q, &in.k, &in.v};
  const int block_rows[3] = {128, shape.block_rows_kv, shape.block_rows_kv};
  std::int64_t blocks[3];
  for (int t = 0; t < 3; ++t) {
    blocks[t] = scale_blocks(granularity, s, block_rows[t]);
    for (float x : *src[t]) half[t].push_back(__float2half_rn(x));
    codes[t].assign(src[t]->size(), 0);
    scales[t].assign(static_cast<std::size_t>(b * h * blocks[t]), 0.0f);
  }
  QuantizeArgs args;
  Tensor* ins[3] = {&args.q, &args.k, &args.v};
  Tensor* outs[3] = {&args.q8, &args.k8, &args.v8};
  Tensor* descales[3] = {&args.q_descale, &args.k_descale, &args.v_descale};
  for (int t = 0; t < 3; ++t) {
    *ins[t] = make_tensor(half[t].data(), Dtype::kFloat16, {b, s, h, d});
    *outs[t] = make_tensor(codes[t].data(), Dtype::kFloat8E4M3, {b, s, h, d});
    *descales[t] = granularity == QuantGranularity::kPerTensor ? make_tensor(scales[t].data(), Dtype::kFloat32, {1})
                   : granularity == QuantGranularity::kPerHead
                       ? make_tensor(scales[t].data(), Dtype::kFloat32, {b, h})
                       : make_tensor(scales[t].data(), Dtype::kFloat32, {b, h, blocks[t]});
  }
  args.granularity = granularity;
  args.block_rows_q = block_rows[0];
  args.block_rows_kv = shape.block_rows_kv;
  args.hadamard = hadamard;
  args.seed = 0x5eed;
  if (!quantize_fp8(args).ok()) return {};  // the caller's rmse() then fails on the size mismatch

  Fp8AttentionArgs fa;
  fa.q8 = args.q8, fa.k8 = args.k8, fa.v8 = args.v8;
  fa.q_descale = args.q_descale, fa.k_descale = args.k_descale, fa.v_descale = args.v_descale;
  fa.granularity = granularity;
  fa.block_rows_q = block_rows[0];
  fa.block_rows_kv = shape.block_rows_kv;
  fa.tile_k = shape.tile_k;
  fa.p_carries_v_ratio = shape.p_carries_v_ratio;
  std::vector<float> out = attention(fa);
  for (float& x : out) x = to_bf16_rn(x);
  return out;
}

}  // namespace

AccuracyTable fp8_accuracy_study(const AccuracyShape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n = static_cast<std::size_t>(shape.batch) * shape.seqlen * shape.heads * shape.head_dim;
  const std::vector<double> qkv[3] = {outlier_normals(n, rng), outlier_normals(n, rng), outlier_normals(n, rng)};
  const DenseInputs fp16 = rounded(shape, qkv, Dtype::kFloat16);
  const DenseInputs bf16 = rounded(shape, qkv, Dtype::kBFloat16);
  const std::vector<double> exact_fp16 = attention_f64(fp16);
  const std::vector<double> exact_bf16 = attention_f64(bf16);

  AccuracyTable t;
  t.fp16_flash = rmse(flash_attention_16bit(fp16, Dtype::kFloat16), exact_fp16);
  t.bf16_flash = rmse(flash_attention_16bit(bf16, Dtype::kBFloat16), exact_bf16);
  t.fp16_standard = rmse(standard_attention_fp16(fp16), exact_fp16);
  t.fp8_standard = rmse(fp8_row(fp16, shape, QuantGranularity::kPerTensor, false, standard_fp8_attention), exact_fp16);
  t.fp8_per_tensor = rmse(fp8_row(fp16, shape, QuantGranularity::kPerTensor, false, fp8_attention), exact_fp16);
  t.fp8_block = rmse(fp8_row(fp16, shape, QuantGranularity::kPerBlock, false, fp8_attention), exact_fp16);
  t.fp8_incoherent = rmse(fp8_row(fp16, shape, QuantGranularity::kPerTensor, true, fp8_attention), exact_fp16);
  t.fp8_block_incoherent = rmse(fp8_row(fp16, shape, QuantGranularity::kPerBlock, true, fp8_attention), exact_fp16);
  return t;
}

std::string format_table(const AccuracyTable& t) {
  const std::pair<const char*, double> rows[] = {
      {"FP16 flash-style (P fp16, fp32 softmax)", t.fp16_flash},
      {"BF16 flash-style (P bf16, fp32 softmax)", t.bf16_flash},
      {"FP16 standard (S, P, O in fp16)", t.fp16_standard},
      {"FP8 standard, per-tensor (paper baseline)", t.fp8_standard},
      {"FP8 flash-style, per-tensor", t.fp8_per_tensor},
      {"FP8 flash-style, block", t.fp8_block},
      {"FP8 flash-style, per-tensor + incoherent", t.fp8_incoherent},
      {"FP8 flash-style, block + incoherent", t.fp8_block_incoherent},
  };
  std::string text;
  char line[96];
  for (const auto& [name, value] : rows) {
    std::snprintf(line, sizeof line, "  %-44s %.3e\n", name, value);
    text += line;
  }
  return text;
}

}  // namespace hopattn::reference
