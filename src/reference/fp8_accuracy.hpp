// The FP8 accuracy study of docs/fp8-accuracy.md (FlashAttention-3 paper, Table 3 setup): q, k, v
// entries ~ N(0, 1) + N(0, 100) * Bernoulli(0.001), output RMSE of each attention variant against
// float64 attention of the same 16-bit inputs (fp16 for every row but BF16, which gets bf16 inputs).
#pragma once

#include <cstdint>
#include <string>

namespace hopattn::reference {

struct AccuracyShape {
  int batch = 1, heads = 2, seqlen = 1024, head_dim = 128;  // seqlen_q = seqlen_k, heads_q = heads_kv
  // The block rows: 128 for q; for k and v block_rows_kv, with key tiles of tile_k in the emulation
  // (the kernel's K block: 192 for 192-row k/v scales at head dim 128).
  int block_rows_kv = 128, tile_k = 128;
  bool p_carries_v_ratio = false;  // Fp8AttentionArgs::p_carries_v_ratio (the grouped kernels)
};

struct AccuracyTable {
  double fp16_flash = 0;            // flash_attention_16bit, fp16
  double bf16_flash = 0;            // flash_attention_16bit, bf16
  double fp16_standard = 0;         // standard_attention_fp16
  double fp8_standard = 0;          // kPerTensor, then standard_fp8_attention (the paper's FP8 baseline)
  double fp8_per_tensor = 0;        // quantize_fp8 kPerTensor, then fp8_attention; output rounded to bf16
  double fp8_block = 0;             // kPerBlock (128 rows)
  double fp8_incoherent = 0;        // kPerTensor + hadamard
  double fp8_block_incoherent = 0;  // kPerBlock + hadamard
};

// The table as aligned text, one variant a line.
std::string format_table(const AccuracyTable& table);

// Fresh inputs from `seed`; deterministic for a given seed and standard library.
AccuracyTable fp8_accuracy_study(const AccuracyShape& shape, std::uint64_t seed);

}  // namespace hopattn::reference
