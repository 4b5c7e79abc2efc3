// Definition of launch_forward_fp8: tensor maps over the e4m3 tensors, parameters (descales
// included), grid, and the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <string>

#include "sm90/fwd_fp8/kernel.cuh"
#include "sm90/fwd_fp8/launch.hpp"
#include "sm90/fwd_fp8/traits.cuh"
#include "sm90/host/tensor_map.hpp"

namespace hopattn::sm90 {
namespace fp8_launch {

// Dense (batch, rows, heads, dim) e4m3 tensor as raw bytes for TMA.
inline BshdView byte_view(const Tensor& t) {
  return BshdView{t.data, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, t.shape[0], t.shape[1], t.shape[2], t.shape[3],
                  t.stride[0], t.stride[1], t.stride[2]};
}

inline DescaleView descale_view(const std::optional<Tensor>& t, int rows_per_block) {
  if (!t) return DescaleView{nullptr, 0, 0, 0, 0};
  return DescaleView{static_cast<const float*>(t->data), t->stride[0], t->stride[1], t->rank > 2 ? t->stride[2] : 0,
                     rows_per_block};
}

inline Status cuda_result(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

inline int sm_count(int device) {
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 1;
  return count;
}

}  // namespace fp8_launch

template <int kHeadDim>
Status launch_forward_fp8(const FwdArgs& args, const detail::Problem& pr) {
  using Traits = Fp8FwdTraits<kHeadDim>;
  const bool block_scales = args.q_block_descale || args.k_block_descale || args.v_block_descale;
  if (block_scales && (args.descale_block_rows_q % Traits::kRowsPerWarpgroup != 0 ||
                       args.descale_block_rows_kv % Traits::kBlockN != 0)) {
    return Status(StatusCode::kUnsupported,
                  "descale_block_rows_q " + std::to_string(args.descale_block_rows_q) + " / descale_block_rows_kv " +
                      std::to_string(args.descale_block_rows_kv) +
                      " is not supported by the sm_90a fp8 forward kernel; it needs multiples of " +
                      std::to_string(Traits::kRowsPerWarpgroup) + " and " + std::to_string(Traits::kBlockN));
  }
  CUtensorMap tm_q, tm_k, tm_v;
  constexpr int kBox = Traits::kColsPerBlock;
  if (Status st = make_tensor_map(&tm_q, fp8_launch::byte_view(args.q), kBox, Traits::kBlockM); !st.ok()) return st;
  if (Status st = make_tensor_map(&tm_k, fp8_launch::byte_view(args.k), kBox, Traits::kBlockN); !st.ok()) return st;
  if (Status st = make_tensor_map(&tm_v, fp8_launch::byte_view(args.v), kBox, Traits::kBlockN); !st.ok()) return st;

  Fp8FwdParams fp{};
  FwdParams& p = fp.base;
  p.batch = pr.batch;
  p.heads_q = pr.heads_q;
  p.heads_kv = pr.heads_kv;
  p.seqlen_q = pr.seqlen_q;
  p.seqlen_k = pr.seqlen_k;
  p.head_ratio = pr.heads_q / pr.heads_kv;
  p.softmax_scale = pr.softmax_scale;
  p.scale_log2 = pr.softmax_scale * static_cast<float>(M_LOG2E);
  p.causal = pr.causal;
  p.pingpong = args.options.pingpong;
  p.intra_wg_overlap = args.options.intra_wg_overlap;
  p.out = args.out.data;
  p.out_batch_stride = args.out.stride[0];
  p.out_row_stride = args.out.stride[1];
  p.out_head_stride = args.out.stride[2];
  if (args.lse) {
    p.lse = static_cast<float*>(args.lse->data);
    p.lse_batch_stride = args.lse->stride[0];
    p.lse_head_stride = args.lse->stride[1];
    p.lse_row_stride = args.lse->stride[2];
  }
  p.num_m_blocks = (pr.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  p.num_tiles = p.num_m_blocks * pr.heads_q * pr.batch;
  fp.q_descale = fp8_launch::descale_view(args.q_descale, 0);
  fp.k_descale = fp8_launch::descale_view(args.k_descale, 0);
  fp.v_descale = fp8_launch::descale_view(args.v_descale, 0);
  fp.q_block_descale = fp8_launch::descale_view(args.q_block_descale, args.descale_block_rows_q);
  fp.k_block_descale = fp8_launch::descale_view(args.k_block_descale, args.descale_block_rows_kv);
  fp.v_block_descale = fp8_launch::descale_view(args.v_block_descale, args.descale_block_rows_kv);
  if (p.num_tiles == 0) return Status::Ok();

  auto kernel = attention_forward_fp8_kernel<Traits>;
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSharedBytes);
  if (Status st = fp8_launch::cuda_result(attr, "raising the fp8 forward kernel's shared-memory limit"); !st.ok())
    return st;
  const int sms = fp8_launch::sm_count(pr.device_index);
  const int grid = args.options.persistent ? (p.num_tiles < sms ? p.num_tiles : sms) : p.num_tiles;
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, static_cast<cudaStream_t>(args.stream)>>>(tm_q, tm_k, tm_v,
                                                                                                     fp);
  return fp8_launch::cuda_result(cudaGetLastError(), "launching the fp8 forward kernel");
}

}  // namespace hopattn::sm90
