// Merges the MLA forward's split partials (mla_partial_index, mla/tile.cuh) into out and LSE:
// one warp per packed row, each lane 16 of the 512 columns. Launched as a programmatic dependent of
// the forward kernel (launch_dependent_kernel): it is resident before that grid ends and waits for it
// (griddepcontrol.wait) only before reading the partials. Split s of a row weighs
// exp(lse_s - max_s lse_s); a split that saw no key has lse -inf and weighs 0, and a row no split saw
// stores 0 and LSE -inf.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/mla/params.hpp"
#include "sm90/mla/tile.cuh"

namespace hopattn::sm90 {

constexpr int kMlaCombineWarps = 4;

template <class Traits>
__global__ void __launch_bounds__(kMlaCombineWarps * 32)
    mla_combine_kernel(const __grid_constant__ MlaParams p) {
  constexpr int kColumnsPerLane = Traits::kHeadDimV / 32;
  allow_dependent_launch();  // the caller's next kernel may launch: it waits for this grid
  const int lane = threadIdx.x % 32;
  const int packed_row_index = blockIdx.x * kMlaCombineWarps + threadIdx.x / 32;  // over every tile's rows
  const int tile = packed_row_index / Traits::kBlockM, tile_row = packed_row_index % Traits::kBlockM;
  const int m_block = tile % p.m_blocks, kv_head = tile / p.m_blocks % p.heads_kv, batch = tile / p.m_blocks / p.heads_kv;
  if (batch >= p.batch) return;
  const MlaRow row = mla_packed_row(p, kv_head, m_block * Traits::kBlockM + tile_row);
  if (!row.live) return;
  const auto partial = [&](int split) { return mla_partial_index(p, tile, split, Traits::kBlockM, tile_row); };

  wait_for_primary_grid();
  float max_lse = -INFINITY;
  for (int s = lane; s < p.splits; s += 32) max_lse = fmaxf(max_lse, p.partial_lse[partial(s)]);
#pragma unroll
  for (int w = 16; w > 0; w /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, w));

  // The weights 32 splits at a time, one a lane (shuffled out in turn), and the partials' loads
  // unrolled so that several splits' rows are in flight: one split after another, each load waiting for
  // the last, a 32- or 64-split row took most of a batch-1 step (perf-notes v139).
  float acc[kColumnsPerLane] = {};
  float weight_sum = 0.0f;
  if (max_lse != -INFINITY) {
    for (int base = 0; base < p.splits; base += 32) {
      const int s = base + lane;
      const float weight = s < p.splits ? __expf(p.partial_lse[partial(s)] - max_lse) : 0.0f;
      weight_sum += weight;
      const int count = min(32, p.splits - base);
#pragma unroll 4
      for (int j = 0; j < count; ++j) {
        const float w = __shfl_sync(0xffffffffu, weight, j);
        const float4* src = reinterpret_cast<const float4*>(p.partial_o + partial(base + j) * Traits::kHeadDimV);
#pragma unroll
        for (int c = 0; c < kColumnsPerLane / 4; ++c) {
          const float4 v = src[c * 32 + lane];
          acc[4 * c] += w * v.x, acc[4 * c + 1] += w * v.y, acc[4 * c + 2] += w * v.z, acc[4 * c + 3] += w * v.w;
        }
      }
    }
#pragma unroll
    for (int w = 16; w > 0; w /= 2) weight_sum += __shfl_xor_sync(0xffffffffu, weight_sum, w);
  }
  const float inv = weight_sum > 0.0f ? 1.0f / weight_sum : 0.0f;
  using Element = typename Traits::Element;
  Element* out = mla_out_row<Element>(p, batch, row);
#pragma unroll
  for (int j = 0; j < kColumnsPerLane / 4; ++j) {
    const int col = (j * 32 + lane) * 4;
    // 4-byte stores: out's rows need only be 4-byte aligned.
    *reinterpret_cast<std::uint32_t*>(out + col) = pack_pair<Traits::kIsBf16>(acc[4 * j] * inv, acc[4 * j + 1] * inv);
    *reinterpret_cast<std::uint32_t*>(out + col + 2) =
        pack_pair<Traits::kIsBf16>(acc[4 * j + 2] * inv, acc[4 * j + 3] * inv);
  }
  if (lane == 0 && p.lse != nullptr) {
    *mla_lse_entry(p, batch, row) = max_lse == -INFINITY ? -INFINITY : max_lse + logf(weight_sum);
  }
}

}  // namespace hopattn::sm90
