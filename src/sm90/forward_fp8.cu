// sm90::forward_fp8: picks the FP8 kernel instantiation for the head dim.
#include <string>

#include "sm90/fwd_fp8/dispatch.hpp"
#include "sm90/fwd_fp8/launch.hpp"

namespace hopattn::sm90 {

Status forward_fp8(const FwdArgs& args, const detail::Problem& pr, bool varlen) {
  // Sliding windows use the 16-bit kernel's masks and K-block range; softcap has its own
  // instantiations (launch_forward_fp8).
  if (!args.options.warp_specialized)
    return Status(StatusCode::kUnsupported,
                  "KernelOptions::warp_specialized = false is not supported by the sm_90a fp8 forward kernel: its "
                  "producer warpgroup also transposes V");
  const bool vt = pr.v_keys_contiguous;
  if (varlen && vt)
    return Status(StatusCode::kUnsupported,
                  "v keys-contiguous (V^T in memory) with variable-length input (cu_seqlens_q, cu_seqlens_k, "
                  "seqused_k, seqused_q) or pack_gqa = kOn is not supported by the sm_90a fp8 forward kernel; with those it "
                  "takes v with its head dim contiguous (stride[-1] == 1)");
  switch (pr.head_dim) {
    case 64:
      if (varlen) return launch_forward_fp8<64, false, true>(args, pr);
      return vt ? launch_forward_fp8<64, true, false>(args, pr) : launch_forward_fp8<64, false, false>(args, pr);
    case 128:
      if (varlen) return launch_forward_fp8<128, false, true>(args, pr);
      return vt ? launch_forward_fp8<128, true, false>(args, pr) : launch_forward_fp8<128, false, false>(args, pr);
    case 256:
      if (varlen) return launch_forward_fp8<256, false, true>(args, pr);
      return vt ? launch_forward_fp8<256, true, false>(args, pr) : launch_forward_fp8<256, false, false>(args, pr);
    default:
      return Status(StatusCode::kUnsupported, "head dim " + std::to_string(pr.head_dim) +
                                                  " is not supported by the sm_90a fp8 forward kernel; it supports "
                                                  "64, 128 and 256");
  }
}

}  // namespace hopattn::sm90
