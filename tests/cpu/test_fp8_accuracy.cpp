// The FP8 accuracy study (docs/fp8-accuracy.md) on batch 1, 2 heads, seqlen 1024, d 128, fresh inputs
// every run (the seed is printed). Over seeds the ratios vary (docs/fp8-accuracy.md: FP8 standard / FP8
// block + incoherent 2.5x - 3.2x, FP8 per-tensor / block + incoherent 1.5x - 2.3x); the asserted margins
// sit below the worst seed seen, so the test is not flaky, and well above 1, so a lost technique fails it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "reference/fp8_accuracy.hpp"

namespace {

using hopattn::reference::AccuracyTable;

TEST(Fp8Accuracy, Table3Ratios) {
  const std::uint64_t seed = std::random_device{}();
  const AccuracyTable t = hopattn::reference::fp8_accuracy_study({}, seed);
  std::printf("seed %llu\n%s", static_cast<unsigned long long>(seed), hopattn::reference::format_table(t).c_str());
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

}  // namespace
