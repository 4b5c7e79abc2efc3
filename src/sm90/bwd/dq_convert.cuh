// The backward's last kernel: dq = softmax_scale * dq_accum, from the float32 workspace the main
// kernel's CTAs added their dS K shares into, to q's dtype in dq's layout.
#pragma once

#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/bwd/params.hpp"

namespace hopattn::sm90 {

constexpr int kDqConvertThreads = 256;

// One thread per pair of columns; blockIdx.y: head, blockIdx.z: batch, rows x pairs over blockIdx.x.
template <bool kBf16, int kHeadDim>
__global__ void __launch_bounds__(kDqConvertThreads) backward_dq_convert_kernel(const BwdParams p) {
  constexpr int kPairs = kHeadDim / 2;
  const int index = blockIdx.x * kDqConvertThreads + threadIdx.x;
  const int row = index / kPairs, col = 2 * (index % kPairs);
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const float2 sum = *reinterpret_cast<const float2*>(
      p.dq_accum + ((std::int64_t(batch) * p.heads_q + head) * p.seqlen_q_padded + row) * kHeadDim + col);
  std::uint16_t* dq = static_cast<std::uint16_t*>(p.dq) + batch * p.dq_batch_stride + row * p.dq_row_stride +
                      head * p.dq_head_stride + col;
  *reinterpret_cast<std::uint32_t*>(dq) = pack_pair<kBf16>(sum.x * p.softmax_scale, sum.y * p.softmax_scale);
}

}  // namespace hopattn::sm90
