// CPU emulation of the FP8 forward kernel on tensors written by quantize_fp8, rounding where the kernel
// will round. Per query row, over key tiles of `tile_k` keys (online softmax, float32 throughout):
//   S   = (q8 . k8) accumulated in float32, times q_scale(row block) * k_scale(key block) * softmax_scale
//   m   = running row max;  P = exp(S - m) * 2^8  (P in [0, 256]: the e4m3 range, not just [0, 1], so
//         small probabilities stay normal numbers instead of flushing to e4m3 subnormals or zero)
//   l  += sum of P before rounding;  P8 = P rounded to e4m3 (nearest even)
//   O   = O * exp(m_old - m) + (P8 . v8) * v_scale, the float32 product taken per run of keys that share
//         a v scale (one key tile when block_rows_kv equals tile_k)
//   out = O / l.
// p_carries_v_ratio: as the grouped kernels (fwd_fp8/softmax.cuh, DescaleGroups), whose key tiles span
// several v scales: P8 = e4m3(P * v_scale / tile_v) with tile_v the tile's largest v scale, and
// O += (P8 . v8) * tile_v once a tile (l still sums P unscaled).
// Non-causal, no masking; GQA (q head h reads kv head h / (heads_q / heads_kv)). Host tensors only.
#pragma once

#include <vector>

#include "hopattn/quantize.hpp"

namespace hopattn::reference {

struct Fp8AttentionArgs {
  Tensor q8, k8, v8;                       // e4m3, (batch, seqlen, heads, d) as quantize_fp8 wrote them
  Tensor q_descale, k_descale, v_descale;  // float32 scales, layout given by granularity
  QuantGranularity granularity = QuantGranularity::kPerBlock;
  int block_rows_q = 128, block_rows_kv = 128;
  float softmax_scale = 0.0f;  // 0 = 1/sqrt(d)
  int tile_k = 128;
  bool p_carries_v_ratio = false;
};

// Contiguous float32 (batch, seqlen_q, heads_q, d), unrounded (the kernel then stores it as bf16).
std::vector<float> fp8_attention(const Fp8AttentionArgs& args);

// The FlashAttention-3 paper's FP8 baseline as we read its description ("per-tensor scaling, with matmul
// accumulator in FP32 and intermediate softmax results kept in FP16"): standard attention, not tiled,
// on the same quantized operands:
//   S   = fp16((q8 . k8 accumulated in float32) * q_scale * k_scale * softmax_scale)
//   m   = max_j S_j;  E_j = fp16(exp(fp16(S_j - m)));  l = sum_j E_j in float32;  P_j = fp16(E_j / l)
//   P8  = P rounded to e4m3 as is (P in [0, 1]: entries below 2^-6 land on e4m3's subnormal grid of step 2^-9)
//   out = (P8 . v8 accumulated in float32) * v_scale, float32, unrounded.
// tile_k is unused.
std::vector<float> standard_fp8_attention(const Fp8AttentionArgs& args);

}  // namespace hopattn::reference
