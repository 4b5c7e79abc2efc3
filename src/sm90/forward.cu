// sm90::forward: picks the kernel instantiation for a validated problem, or says which features the
// sm_90a forward kernel supports.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "sm90/fwd/launch.hpp"
#include "sm90/fwd/params_builder.hpp"
#include "sm90/fwd_fp8/dispatch.hpp"
#include "sm90/host/tile_width.hpp"
#include "sm90/mla/launch.hpp"
#include "sm90/sm90.hpp"

namespace hopattn::sm90 {
namespace {

Status unsupported(const std::string& what) {
  return Status(StatusCode::kUnsupported,
                what + " is not supported by the sm_90a forward kernel yet; it supports bf16/fp16 q/k/v, "
                       "dense or variable-length (cu_seqlens_q, cu_seqlens_k, seqused_k, seqused_q) or with a paged KV "
                       "cache (any page_size where K/V are copied, else a power of two from 16), and FP8 e4m3 "
                       "q/k/v likewise, "
                       "with head dims up to 256 (bf16/fp16: multiples of 8; FP8: multiples of 16), causal or not, "
                       "sliding window, "
                       "attention_chunk, softcap, GQA/MQA, softmax_scale and LSE, and qv (DeepSeek's MLA) "
                       "at q/k head dim 64 with v 512 (the CPU reference backend supports every feature on host "
                       "tensors)");
}

// Page sizes TMA cannot load (tma_takes_page_size: TMA loads each K/V block of a paged cache in boxes of
// whole pages, or whole blocks within a page, each starting on a swizzle atom of 8 rows): 1-8 keys
// (SGLang's token-granular cache takes 1) and sizes that are no power of two (vLLM's hybrid models pick
// multiples of 16 such as 528). The K/V copy kernels copy them row by row (kv_cp_async.cuh), bf16/fp16 at
// head dims up to 128, where KernelOptions::kv_loads is not kTma (their launch then takes the copies:
// takes_kv_copy_kernel); "" where they are taken, else what refuses them.
std::string copied_page_refusal(const FwdArgs& args, const detail::Problem& pr) {
  if (pr.in_dtype == Dtype::kFloat8E4M3) return "FP8 e4m3 q/k/v";
  if (detail::widest_head_dim(pr) > 128) return "head dim " + std::to_string(detail::widest_head_dim(pr));
  if (args.options.kv_loads == KernelOptions::KvLoads::kTma) return "KernelOptions::kv_loads = kTma";
  return "";
}

// qv (flash-attention 3's; DeepSeek's multi-head latent attention decoding with the projections absorbed):
// the MLA kernel (sm90/mla/), which takes dense or paged K/V, seqused_k, causal, GQA of any ratio, LSE and
// num_splits; everything else is refused by name.
Status forward_qv(const FwdArgs& args, const detail::Problem& pr) {
  const auto refuse = [](const std::string& what) {
    return Status(StatusCode::kUnsupported,
                  "qv with " + what +
                      " is not supported by the sm_90a MLA kernel; it takes bf16/fp16 q and k of head dim 64 with v, "
                      "qv and out of head dim 512, dense or paged k/v (page_size a power of two from 16), "
                      "seqused_k, causal or not, any heads_q / heads_kv, softmax_scale, LSE and num_splits (the "
                      "CPU reference backend takes qv with every feature on host tensors)");
  };
  if (pr.head_dim != 64 || pr.head_dim_v != 512)
    return refuse("q/k head dim " + std::to_string(pr.head_dim) + " and v head dim " + std::to_string(pr.head_dim_v));
  if (pr.varlen_q || pr.varlen_k) return refuse("cu_seqlens_q / cu_seqlens_k (variable-length batches)");
  if (pr.has_seqused_q) return refuse("seqused_q");
  if (pr.window_left >= 0 || pr.window_right > 0)
    return refuse("a sliding window (window_left / window_right other than causal)");
  if (pr.softcap > 0.0f) return refuse("softcap");
  if (args.learnable_sink) return refuse("learnable_sink");
  if (pr.attention_chunk > 0) return refuse("attention_chunk");
  const KernelOptions& o = args.options;
  if (!o.warp_specialized || !o.pingpong || !o.intra_wg_overlap || !o.persistent)
    return refuse("KernelOptions::warp_specialized / pingpong / intra_wg_overlap / persistent = false (the MLA "
                  "kernel has one schedule, without these switches)");
  if (o.pack_gqa == KernelOptions::PackGqa::kOff)
    return refuse("KernelOptions::pack_gqa = kOff (the MLA kernel always packs a K/V head's query heads)");
  if (o.kv_loads == KernelOptions::KvLoads::kCopyThreads)
    return refuse("KernelOptions::kv_loads = kCopyThreads (the MLA kernel loads K/V by TMA)");
  if (pr.paged && !tma_takes_page_size(pr.page_size))
    return refuse("page_size " + std::to_string(pr.page_size) + " (k.shape[1]; powers of two from 16 are taken)");
  if (!(pr.softmax_scale > 0.0f)) return refuse("softmax_scale <= 0");
  switch (pr.in_dtype) {
    case Dtype::kBFloat16: return launch_mla_forward<__nv_bfloat16>(args, pr);
    case Dtype::kFloat16: return launch_mla_forward<__half>(args, pr);
    default: return refuse(std::string("dtype ") + dtype_name(pr.in_dtype));
  }
}

// The 16-bit kernels' tile rows (every shipped configuration: two consumer warpgroups).
constexpr int kTileRows = 128;

// The decoding kernels: the variable-length ones at head dims up to 128, which pack GQA heads and split
// every tile (FwdTraits::kPacksGqa, kVarlenSplit; Fp8FwdTraits' alike); warp-specialized only. The FP8
// ones take v in the ordinary layout only: a keys-contiguous v keeps the dense FP8 kernels.
bool has_decoding_kernels(const FwdArgs& args, const detail::Problem& pr) {
  const bool fp8 = pr.in_dtype == Dtype::kFloat8E4M3;
  return detail::widest_head_dim(pr) <= 128 && args.options.warp_specialized && !(fp8 && pr.v_keys_contiguous);
}

// GQA packing (packs_gqa decides where it pays). pack_gqa = kOn over a keys-contiguous FP8 v still
// takes the variable-length kernels, whose launch refuses it by name.
bool packs(const FwdArgs& args, const detail::Problem& pr) {
  if (pr.in_dtype == Dtype::kFloat8E4M3 && args.options.pack_gqa == KernelOptions::PackGqa::kOn)
    return detail::widest_head_dim(pr) <= 128;
  return has_decoding_kernels(args, pr) && packs_gqa(args.options.pack_gqa, pr, kTileRows);
}

// Query rows that fill at most one consumer warpgroup of a tile (decoding steps that pack nothing: MHA,
// or pack_gqa off): the variable-length kernels leave the other warpgroup idle and split every tile,
// where the dense kernels run both warpgroups and split only the last round's tiles. Batch-1 MHA steps
// took 6-32% less time there, batch 8 the same (perf-notes, session 19).
bool decodes(const FwdArgs& args, const detail::Problem& pr) {
  return has_decoding_kernels(args, pr) && pr.seqlen_q <= kTileRows / 2;
}

// Batches whose sequences differ in length or location (seqused_q: a dense q's too) take the
// variable-length kernels, and so do
// launches that pack GQA heads into tiles (only those kernels pack; a dense batch is a special case)
// and decoding steps.
bool takes_varlen_kernels(const FwdArgs& args, const detail::Problem& pr) {
  return pr.varlen_q || pr.varlen_k || pr.has_seqused_k || pr.has_seqused_q || pr.paged || packs(args, pr) ||
         decodes(args, pr);
}

// Calls with attention_chunk > 0 or seqused_q take the variable-length kernels' variant for them (dense
// batches too), so that no other kernel carries their tests. kHeadDimV: the V and O tiles' width.
template <int kHeadDim, typename Element, int kHeadDimV = kHeadDim>
Status launch(const FwdArgs& args, const detail::Problem& pr) {
  if (detail::has_chunks_or_seqused_q(pr))
    return launch_shipped_chunks_seqused_q_forward<kHeadDim, Element, kHeadDimV>(args, pr);
  return takes_varlen_kernels(args, pr) ? launch_shipped_varlen_forward<kHeadDim, Element, kHeadDimV>(args, pr)
                                        : launch_shipped_forward<kHeadDim, Element, kHeadDimV>(args, pr);
}

// The kernel of the head dim's tile width (launch_at_tile_width), its stores cut at out's columns
// (FwdParams::head_dim_v). A v with a head dim of its own runs in the kernel of the wider of the two:
// q and k zero-filled past theirs, or v and O past its. One pair has kernels of its own: q/k at the
// 192 tile with v at most 128 (DeepSeek's 192 / 128), whose V and O tiles are 128 wide, so that P V
// does not multiply 64 zero-filled columns; warp-specialized ones only (the ablation runs q's width).
template <typename Element>
Status dispatch_head_dim(const FwdArgs& args, const detail::Problem& pr) {
  const int head_dim = detail::widest_head_dim(pr);
  if (head_dim > 256) return unsupported("head dim " + std::to_string(head_dim));
  // Decoding steps at head dims 136-256: the d 256 decoding kernel, which packs GQA and splits every tile
  // (takes_decoding_kernel, params_builder.hpp).
  if (takes_decoding_kernel(args, pr)) return launch_shipped_decoding_forward<256, Element>(args, pr);
  if (takes_v128_kernels(pr) && args.options.warp_specialized) return launch<192, Element, 128>(args, pr);
  return launch_at_tile_width(head_dim, [&](auto width) { return launch<decltype(width)::value, Element>(args, pr); });
}

}  // namespace

Status forward(const FwdArgs& args, const detail::Problem& pr) {
  if (args.qv) return forward_qv(args, pr);
  const bool varlen = takes_varlen_kernels(args, pr);
  // 16-bit chunked calls run in variable-length kernels, dense batches too (launch).
  const bool varlen_16bit = varlen || (pr.attention_chunk > 0 && pr.in_dtype != Dtype::kFloat8E4M3);
  if (varlen_16bit && !args.options.warp_specialized)
    return unsupported(
        "variable-length input (cu_seqlens_q, cu_seqlens_k, seqused_k, seqused_q), attention_chunk "
        "or a paged KV cache with KernelOptions::warp_specialized = false (the ablation switch; these "
        "kernels are warp-specialized)");
  if (args.options.pack_gqa == KernelOptions::PackGqa::kOn) {
    if (const int head_dim = detail::widest_head_dim(pr); head_dim > 128 && !takes_decoding_kernel(args, pr))
      return unsupported("KernelOptions::pack_gqa = kOn at head dim " + std::to_string(head_dim) +
                         " for this call (head dims up to 128 pack; above 128, decoding steps of at most " +
                         std::to_string(kTransposedRows) +
                         " query rows a K/V head, seqlen_q x heads_q / heads_kv, without attention_chunk or "
                         "seqused_q, and in FP8 without a q block descale, block descales of other than "
                         "multiples of 64 rows or a keys-contiguous v)");
    if (!args.options.warp_specialized)
      return unsupported("KernelOptions::pack_gqa = kOn with warp_specialized = false (the packing kernels are "
                         "warp-specialized)");
    if (pr.heads_q / pr.heads_kv > kTileRows)
      return unsupported("KernelOptions::pack_gqa = kOn with heads_q / heads_kv = " +
                         std::to_string(pr.heads_q / pr.heads_kv) + " (packing takes at most " +
                         std::to_string(kTileRows) + " query heads per K/V head)");
  }
  if (args.options.kv_loads == KernelOptions::KvLoads::kCopyThreads &&
      (!varlen_16bit || pr.in_dtype == Dtype::kFloat8E4M3 || detail::widest_head_dim(pr) > 128))
    return unsupported(
        "KernelOptions::kv_loads = kCopyThreads here (K/V copies exist in the bf16/fp16 "
        "variable-length, chunked, paged and decoding kernels at head dims up to 128)");
  if (pr.paged && !tma_takes_page_size(pr.page_size)) {
    if (const std::string why = copied_page_refusal(args, pr); !why.empty())
      return unsupported("a paged KV cache with page_size " + std::to_string(pr.page_size) + " and " + why +
                         " (k.shape[1]); the sm_90a kernel takes any page size with bf16/fp16 q/k/v at head dims "
                         "up to 128 where K/V are copied (KernelOptions::kv_loads kAuto or kCopyThreads), and "
                         "powers of two from 16 (16, 32, 64, ...) everywhere");
  }
  // The kernels track the running max of raw scores, which orders logits only for a positive scale.
  if (!(pr.softmax_scale > 0.0f)) return unsupported("softmax_scale <= 0");
  switch (pr.in_dtype) {
    case Dtype::kBFloat16: return dispatch_head_dim<__nv_bfloat16>(args, pr);
    case Dtype::kFloat16: return dispatch_head_dim<__half>(args, pr);
    case Dtype::kFloat8E4M3: return forward_fp8(args, pr, varlen);
    default: return unsupported(std::string("dtype ") + dtype_name(pr.in_dtype));
  }
}

}  // namespace hopattn::sm90
