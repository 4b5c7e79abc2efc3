// Epilogue of one consumer warpgroup: normalize O by the row sums, store it as 16-bit pairs straight
// from the accumulator registers, and store LSE (natural log). Rows past seqlen_q are dropped; a row
// that saw no key stores 0 and LSE -inf.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/tile/fragment.hpp"

namespace hopattn::sm90 {

// Stores a warpgroup's 64 rows: O scaled per row by out_scale as 16-bit pairs straight from the
// accumulator registers, and LSE; rows past seqlen_q are dropped. Shared by the 16-bit and FP8 kernels.
template <bool kBf16, typename Element, int kORegisters>
__device__ __forceinline__ void store_rows(const FwdParams& p, const TileCoord& c, int row0, int thread,
                                           const float (&o)[kORegisters], const float (&out_scale)[2],
                                           const float (&lse)[2]) {
  Element* out = static_cast<Element*>(p.out) + c.batch * p.out_batch_stride + c.head * p.out_head_stride;
#pragma unroll
  for (int i = 0; i < kORegisters; i += 2) {
    const int r = fragment_row_half(i);
    const int row = row0 + accumulator_row(thread, i);
    if (row < p.seqlen_q) {
      *reinterpret_cast<std::uint32_t*>(out + row * p.out_row_stride + accumulator_col(thread, i)) =
          pack_pair<kBf16>(o[i] * out_scale[r], o[i + 1] * out_scale[r]);
    }
  }
  if (p.lse != nullptr && thread % 4 == 0) {
    float* lse_base = p.lse + c.batch * p.lse_batch_stride + c.head * p.lse_head_stride;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + accumulator_row(thread, 2 * r);
      if (row < p.seqlen_q) lse_base[row * p.lse_row_stride] = lse[r];
    }
  }
}

template <class Traits>
__device__ __forceinline__ void store_output(const FwdParams& p, const TileCoord& c, int row0, int thread,
                                             float (&o)[Traits::kORegisters],
                                             OnlineSoftmax<Traits::kSRegisters>& softmax) {
  float inv_sum[2];
  float lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(softmax.row_sum[r]);
    const bool empty = sum == 0.0f;
    inv_sum[r] = empty ? 0.0f : 1.0f / sum;
    lse[r] = empty ? -INFINITY : softmax.row_max[r] * p.logit_scale + logf(sum);
  }
  store_rows<Traits::kIsBf16, typename Traits::Element>(p, c, row0, thread, o, inv_sum, lse);
}

}  // namespace hopattn::sm90
