// sm90::backward: picks the backward instantiation for a validated problem, or says which features
// the sm_90a backward kernel supports.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "sm90/bwd/launch.hpp"
#include "sm90/host/tile_width.hpp"
#include "sm90/sm90.hpp"

namespace hopattn::sm90 {
namespace {

Status unsupported(const std::string& what) {
  return Status(StatusCode::kUnsupported,
                what + " is not supported by the sm_90a backward kernel yet; it supports bf16/fp16 q/k/v, dense "
                       "(batch, seqlen, heads, head_dim) or variable-length (cu_seqlens_q, cu_seqlens_k, "
                       "seqused_k, seqused_q), with head dim up to 256 (a multiple of 8), causal or not, sliding "
                       "window, attention_chunk, softcap, GQA/MQA and softmax_scale (the CPU reference backend "
                       "supports every feature on host tensors)");
}

// Calls with chunks or seqused_q take kernels of their own (BwdTraits::kChunksAndSequsedQ), so that no
// other kernel carries their tests. kHeadDimV: the V and dO tiles' width.
template <int kHeadDim, typename Element, int kHeadDimV = kHeadDim>
Status launch(const BwdArgs& args, const detail::Problem& pr) {
  if (args.deterministic) return launch_backward<kHeadDim, Element, true, false, kHeadDimV>(args, pr);
  if (detail::has_chunks_or_seqused_q(pr))
    return launch_backward<kHeadDim, Element, false, /*kChunksAndSequsedQ=*/true, kHeadDimV>(args, pr);
  return launch_backward<kHeadDim, Element, false, false, kHeadDimV>(args, pr);
}

// The kernel of the head dim's tile width (launch_at_tile_width), as in the forward: q, k, v and dout
// zero-filled past their columns, the stores cut at each gradient's (BwdParams::head_dim,
// head_dim_v). A v with a head dim of its own runs in the kernel of the wider of the two, except q/k
// at the 192 tile with v at most 128 (DeepSeek's 192 / 128), whose V and dO tiles are 128 wide, so
// that dP^T and dV skip the zero-filled columns.
template <typename Element>
Status dispatch_head_dim(const BwdArgs& args, const detail::Problem& pr) {
  const int head_dim = detail::widest_head_dim(pr);
  if (head_dim > 256) return unsupported("head dim " + std::to_string(head_dim));
  if (takes_v128_kernels(pr)) return launch<192, Element, 128>(args, pr);
  return launch_at_tile_width(head_dim, [&](auto width) { return launch<decltype(width)::value, Element>(args, pr); });
}

}  // namespace

Status backward(const BwdArgs& args, const detail::Problem& pr) {
  // The grid covers max_seqlen_k keys of every sequence (the forward takes the key lengths from
  // cu_seqlens_k alone); CUDA tensors have at least one key row, so some sequence has keys.
  if (pr.varlen_k && pr.seqlen_k < 1)
    return Status(StatusCode::kInvalidArgument,
                  "max_seqlen_k: " + std::to_string(pr.seqlen_k) +
                      "; the backward on CUDA tensors needs the length of the longest key sequence (>= 1) with "
                      "cu_seqlens_k");
  if (args.deterministic && detail::has_chunks_or_seqused_q(pr))
    return Status(StatusCode::kUnsupported,
                  (pr.attention_chunk > 0 ? "attention_chunk: " + std::to_string(args.attention_chunk) : "seqused_q") +
                      " with deterministic = true is not supported by the sm_90a backward kernel yet; it runs with "
                      "deterministic = false (dk and dv are reproducible there, dq to its last bits), and the CPU "
                      "reference backend takes both on host tensors");
  switch (pr.in_dtype) {
    case Dtype::kBFloat16: return dispatch_head_dim<__nv_bfloat16>(args, pr);
    case Dtype::kFloat16: return dispatch_head_dim<__half>(args, pr);
    default: return unsupported(std::string("dtype ") + dtype_name(pr.in_dtype));
  }
}

}  // namespace hopattn::sm90
