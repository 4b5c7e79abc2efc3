// The non-FP8 rows of the FP8 accuracy study (docs/fp8-accuracy.md), emulated on the CPU: exact
// attention in float64, flash-style 16-bit attention, and standard (materialized) FP16 attention.
// All take contiguous (batch, seqlen, heads, d) float inputs whose values the caller has already rounded
// to the input dtype; non-causal; GQA as in fp8_attention.hpp; softmax_scale = 1/sqrt(d).
#pragma once

#include <vector>

#include "hopattn/hopattn.hpp"

namespace hopattn::reference {

struct DenseInputs {
  int batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  std::vector<float> q, k, v;
};

// softmax(q k^T / sqrt(d)) v with every operation in float64.
std::vector<double> attention_f64(const DenseInputs& in);

// FlashAttention-2/3 numerics with 16-bit operands (dtype kFloat16 or kBFloat16): per key tile of
// tile_k keys, S = q.k accumulated in float32 and scaled, online softmax in float32, P = exp(S - m)
// rounded to `dtype` for the P V product (row sum l from the unrounded P), P V accumulated in float32,
// out = O / l rounded to `dtype`.
std::vector<float> flash_attention_16bit(const DenseInputs& in, Dtype dtype, int tile_k = 128);

// Standard attention as three FP16 kernels with every intermediate materialized in FP16 (what
// torch.matmul / softmax / matmul does in half precision):
//   S   = fp16(softmax_scale * (q.k accumulated in float32))   one GEMM, output stored in fp16
//   m   = max_j S_j;  E_j = fp16(exp(fp16(S_j - m)));  l = sum_j E_j in float32
//   P_j = fp16(E_j / l)                                          softmax output stored in fp16
//   out = fp16(P.v accumulated in float32)                      second GEMM, output stored in fp16
std::vector<float> standard_attention_fp16(const DenseInputs& in);

// Root mean square of (x - reference) over all elements; NaN when the sizes differ or are 0.
double rmse(const std::vector<float>& x, const std::vector<double>& reference);

}  // namespace hopattn::reference
