// The FP8 accuracy study (docs/fp8-accuracy.md) on batch 1, 2 heads, seqlen 1024, d 128, over kDraws
// fresh inputs every run (the seeds are printed), each row's RMSE pooled over the draws. One draw's
// ratios vary widely (FP8 standard / FP8 block + incoherent 2.15x - 3.9x over 112 draws, session 28,
// when a one-draw run had failed once locally); pooled over three, the lowest of 37 groups was 2.38x.
// The asserted margins sit below that, so the test is not flaky, and well above 1, so a lost technique
// fails it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "reference/fp8_accuracy.hpp"

namespace {

using hopattn::reference::AccuracyTable;

constexpr int kDraws = 3;

// Each row's RMSE over all kDraws draws: the root of the mean of their squares (equal element counts).
AccuracyTable pooled_study(std::uint64_t seed, const hopattn::reference::AccuracyShape& shape = {}) {
  double AccuracyTable::*const rows[] = {&AccuracyTable::fp16_flash,     &AccuracyTable::bf16_flash,
                                         &AccuracyTable::fp16_standard,  &AccuracyTable::fp8_standard,
                                         &AccuracyTable::fp8_per_tensor, &AccuracyTable::fp8_block,
                                         &AccuracyTable::fp8_incoherent, &AccuracyTable::fp8_block_incoherent};
  AccuracyTable pooled;
  for (int draw = 0; draw < kDraws; ++draw) {
    const AccuracyTable t = hopattn::reference::fp8_accuracy_study(shape, seed + draw);
    std::printf("seed %llu\n%s", static_cast<unsigned long long>(seed + draw),
                hopattn::reference::format_table(t).c_str());
    for (double AccuracyTable::*row : rows) pooled.*row += t.*row * t.*row / kDraws;
  }
  for (double AccuracyTable::*row : rows) pooled.*row = std::sqrt(pooled.*row);
  std::printf("pooled over %d draws\n%s", kDraws, hopattn::reference::format_table(pooled).c_str());
  return pooled;
}

TEST(Fp8Accuracy, Table3Ratios) {
  const AccuracyTable t = pooled_study(std::random_device{}());
  for (double e : {t.fp16_flash, t.bf16_flash, t.fp16_standard, t.fp8_standard, t.fp8_per_tensor, t.fp8_block,
                   t.fp8_incoherent, t.fp8_block_incoherent}) {
    ASSERT_TRUE(std::isfinite(e) && e > 0.0) << e;
  }
  // Flash-style FP16 (float32 softmax, P rounded once) against fully materialized FP16.
  EXPECT_LE(t.fp16_flash, 0.6 * t.fp16_standard);
  // Block quantization + incoherent processing against the paper's per-tensor FP8 baseline (paper: 2.6x).
  EXPECT_LE(t.fp8_block_incoherent * 2.0, t.fp8_standard);
  // ... and against the same flash-style kernel with per-tensor scales only.
  EXPECT_LE(t.fp8_block_incoherent * 1.25, t.fp8_per_tensor);
  // Incoherent processing is what buys it: without it, block scales alone stay far behind.
  EXPECT_LE(t.fp8_block_incoherent * 1.1, t.fp8_block);
}

// Head dim 192 (DeepSeek's q/k): the transform is block-diagonal there, a 64 x 64 Walsh-Hadamard block
// per 64 columns (quantize.hpp), so each outlier is spread over its block only. Three pooled runs of
// 2026-12-06: block + incoherent 6.9-7.2e-3 against 2.08-2.16e-2 for the paper's baseline (3.0-3.1x),
// 1.11-1.26e-2 per-tensor (1.6-1.8x) and 1.07-1.16e-2 with block scales alone (1.5-1.7x); the margins
// are d 128's.
TEST(Fp8Accuracy, BlockDiagonalTransformAtD192) {
  hopattn::reference::AccuracyShape shape;
  shape.head_dim = 192;
  const AccuracyTable t = pooled_study(std::random_device{}(), shape);
  for (double e : {t.fp8_standard, t.fp8_per_tensor, t.fp8_block, t.fp8_block_incoherent}) {
    ASSERT_TRUE(std::isfinite(e) && e > 0.0) << e;
  }
  EXPECT_LE(t.fp8_block_incoherent * 2.0, t.fp8_standard);
  EXPECT_LE(t.fp8_block_incoherent * 1.25, t.fp8_per_tensor);
  EXPECT_LE(t.fp8_block_incoherent * 1.1, t.fp8_block);
}

}  // namespace
