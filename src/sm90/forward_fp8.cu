// sm90::forward_fp8: picks the FP8 kernel instantiation for the head dim.
#include <string>

#include "sm90/fwd/params_builder.hpp"
#include "sm90/fwd_fp8/dispatch.hpp"
#include "sm90/fwd_fp8/launch.hpp"
#include "sm90/host/tile_width.hpp"

namespace hopattn::sm90 {
namespace {

// The kernels of one width (kWidthV: the V and O tiles'): the chunk / seqused_q variant, the
// variable-length one, or the dense one with v in either layout.
template <int kWidth, int kWidthV = kWidth>
Status launch_width(const FwdArgs& args, const detail::Problem& pr, bool chunks_or_seqused_q, bool varlen, bool vt) {
  if (chunks_or_seqused_q) return launch_forward_fp8_chunks_seqused_q<kWidth, kWidthV>(args, pr);
  if (varlen) return launch_forward_fp8<kWidth, false, true, kWidthV>(args, pr);
  return vt ? launch_forward_fp8<kWidth, true, false, kWidthV>(args, pr)
            : launch_forward_fp8<kWidth, false, false, kWidthV>(args, pr);
}

}  // namespace

Status forward_fp8(const FwdArgs& args, const detail::Problem& pr, bool varlen) {
  // Sliding windows use the 16-bit kernel's masks and K-block range; softcap has its own
  // instantiations (launch_forward_fp8).
  if (!args.options.warp_specialized)
    return Status(StatusCode::kUnsupported,
                  "KernelOptions::warp_specialized = false is not supported by the sm_90a fp8 forward kernel: its "
                  "producer warpgroup also transposes V");
  const bool vt = pr.v_keys_contiguous;
  // Calls with attention_chunk > 0 or seqused_q take kernels of their own
  // (launch_forward_fp8_chunks_seqused_q): up to d 128 the variable-length ones, dense batches too;
  // above it the dense one, so chunks on dense batches only.
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
  // Above 128 the chunk / seqused_q kernels are the dense ones (launch_forward_fp8_chunks_seqused_q).
  if (chunks_or_seqused_q && varlen && detail::widest_head_dim(pr) > 128)
    return Status(StatusCode::kUnsupported,
                  which() +
                      " with FP8 inputs at head dims above 128 and variable lengths (cu_seqlens, seqused_k, "
                      "seqused_q, a paged cache) is not supported by the sm_90a fp8 forward kernel; above 128 "
                      "(the 192- and 256-wide kernels) it takes attention_chunk on dense batches, and up to 128 "
                      "both on any");
  // Decoding steps at head dims 136-256: the d 256 FP8 decoding kernel (block descales too), which packs
  // GQA and splits every tile (takes_decoding_kernel, params_builder.hpp).
  if (takes_decoding_kernel(args, pr)) return launch_forward_fp8_decoding<256>(args, pr);
  // The kernel of the tile width that holds both head dims (launch_at_tile_width; validation admits
  // multiples of 16 up to 256): its TMA loads zero-fill q's and k's columns past head_dim and v's past
  // head_dim_v, which add nothing to S or to P V, and its stores leave out's columns past head_dim_v.
  // DeepSeek's 192 / 128 takes the 192-wide kernel with V and O tiles 128 wide, as the 16-bit forward.
  if (takes_v128_kernels(pr)) return launch_width<192, 128>(args, pr, chunks_or_seqused_q, varlen, vt);
  return launch_at_tile_width(detail::widest_head_dim(pr), [&](auto width) {
    return launch_width<decltype(width)::value>(args, pr, chunks_or_seqused_q, varlen, vt);
  });
}

}  // namespace hopattn::sm90
