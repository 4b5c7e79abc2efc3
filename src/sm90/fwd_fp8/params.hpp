// Parameters of the FP8 forward kernel: the shared FwdParams plus the descale factors.
#pragma once

#include <cstdint>

#include "sm90/fwd/params.hpp"

namespace hopattn::sm90 {

// A float32 descale tensor of (batch, heads[, blocks]); data == nullptr means "absent" (factor 1).
struct DescaleView {
  const float* data;
  std::int64_t batch_stride, head_stride, block_stride;
  int rows_per_block;  // per-block views: sequence rows per entry; 0 for per-head views

#ifdef __CUDACC__  // the host code (params_builder.hpp, CPU tests) only fills the view
  __device__ __forceinline__ float at(int b, int h, int block = 0) const {
    return data == nullptr ? 1.0f : __ldg(data + b * batch_stride + h * head_stride + block * block_stride);
  }
#endif
};

struct DescaleGroupPlan;  // descale_plan.cuh

struct Fp8FwdParams {
  FwdParams base;  // shapes, scale_log2 / logit_scale, causal, out (bf16), lse, schedule
  // Per (batch, kv head), flash-attention's convention (q's factor too is indexed by kv head).
  DescaleView q_descale, k_descale, v_descale;
  // Per (batch, head, block of rows): q by q head, k and v by kv head.
  DescaleView q_block_descale, k_block_descale, v_block_descale;
  // Descale groups (Fp8FwdTraits::kDescaleGroupKeys keys: a K block or a part of one) per k / v descale
  // entry (descale_block_rows_kv / kDescaleGroupKeys; the launch refuses other multiples): the
  // consumer's index per group is one multiply-high and shift.
  FastDivisor kv_groups_per_descale;
  // The grouped kernels' per-block descale plan (descale_plan.cuh), (batch, heads_kv,
  // descale_plan_blocks) entries, in scratch memory of the launch; null for every other kernel.
  const DescaleGroupPlan* descale_plan;
  int descale_plan_blocks;
  // Where V^T comes from global memory and K's layout allows (host/tensor_map.hpp,
  // permuted_block_map_applies): K blocks per batch in the permuted map's last dimension,
  // seqlen_k / 16, and each permuted K block is one box; 0: two boxes per 16-key group.
  int k_groups_per_batch;
};

}  // namespace hopattn::sm90
