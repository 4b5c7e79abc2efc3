// sm90::forward_fp8: picks the FP8 kernel instantiation for the head dim.
#include <string>

#include "sm90/fwd_fp8/dispatch.hpp"
#include "sm90/fwd_fp8/launch.hpp"
#include "sm90/host/tile_width.hpp"

namespace hopattn::sm90 {

Status forward_fp8(const FwdArgs& args, const detail::Problem& pr, bool varlen) {
  // Sliding windows use the 16-bit kernel's masks and K-block range; softcap has its own
  // instantiations (launch_forward_fp8).
  if (!args.options.warp_specialized)
    return Status(StatusCode::kUnsupported,
                  "KernelOptions::warp_specialized = false is not supported by the sm_90a fp8 forward kernel: its "
                  "producer warpgroup also transposes V");
  const bool vt = pr.v_keys_contiguous;
  // Calls with attention_chunk > 0 or seqused_q take kernels of their own
  // (launch_forward_fp8_chunks_seqused_q): at d 64 and 128 the variable-length ones, dense batches too;
  // at d 256 the dense one, so chunks on dense batches only.
  const bool chunks_or_seqused_q = detail::has_chunks_or_seqused_q(pr);
  const auto which = [&] {
    return pr.attention_chunk > 0 ? "attention_chunk " + std::to_string(pr.attention_chunk) : std::string("seqused_q");
  };
  if (chunks_or_seqused_q && vt)
    return Status(StatusCode::kUnsupported, which() +
                                                " with FP8 v keys-contiguous (V^T in memory) is not supported "
                                                "by the sm_90a fp8 forward kernel; it takes v with its head dim "
                                                "contiguous (stride[-1] == 1) there");
  if (varlen && vt)
    return Status(StatusCode::kUnsupported,
                  "v keys-contiguous (V^T in memory) with variable-length input (cu_seqlens_q, cu_seqlens_k, "
                  "seqused_k, seqused_q) or pack_gqa = kOn is not supported by the sm_90a fp8 forward kernel; with those it "
                  "takes v with its head dim contiguous (stride[-1] == 1)");
  // The kernel of the tile width that holds both head dims (validation admits multiples of 16 up to
  // 256): its TMA loads zero-fill q's and k's columns past head_dim and v's past head_dim_v, which add
  // nothing to S or to P V, and its stores leave out's columns past head_dim_v.
  const int width = fp8_tile_width(detail::widest_head_dim(pr));
  switch (width) {
    case 64:
      if (chunks_or_seqused_q) return launch_forward_fp8_chunks_seqused_q<64>(args, pr);
      if (varlen) return launch_forward_fp8<64, false, true>(args, pr);
      return vt ? launch_forward_fp8<64, true, false>(args, pr) : launch_forward_fp8<64, false, false>(args, pr);
    case 128:
      if (chunks_or_seqused_q) return launch_forward_fp8_chunks_seqused_q<128>(args, pr);
      if (varlen) return launch_forward_fp8<128, false, true>(args, pr);
      return vt ? launch_forward_fp8<128, true, false>(args, pr) : launch_forward_fp8<128, false, false>(args, pr);
    default:
      if (chunks_or_seqused_q && varlen)
        return Status(StatusCode::kUnsupported,
                      which() +
                          " with FP8 inputs at head dims above 128 and variable lengths (cu_seqlens, seqused_k, "
                          "seqused_q, a paged cache) is not supported by the sm_90a fp8 forward kernel; above 128 "
                          "(the 192- and 256-wide kernels) it takes attention_chunk on dense batches, and up to 128 "
                          "both on any");
      if (width == 192 && takes_v128_kernels(pr)) {  // DeepSeek's 192 / 128: V and O tiles 128 wide
        if (chunks_or_seqused_q) return launch_forward_fp8_chunks_seqused_q<192, 128>(args, pr);
        if (varlen) return launch_forward_fp8<192, false, true, 128>(args, pr);
        return vt ? launch_forward_fp8<192, true, false, 128>(args, pr)
                  : launch_forward_fp8<192, false, false, 128>(args, pr);
      }
      if (width == 192) {
        if (chunks_or_seqused_q) return launch_forward_fp8_chunks_seqused_q<192>(args, pr);
        if (varlen) return launch_forward_fp8<192, false, true>(args, pr);
        return vt ? launch_forward_fp8<192, true, false>(args, pr) : launch_forward_fp8<192, false, false>(args, pr);
      }
      if (chunks_or_seqused_q) return launch_forward_fp8_chunks_seqused_q<256>(args, pr);
      if (varlen) return launch_forward_fp8<256, false, true>(args, pr);
      return vt ? launch_forward_fp8<256, true, false>(args, pr) : launch_forward_fp8<256, false, false>(args, pr);
  }
}

}  // namespace hopattn::sm90
