// The query columns of a tile computed transposed: the keys (or head-dim entries) as the wgmma's M and
// the tile's kN query rows as its N (fwd/transposed_tile.cuh with kN = 8: the d 64 decoding tiles;
// mla/narrow_consumer.cuh with kN = 16 or 32). Thread t = 32 w + l of the warpgroup holds, per m64nN
// accumulator, the columns 8 j + 2 (l % 4) + {0, 1} of every 8-column group j (tile/fragment.hpp with
// rows and columns swapped): kN / 4 columns a thread. A column's max or sum is therefore spread over
// the 8 lanes of the same l % 4 and over the 4 warps; the online softmax runs per column.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/sync.cuh"
#include "sm90/fwd/softmax.cuh"  // fast_exp2

namespace hopattn::sm90 {

template <int kN>
struct TransposedColumns {
  static_assert(kN % 8 == 0, "whole 8-column groups");
  static constexpr int kPerThread = kN / 4;
  static constexpr int kWarps = 4;
  static constexpr int kSlotFloats = kWarps * kN;  // reduce's exchange slots

  // The tile column (query row) of a thread's c-th column.
  __device__ static int column(int thread, int c) { return 8 * (c / 2) + 2 * (thread % 4) + c % 2; }

  // values[c] (one per thread and column; thread: its index in the warpgroup) reduced with op over the
  // warpgroup: the 8 lanes of the same l % 4 by shuffles, then the 4 warps through the slots at
  // slot_address (kSlotFloats floats of shared memory), behind the warpgroup's named barrier `barrier`.
  // The caller rewrites the slots only after its next barrier of the warpgroup, which every thread
  // reaches after its reads here.
  template <typename Op>
  __device__ static void reduce(float (&values)[kPerThread], std::uint32_t slot_address, int thread, int barrier,
                                Op op) {
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
#pragma unroll
      for (int offset = 4; offset < 32; offset *= 2) {
        values[c] = op(values[c], __shfl_xor_sync(0xffffffffu, values[c], offset));
      }
    }
    float* slots = static_cast<float*>(__cvta_shared_to_generic(slot_address));
    const int lane = thread % 32, warp = thread / 32;
    if (lane < 4) {  // column(thread, c), with l % 4 = l
#pragma unroll
      for (int c = 0; c < kPerThread; ++c) slots[warp * kN + 8 * (c / 2) + 2 * lane + c % 2] = values[c];
    }
    named_barrier_sync(barrier, kWarps * 32);
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      values[c] = slots[column(thread, c)];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) values[c] = op(values[c], slots[w * kN + column(thread, c)]);
    }
  }
};

// One block of the 16-bit kernels' online softmax over raw scores, per column (as OnlineSoftmax does
// per row): the columns' new running max from the block's, the factor that the column sums (done
// here) and O^T take, and the bias that exponentiates the block's scores, 2^(s scale_log2 + bias).
template <int kCols>
__device__ void step_column_softmax(float (&col_max)[kCols], float (&col_sum)[kCols], const float (&block_max)[kCols],
                                    float scale_log2, float (&factor)[kCols], float (&bias)[kCols]) {
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const float new_max = fmaxf(col_max[c], block_max[c]);
    // A column that has seen no key keeps max -inf; exponentiate against 0 (no -inf - -inf).
    const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
    factor[c] = fast_exp2(col_max[c] * scale_log2 - max_scaled);
    bias[c] = -max_scaled;
    col_max[c] = new_max;
    col_sum[c] *= factor[c];
  }
}

}  // namespace hopattn::sm90
