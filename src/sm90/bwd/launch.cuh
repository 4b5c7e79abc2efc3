// launch_backward<kHeadDim, Element, kDeterministic, kChunksAndSequsedQ, kHeadDimV>: the three kernels of one
// backward call (five with dsink: sink_grad.cuh's two after the row statistics),
// stream-ordered on the caller's stream: row statistics (row_stats.cuh, which also zeroes the dQ
// workspace), the main kernel (kernel.cuh) adding dQ into that float32 workspace (deterministic kernels:
// in key-block order, through counters zeroed with it; dq_order.cuh), and the conversion of that
// workspace into dq (dq_convert.cuh).
// The grids have the longest sequence's blocks for every sequence (the blocks past a sequence's rows
// leave at once), as the forward's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "api/problem.hpp"
#include "sm90/bwd/cta_dispatch.hpp"
#include "sm90/bwd/dq_convert.cuh"
#include "sm90/bwd/dq_order.cuh"
#include "sm90/bwd/kernel.cuh"
#include "sm90/bwd/launch.hpp"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/params_builder.hpp"
#include "sm90/bwd/row_stats.cuh"
#include "sm90/bwd/sink_grad.cuh"
#include "sm90/bwd/traits.cuh"
#include "sm90/host/device_guard.hpp"
#include "sm90/host/launch_support.hpp"
#include "sm90/host/split_workspace.hpp"
#include "sm90/host/tensor_map.hpp"

namespace hopattn::sm90 {

template <int kHeadDim, typename Element, bool kDeterministic, bool kChunksAndSequsedQ, int kHeadDimV>
Status launch_backward(const BwdArgs& args, const detail::Problem& pr) {
  using Traits = BwdTraits<kHeadDim, Element, kDeterministic, kChunksAndSequsedQ, kHeadDimV>;
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

  // dk and dv, stored by TMA (consumer.cuh, store_gradient_tiles): one box per consumer's 64 keys and 64
  // columns. Validation requires them TMA-addressable, as q, k and v (check_cuda_tensors).
  CUtensorMap tm_dk, tm_dv;
  if (Status st = make_tensor_map(&tm_dk, bshd_view(args.dk, dtype), Traits::kColsPerBlock, Traits::kKeysPerWarpgroup);
      !st.ok())
    return st;
  if (Status st = make_tensor_map(&tm_dv, bshd_view(args.dv, dtype), Traits::kColsPerBlock, Traits::kKeysPerWarpgroup);
      !st.ok())
    return st;

  DeviceGuard device(pr.device_index);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  BwdParams p = make_bwd_params<Traits::kBlockM>(args, pr);
  const std::int64_t stats_blocks = bwd_workspace_blocks(p);
  if (stats_blocks > INT32_MAX)
    return Status(StatusCode::kUnsupported, "the sm_90a backward kernel indexes at most 2^31 - 1 blocks of 64 q rows "
                                            "per call (heads_q x rows / 64); this call has " +
                                                std::to_string(stats_blocks));
  const std::size_t rows = std::size_t(stats_blocks) * Traits::kBlockM;
  const std::size_t dq_bytes = rows * kHeadDim * sizeof(float);
  // Workspace: dq_accum, the deterministic kernels' dq_order counters (whole 128-byte lines, so that
  // row_stats stays aligned for TMA), row_stats, and with dsink the sink gradient's partial sums. The
  // row statistics kernel zeroes the first two, block by block.
  const std::size_t order_count = kDeterministic ? std::size_t(stats_blocks) * Traits::kConsumerWarpgroups : 0;
  const std::size_t order_bytes = (order_count * sizeof(int) + 127) / 128 * 128;
  const std::size_t zeroed_bytes = dq_bytes + order_bytes;
  void* workspace = nullptr;
  const std::size_t stats_bytes = 2 * rows * sizeof(float);
  const std::size_t sink_partial_bytes = p.dsink != nullptr ? std::size_t(p.heads_q) * kSinkGradParts * sizeof(float) : 0;
  if (Status st = acquire_split_workspace(pr.device_index, zeroed_bytes + stats_bytes + sink_partial_bytes, stream,
                                          &workspace);
      !st.ok())
    return st;
  p.dq_accum = static_cast<float*>(workspace);
  p.dq_order = kDeterministic ? reinterpret_cast<int*>(static_cast<char*>(workspace) + dq_bytes) : nullptr;
  p.row_stats = reinterpret_cast<float*>(static_cast<char*>(workspace) + zeroed_bytes);
  if (p.dsink != nullptr) p.sink_partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + zeroed_bytes + stats_bytes);
  const int m_blocks = (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;  // of the longest sequence
  const int key_blocks = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  p.dq_head_interleave =
      kDeterministic && !dq_order_descending(p)
          ? dq_head_interleave(p.head_ratio * m_blocks, p.heads_kv * p.batch,
                               device_attribute(cudaDevAttrMultiProcessorCount, pr.device_index, 1))
          : 1;
  // The row statistics as a float32 matrix of one row per workspace block: lse_log2 then D.
  CUtensorMap tm_row_stats;
  const std::int64_t stats_cols = 2 * Traits::kBlockM;
  const BshdView stats_view{p.row_stats, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 1, stats_blocks, 1, stats_cols,
                            stats_blocks * stats_cols, stats_cols, stats_blocks * stats_cols};
  Status launched = make_tensor_map(&tm_row_stats, stats_view, stats_cols, 1, CU_TENSOR_MAP_SWIZZLE_NONE);

  auto main_kernel = attention_backward_kernel<Traits>;
  if (launched.ok())
    launched = cuda_status(
        cudaFuncSetAttribute(main_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSharedBytes),
        "raising the backward kernel's shared-memory limit");
  if (launched.ok()) {
    const dim3 grid(m_blocks * p.heads_q, p.batch);  // head_block_of_cta
    backward_row_stats_kernel<Element, kHeadDim, Traits::kConsumerWarpgroups, Traits::kChunksAndSequsedQ>
        <<<grid, kRowStatsThreads, 0, stream>>>(p);
    launched = cuda_status(cudaGetLastError(), "launching the backward row statistics");
  }
  if (launched.ok() && p.dsink != nullptr) {
    backward_sink_grad_partial_kernel<kRowStatsBlock, Traits::kChunksAndSequsedQ>
        <<<dim3(kSinkGradParts, p.heads_q), kRowStatsBlock, 0, stream>>>(p);
    backward_sink_grad_kernel<kRowStatsBlock><<<p.heads_q, 32, 0, stream>>>(p);
    launched = cuda_status(cudaGetLastError(), "launching the sink gradient");
  }
  if (launched.ok()) {
    const dim3 grid(key_blocks, p.heads_kv, p.batch);
    main_kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(tm_q, tm_k, tm_v, tm_dout, tm_row_stats, p,
                                                                          tm_dk, tm_dv);
    launched = cuda_status(cudaGetLastError(), "launching the backward kernel");
  }
  if (launched.ok()) {
    const dim3 grid(m_blocks * p.heads_q, p.batch);  // head_block_of_cta
    backward_dq_convert_kernel<Traits><<<grid, kDqConvertThreads, 0, stream>>>(p);
    launched = cuda_status(cudaGetLastError(), "launching the backward dq conversion");
  }
  Status released = release_split_workspace(workspace, stream);
  return launched.ok() ? released : launched;
}

}  // namespace hopattn::sm90
