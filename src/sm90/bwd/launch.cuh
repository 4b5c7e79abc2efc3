// launch_backward<kHeadDim, Element>: the three kernels of one backward call, stream-ordered on the
// caller's stream: row statistics (row_stats.cuh), the main kernel (kernel.cuh) adding dQ into a
// zeroed float32 workspace, and the conversion of that workspace into dq (dq_convert.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "api/problem.hpp"
#include "sm90/bwd/dq_convert.cuh"
#include "sm90/bwd/kernel.cuh"
#include "sm90/bwd/launch.hpp"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/row_stats.cuh"
#include "sm90/bwd/traits.cuh"
#include "sm90/host/device_guard.hpp"
#include "sm90/host/launch_support.hpp"
#include "sm90/host/split_workspace.hpp"
#include "sm90/host/tensor_map.hpp"

namespace hopattn::sm90 {

inline BwdParams make_bwd_params(const BwdArgs& a, const detail::Problem& pr, int block_m) {
  BwdParams p{};
  p.batch = pr.batch;
  p.heads_q = pr.heads_q;
  p.heads_kv = pr.heads_kv;
  p.head_ratio = pr.heads_q / pr.heads_kv;
  p.seqlen_q = pr.seqlen_q;
  p.seqlen_k = pr.seqlen_k;
  p.num_m_blocks = (pr.seqlen_q + block_m - 1) / block_m;
  p.seqlen_q_padded = p.num_m_blocks * block_m;
  constexpr float kLog2e = 1.4426950408889634f;
  p.softcap = pr.softcap;
  p.softcap_input_scale = pr.softcap > 0.0f ? pr.softmax_scale / pr.softcap : 0.0f;
  p.score_scale_log2 = (pr.softcap > 0.0f ? pr.softcap : pr.softmax_scale) * kLog2e;
  p.softmax_scale = pr.softmax_scale;
  p.window_left = pr.window_left;
  p.window_right = pr.window_right;
  p.out = a.out.data;
  p.out_batch_stride = a.out.stride[0], p.out_row_stride = a.out.stride[1], p.out_head_stride = a.out.stride[2];
  p.dout = a.dout.data;
  p.dout_batch_stride = a.dout.stride[0], p.dout_row_stride = a.dout.stride[1], p.dout_head_stride = a.dout.stride[2];
  p.lse = static_cast<const float*>(a.lse.data);
  p.lse_batch_stride = a.lse.stride[0], p.lse_head_stride = a.lse.stride[1], p.lse_row_stride = a.lse.stride[2];
  p.dq = a.dq.data;
  p.dq_batch_stride = a.dq.stride[0], p.dq_row_stride = a.dq.stride[1], p.dq_head_stride = a.dq.stride[2];
  p.dk = a.dk.data;
  p.dk_batch_stride = a.dk.stride[0], p.dk_row_stride = a.dk.stride[1], p.dk_head_stride = a.dk.stride[2];
  p.dv = a.dv.data;
  p.dv_batch_stride = a.dv.stride[0], p.dv_row_stride = a.dv.stride[1], p.dv_head_stride = a.dv.stride[2];
  return p;
}

template <int kHeadDim, typename Element>
Status launch_backward(const BwdArgs& args, const detail::Problem& pr) {
  using Traits = BwdTraits<kHeadDim, Element>;
  const CUtensorMapDataType dtype =
      Traits::kIsBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap tm_q, tm_k, tm_v, tm_dout;
  if (Status st = make_tensor_map(&tm_q, bshd_view(args.q, dtype), Traits::kColsPerBlock, Traits::kBlockM); !st.ok())
    return st;
  if (Status st = make_tensor_map(&tm_dout, bshd_view(args.dout, dtype), Traits::kColsPerBlock, Traits::kBlockM);
      !st.ok())
    return st;
  if (Status st = make_tensor_map(&tm_k, bshd_view(args.k, dtype), Traits::kColsPerBlock, Traits::kBlockN); !st.ok())
    return st;
  if (Status st = make_tensor_map(&tm_v, bshd_view(args.v, dtype), Traits::kColsPerBlock, Traits::kBlockN); !st.ok())
    return st;

  DeviceGuard device(pr.device_index);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  BwdParams p = make_bwd_params(args, pr, Traits::kBlockM);
  const std::size_t rows = std::size_t(p.batch) * p.heads_q * p.seqlen_q_padded;
  const std::size_t dq_bytes = rows * kHeadDim * sizeof(float);
  void* workspace = nullptr;
  if (Status st = acquire_split_workspace(pr.device_index, dq_bytes + 2 * rows * sizeof(float), stream, &workspace);
      !st.ok())
    return st;
  p.dq_accum = static_cast<float*>(workspace);
  p.row_stats = p.dq_accum + rows * kHeadDim;
  // The row statistics as a float32 matrix of one row per (batch, head, q block): lse_log2 then D.
  CUtensorMap tm_row_stats;
  const std::int64_t stats_blocks = std::int64_t(p.batch) * p.heads_q * p.num_m_blocks, stats_cols = 2 * Traits::kBlockM;
  const BshdView stats_view{p.row_stats, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 1, stats_blocks, 1, stats_cols,
                            stats_blocks * stats_cols, stats_cols, stats_blocks * stats_cols};
  Status launched = make_tensor_map(&tm_row_stats, stats_view, stats_cols, 1, CU_TENSOR_MAP_SWIZZLE_NONE);

  auto main_kernel = attention_backward_kernel<Traits>;
  if (launched.ok())
    launched = cuda_status(
        cudaFuncSetAttribute(main_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSharedBytes),
        "raising the backward kernel's shared-memory limit");
  if (launched.ok()) launched = cuda_status(cudaMemsetAsync(p.dq_accum, 0, dq_bytes, stream), "zeroing the dq workspace");
  if (launched.ok()) {
    const dim3 grid((p.seqlen_q_padded + kRowStatsWarps - 1) / kRowStatsWarps, p.heads_q, p.batch);
    backward_row_stats_kernel<Element, kHeadDim><<<grid, kRowStatsWarps * 32, 0, stream>>>(p);
    launched = cuda_status(cudaGetLastError(), "launching the backward row statistics");
  }
  if (launched.ok()) {
    const dim3 grid((p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN, p.heads_kv, p.batch);
    main_kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(tm_q, tm_k, tm_v, tm_dout, tm_row_stats, p);
    launched = cuda_status(cudaGetLastError(), "launching the backward kernel");
  }
  if (launched.ok()) {
    const dim3 grid(p.num_m_blocks, p.heads_q, p.batch);
    backward_dq_convert_kernel<Traits><<<grid, kDqConvertThreads, 0, stream>>>(p);
    launched = cuda_status(cudaGetLastError(), "launching the backward dq conversion");
  }
  Status released = release_split_workspace(workspace, stream);
  return launched.ok() ? released : launched;
}

}  // namespace hopattn::sm90
