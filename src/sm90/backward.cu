// sm90::backward: picks the backward instantiation for a validated problem, or says which features
// the sm_90a backward kernel supports.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "sm90/bwd/launch.hpp"
#include "sm90/sm90.hpp"

namespace hopattn::sm90 {
namespace {

Status unsupported(const std::string& what) {
  return Status(StatusCode::kUnsupported,
                what + " is not supported by the sm_90a backward kernel yet; it supports bf16/fp16 dense q/k/v "
                       "(batch, seqlen, heads, head_dim) with head dim 64 or 128, causal or not, sliding window, "
                       "softcap, GQA/MQA and softmax_scale (the CPU reference backend supports every feature on "
                       "host tensors)");
}

template <typename Element>
Status dispatch_head_dim(const BwdArgs& args, const detail::Problem& pr) {
  switch (pr.head_dim) {
    case 64: return launch_backward<64, Element>(args, pr);
    case 128: return launch_backward<128, Element>(args, pr);
    default: return unsupported("head dim " + std::to_string(pr.head_dim));
  }
}

}  // namespace

Status backward(const BwdArgs& args, const detail::Problem& pr) {
  if (pr.varlen_q || pr.varlen_k || pr.has_seqused_k)
    return unsupported("variable-length input (cu_seqlens_q, cu_seqlens_k, seqused_k)");
  switch (pr.in_dtype) {
    case Dtype::kBFloat16: return dispatch_head_dim<__nv_bfloat16>(args, pr);
    case Dtype::kFloat16: return dispatch_head_dim<__half>(args, pr);
    default: return unsupported(std::string("dtype ") + dtype_name(pr.in_dtype));
  }
}

}  // namespace hopattn::sm90
