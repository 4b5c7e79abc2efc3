// A deliberately simple float32 attention forward on the GPU: the yardstick the sm_90a kernel is
// measured against. One thread block per (query row, head, batch); two passes over the keys (scores and
// their max, then exp-sum and the weighted sum of V), everything in float32.
#pragma once

#include <cuda_runtime.h>

#include "hopattn/hopattn.hpp"

namespace hopattn::test {

struct GpuReferenceArgs {
  // CUDA tensors (batch, seqlen, heads, d), any strides, all float32, float16 or bfloat16.
  Tensor q, k, v;
  float softmax_scale = 0.0f;  // already resolved (no default here)
  bool causal = false;         // bottom-right aligned; folds into window_right = 0
  int window_left = -1;        // -1 = unbounded
  int window_right = -1;
  int attention_chunk = 0;     // 0 = off; else only keys in the chunk of the row's diagonal
  float softcap = 0.0f;  // 0 = off; else s -> softcap * tanh(s / softcap), before masking

  // Outputs, dense float32 on the device. out (batch, seqlen_q, heads_q, d) is required.
  float* out = nullptr;
  // Optional, same shape: "naive at the input precision": the unnormalized probabilities
  // P = exp(s - rowmax) are rounded to q's dtype before the PV product (as the flash kernels feed P to
  // the tensor cores) and the result is rounded to q's dtype. The row sum uses the unrounded P.
  float* out_naive = nullptr;
  float* lse = nullptr;  // optional (batch, heads_q, seqlen_q), natural log; -inf for a row with no key

  cudaStream_t stream = nullptr;
};

// Launches the reference; kInvalidArgument for malformed arguments, kCudaError if the launch fails.
Status gpu_reference_forward(const GpuReferenceArgs& args);

}  // namespace hopattn::test
