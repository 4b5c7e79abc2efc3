// sm90::forward_fp8: picks the FP8 kernel instantiation for the head dim.
#include <string>

#include "sm90/fwd_fp8/dispatch.hpp"
#include "sm90/fwd_fp8/launch.hpp"

namespace hopattn::sm90 {

Status forward_fp8(const FwdArgs& args, const detail::Problem& pr) {
  // Sliding windows use the 16-bit kernel's masks and K-block range; softcap has its own
  // instantiations (launch_forward_fp8).
  if (!args.options.warp_specialized)
    return Status(StatusCode::kUnsupported,
                  "KernelOptions::warp_specialized = false is not supported by the sm_90a fp8 forward kernel: its "
                  "producer warpgroup also transposes V");
  const bool vt = pr.v_keys_contiguous;
  switch (pr.head_dim) {
    case 64: return vt ? launch_forward_fp8<64, true>(args, pr) : launch_forward_fp8<64, false>(args, pr);
    case 128: return vt ? launch_forward_fp8<128, true>(args, pr) : launch_forward_fp8<128, false>(args, pr);
    case 256: return vt ? launch_forward_fp8<256, true>(args, pr) : launch_forward_fp8<256, false>(args, pr);
    default:
      return Status(StatusCode::kUnsupported, "head dim " + std::to_string(pr.head_dim) +
                                                  " is not supported by the sm_90a fp8 forward kernel; it supports "
                                                  "64, 128 and 256");
  }
}

}  // namespace hopattn::sm90
