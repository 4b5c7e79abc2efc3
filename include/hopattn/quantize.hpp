// hopattn FP8 pre-pass: quantizes q, k, v (bf16/fp16) to fp8 e4m3 with float32 scales, optionally after
// incoherent processing, as FlashAttention-3's FP8 path does.
//
// Scales. One scale per group of elements, scale = amax(group) / 448, so x / scale fits e4m3 (a group
// whose amax is 0 gets scale 1; no scale is below 2^-126, so 1 / scale stays finite); the code of x is
// x * (1 / scale) rounded to e4m3. The stored descale tensors hold these scales: x ~= code * scale.
// v's block scales (kPerBlock) are amax / 448 rounded up to a power of two (a block's largest element
// then codes within [224, 448]): where the FP8 forward's key block spans several v block scales (k/v
// block rows of 128 at head dim 128 and 256), it scales each key's P by its v scale over the block's
// largest before rounding P to e4m3, and a power-of-two ratio keeps that exact (RMSE -5% there; 0-3%
// more where a key block has one v scale, as the block's largest element is no longer coded exactly:
// docs/fp8-accuracy.md). An all-zero v block gets 2^-40, not 1, so that it is never that largest
// beside blocks of real data (with 1, v block scales of 2^-10, amax ~0.3, beside a zero block lost
// 2-10% RMSE in the emulation, and 2^-17 2.4-5.6x: the other keys' P were scaled down onto e4m3's
// subnormals).
//   kPerTensor  one scale per tensor                          descale shape (1)
//   kPerHead    one scale per (batch, head)                   descale shape (batch, heads)
//   kPerBlock   one scale per block_rows rows of (batch, head) descale shape (batch, heads, ceil(seqlen / block_rows))
// heads is heads_q for q and heads_kv for k and v.
//
// Incoherent processing (hadamard = true). q and k rows (not v) are multiplied by M = H diag(s) / sqrt(d)
// before quantization: H the d x d Walsh-Hadamard matrix, s in {+1, -1}^d drawn from `seed`, the same M
// for every head of q and k. M is orthogonal, so (qM)(kM)^T = qk^T: attention over the quantized tensors
// needs no inverse transform, while outliers are spread over the whole head before they meet the
// quantizer. Needs d a multiple of 16 up to 256; where d is no power of two (96, 192, ...) M is
// block-diagonal, one H diag(s) / sqrt(b) per block of b columns, b the largest power of two dividing d
// (32 at d 96, 64 at d 192): still orthogonal, each outlier spread over its block. The transform runs
// in float32 and gives the same bits on the CPU and the GPU, so host and CUDA tensors give identical
// e4m3 codes and scales.
//
// Host tensors run on the CPU; CUDA tensors on the GPU (one kernel per block; per-tensor and per-head
// scales first reduce amax across blocks). Non-finite inputs: NaN is ignored by amax, an infinity makes
// its group's scale infinite; their codes are then meaningless.
#pragma once

#include <cstdint>

#include "hopattn/hopattn.hpp"

namespace hopattn {

enum class QuantGranularity : int { kPerTensor, kPerHead, kPerBlock };
const char* granularity_name(QuantGranularity granularity);

struct QuantizeArgs {
  // Inputs, all bf16 or all fp16, one device: q (batch, seqlen_q, heads_q, d), k (batch, seqlen_k,
  // heads_kv, d) and v (batch, seqlen_k, heads_kv, d_v), d_v v's own head dim (DeepSeek's q/k 192 with
  // v 128); any strides with a contiguous last dimension.
  Tensor q, k, v;
  // Outputs, fp8 e4m3, shapes of q, k, v; same stride rules. v8 may instead have its keys
  // contiguous (v8.stride[1] == 1: V^T in memory), under FwdArgs::v's rules (CUDA: every other stride
  // a multiple of 16 bytes), so that forward() takes it as it is and the sm_90a FP8 kernel skips its
  // V transpose. The codes and scales are the same in either layout; on the GPU the keys-contiguous
  // v8 is written through shared memory so that its stores stay coalesced.
  Tensor q8, k8, v8;
  // Outputs, float32, shapes given by `granularity` (see above); any strides.
  Tensor q_descale, k_descale, v_descale;

  QuantGranularity granularity = QuantGranularity::kPerBlock;
  int block_rows_q = 128;   // kPerBlock: query rows per scale
  int block_rows_kv = 128;  // kPerBlock: key/value rows per scale

  bool hadamard = false;   // incoherent processing of q and k
  std::uint64_t seed = 0;  // picks the random signs s of M

  void* stream = nullptr;  // cudaStream_t for CUDA tensors
};

Status quantize_fp8(const QuantizeArgs& args);

// Number of scales along the sequence for `seqlen` rows: 1 unless kPerBlock, then ceil(seqlen / block_rows).
std::int64_t scale_blocks(QuantGranularity granularity, std::int64_t seqlen, int block_rows);

}  // namespace hopattn
