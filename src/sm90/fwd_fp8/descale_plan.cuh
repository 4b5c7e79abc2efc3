// The grouped kernels' descale plan (Fp8FwdTraits::kDescaleGroups > 1: 192-key d 128, 96-key d 256):
// per (batch, kv head, K block), what the consumers' softmax takes from the block's k and v block
// scales (DescaleGroups, softmax.cuh), computed once by a small kernel before the forward instead of
// by every consumer warp for every block of every tile: there the loads, their index arithmetic, three
// MUFU.LG2 and three MUFU.EX2 cost ~45 instructions a block a warp, 5% of the forward's (perf-notes
// v128).
#pragma once

#include <cstdint>

#include "sm90/fwd_fp8/params.hpp"

namespace hopattn::sm90 {

// One block's plan, three 16-byte loads: the groups' k block scales and the block's v scale (its
// groups' largest: O takes this block's P V in it), then per group P's log2 offset (log2 of the
// group's v scale over the block's, in [kMinPOffsetLog2, 0]) and the row-sum weight that undoes it.
struct alignas(16) DescaleGroupPlan {
  float k[3], v_scale;
  float p_log2[3], unused_p;
  float sum_weight[3], unused_w;
};
static_assert(sizeof(DescaleGroupPlan) == 48, "a plan entry is three 16-byte loads");

constexpr float kMinPOffsetLog2 = -64.0f;

// Block n of (batch b, kv head h) at plan[(b * heads_kv + h) * blocks + n]. A group past the last key
// (the last block's) takes the last key's entry: the descales have entries for the keys only, and
// its scores are masked.
template <int kGroups, int kGroupKeys>
__global__ void fp8_descale_group_plan_kernel(const Fp8FwdParams fp, DescaleGroupPlan* plan, int blocks) {
  static_assert(kGroups <= 3, "a plan entry holds three groups");
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long rows = static_cast<long long>(fp.base.batch) * fp.base.heads_kv;
  if (index >= rows * blocks) return;
  const int n = static_cast<int>(index % blocks);
  const int row = static_cast<int>(index / blocks);
  const int b = row / fp.base.heads_kv, h = row % fp.base.heads_kv;
  const int last_group = (fp.base.seqlen_k - 1) / kGroupKeys;
  DescaleGroupPlan entry{};
  float v_log2[kGroups];
  float top = -INFINITY, v_scale = 0.0f;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int group = min(n * kGroups + g, last_group);
    const int e = static_cast<int>(fp.kv_groups_per_descale.divide(static_cast<std::uint32_t>(group)));
    entry.k[g] = fp.k_block_descale.at(b, h, e);
    const float v = fp.v_block_descale.at(b, h, e);
    v_log2[g] = log2f(v);
    top = fmaxf(top, v_log2[g]);
    v_scale = fmaxf(v_scale, v);
  }
  entry.v_scale = v_scale;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    // Exactly 0 for the largest: P <= 256. Floored at kMinPOffsetLog2, which changes no P V term (P
    // <= 2^8 times 2^-19 or less rounds to e4m3 zero either way) and keeps the group's P and its
    // row-sum weight inside float's range (a v scale 2^-120 beside 2^-2 would otherwise flush P to
    // zero and its weight to inf).
    const float offset = fmaxf(v_log2[g] - top, kMinPOffsetLog2);
    entry.p_log2[g] = offset;
    entry.sum_weight[g] = exp2f(-offset);
  }
  plan[index] = entry;
}

}  // namespace hopattn::sm90
