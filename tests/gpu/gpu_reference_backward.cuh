// A deliberately simple float32 attention backward on the GPU: the yardstick the sm_90a backward is
// measured against. Same semantics as the CPU reference (src/reference/backward.cpp): P is recomputed
// from q and k (not from an LSE), masks and softcap as in the forward, a kv head's dk/dv sum over the
// q heads that read it, and a gradient no query or key reaches is 0.
//
// Two kernels, no atomics: one block per (query row, head, batch) computes the row's P and dS, writes
// them to a (batch, heads_q, seqlen_q, seqlen_k) scratch and forms dq; then one block per (key,
// kv head, batch) sums dk and dv over the group's q heads and rows. Meant for small problems: the
// scratch takes 16 bytes per (batch, head, query, key).
#pragma once

#include <cuda_runtime.h>

#include "hopattn/hopattn.hpp"

namespace hopattn::test {

// One gradient three ways, each dense float32 on the device with the gradient's logical shape
// (dq like q, dk and dv like k):
//   exact      float32 arithmetic throughout.
//   naive      "naive at the input precision": what exact arithmetic gives when every value the flash
//              backward stores or feeds to the tensor cores in q's dtype is rounded to it, as the
//              kernel does: out (the forward's naive: P rounded before PV, out rounded), which D_i =
//              dout_i . out_i is read from; P before dV += P^T dO; dS before dK += dS^T Q and
//              dQ += dS K; and the gradient itself. Its distance from `exact` is the rounding error the
//              kernel's precision implies.
//   magnitude  the same sums with every term replaced by its absolute value (dP_ij by
//              sum_c |dout_ic v_jc|, D_i by sum_j P_ij |dP|_ij): float32 rounding errors of any way of
//              computing the gradient are a small multiple of 2^-24 times this.
struct GradientBuffers {
  float* exact = nullptr;
  float* naive = nullptr;
  float* magnitude = nullptr;
};

struct GpuReferenceBackwardArgs {
  // CUDA tensors (batch, seqlen, heads, d), any strides, one dtype: float32, float16 or bfloat16.
  // dout has q's shape.
  Tensor q, k, v, dout;
  float softmax_scale = 0.0f;  // already resolved (no default here)
  bool causal = false;         // bottom-right aligned; folds into window_right = 0
  int window_left = -1;        // -1 = unbounded
  int window_right = -1;
  int attention_chunk = 0;     // 0 = off; else only keys in the chunk of the row's diagonal
  float softcap = 0.0f;  // 0 = off; else s -> softcap * tanh(s / softcap)

  GradientBuffers dq, dk, dv;  // every pointer required

  cudaStream_t stream = nullptr;
};

// Launches the reference on args.stream (its scratch is allocated and freed in stream order);
// kInvalidArgument for malformed arguments, kCudaError if an allocation or launch fails.
Status gpu_reference_backward(const GpuReferenceBackwardArgs& args);

}  // namespace hopattn::test
