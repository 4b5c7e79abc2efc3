// launch_forward<Traits>: tensor maps, parameters, grid, and the launch of one kernel configuration.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <string>

#include "api/problem.hpp"
#include "sm90/fwd/kernel.cuh"
#include "sm90/fwd/traits.cuh"
#include "sm90/host/tensor_map.hpp"

namespace hopattn::sm90 {

inline BshdView bshd_view(const Tensor& t, CUtensorMapDataType dtype) {
  // Dense layout (batch, rows, heads, dim).
  return BshdView{t.data, dtype, 2, t.shape[0], t.shape[1], t.shape[2], t.shape[3],
                  t.stride[0], t.stride[1], t.stride[2]};
}

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

inline int multiprocessor_count(int device) {
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 1;
  return count;
}

template <class Traits>
Status launch_forward(const FwdArgs& args, const detail::Problem& pr) {
  const CUtensorMapDataType dtype =
      Traits::kIsBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap tm_q, tm_k, tm_v;
  if (Status st = make_tensor_map(&tm_q, bshd_view(args.q, dtype), Traits::kColsPerBlock, Traits::kBlockM); !st.ok())
    return st;
  if (Status st = make_tensor_map(&tm_k, bshd_view(args.k, dtype), Traits::kColsPerBlock, Traits::kBlockN); !st.ok())
    return st;
  if (Status st = make_tensor_map(&tm_v, bshd_view(args.v, dtype), Traits::kColsPerBlock, Traits::kBlockN); !st.ok())
    return st;

  FwdParams p{};
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
  if (p.num_tiles == 0) return Status::Ok();

  auto kernel = attention_forward_kernel<Traits>;
  const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSharedBytes);
  if (Status st = cuda_status(attr_status, "raising the forward kernel's shared-memory limit"); !st.ok()) return st;

  const int sms = multiprocessor_count(pr.device_index);
  const int grid = args.options.persistent ? (p.num_tiles < sms ? p.num_tiles : sms) : p.num_tiles;
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, static_cast<cudaStream_t>(args.stream)>>>(tm_q, tm_k, tm_v,
                                                                                                     p);
  return cuda_status(cudaGetLastError(), "launching the forward kernel");
}

}  // namespace hopattn::sm90
