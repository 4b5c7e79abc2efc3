// The tile configurations the library ships, per head dim (H200 measurements: docs/perf-notes.md).
// bench/tune/tune_forward.cu times alternatives against these.
#pragma once

#include "sm90/fwd/launch.cuh"
#include "sm90/fwd/launch.hpp"
#include "sm90/fwd/params_builder.hpp"
#include "sm90/fwd/traits.cuh"

namespace hopattn::sm90 {

// kVarlen: the variable-length kernels (cu_seqlens_q / cu_seqlens_k / seqused_k / a paged KV cache),
// with the dense kernels' tiles; pr.seqlen_k is then the longest sequence's key count (or the page
// table's capacity). kKvByCpAsync: their variant that copies K/V with cp.async (head dims up to 128).
// kChunksAndSequsedQ: their variant for attention_chunk and seqused_q (FwdTraits::kChunksAndSequsedQ).
// kHeadDimV: the V and O tiles' width (FwdTraits::kHeadDimV): kHeadDim, or 128 at 192 (DeepSeek).
template <int kHeadDim, typename Element, bool kWarpSpecialized, bool kVarlen = false, bool kKvByCpAsync = false,
          bool kChunksAndSequsedQ = false, int kHeadDimV = kHeadDim>
Status launch_shipped_config(const FwdArgs& args, const detail::Problem& pr) {
  constexpr int kWarpgroups = 2;
  static_assert(kHeadDimV == kHeadDim || (kHeadDim == 192 && kHeadDimV == 128), "V tiles of their own: 192 / 128");
  if constexpr (kHeadDim == 64) {
    // Tiles that see few keys (short sequences, narrow sliding windows) have few key blocks: the narrower
    // block wastes less on the ragged ends. Tuner, 2026-11-29: 128 keys win at 512, 192 keys from 2k on;
    // causal windows on 4k-16k tokens (perf-notes v109): 128 keys 1.29x at window 128, 1.15x at 512,
    // 1.04x at 1024 (1151 keys a tile), 0.97x at 2048 (2175).
    // The variable-length kernels keep the 128-key blocks longer: up to 4096 keys a tile
    // (kMaxNarrowVarlenKeys, which also picks the K/V loads from 2 KB pages: takes_kv_copy_kernel; H100,
    // perf-notes v168: 8 x 16 heads x 1920-2048 causal 4.5-5% faster than the 192-key blocks, 4k level,
    // 8k-16k 2-4% slower). Decoding steps take them but where their tiles stream whole in up to three
    // waves past 1152 keys (decoding_step_takes_wide_blocks).
    // A paged cache's blocks load in chunks of whole pages or whole blocks in a page: page sizes from
    // 128 up fit 128-key blocks only.
    using Narrow =
        FwdTraits<64, Element, 128, 4, kWarpSpecialized, kWarpgroups, kVarlen, kKvByCpAsync, kChunksAndSequsedQ>;
    using Wide =
        FwdTraits<64, Element, 192, 4, kWarpSpecialized, kWarpgroups, kVarlen, kKvByCpAsync, kChunksAndSequsedQ>;
    static_assert(Narrow::kBlockM == Wide::kBlockM, "keys_per_tile counts one tile height for both");
    const long long keys = keys_per_tile(pr, Narrow::kBlockM);
    const auto wide_blocks = [&] {
      if (keys <= 1152) return false;
      if (!kVarlen) return true;
      if (!is_decoding_step(args, pr, Narrow::kBlockM)) return keys > kMaxNarrowVarlenKeys;
      const int sms = device_attribute(cudaDevAttrMultiProcessorCount, pr.device_index, 1);
      return decoding_step_takes_wide_blocks(args, pr, Narrow::kBlockM, Narrow::kBlockN, Narrow::kConsumerWarpgroups,
                                             sms);
    };
    if (!wide_blocks() || (pr.paged && pr.page_size >= 128)) return launch_forward<Narrow>(args, pr);
    return launch_forward<Wide>(args, pr);
  } else if constexpr (kHeadDim == 128) {
    // 176 keys (FlashAttention-3's non-causal choice) measured 4-9% slower than 128 at 512-8k here.
    return launch_forward<
        FwdTraits<128, Element, 128, 2, kWarpSpecialized, kWarpgroups, kVarlen, kKvByCpAsync, kChunksAndSequsedQ>>(args,
                                                                                                                   pr);
  } else if constexpr (kHeadDim == 192 && kHeadDimV == 192) {
    // d 256's 64-key blocks: two K/V stages and a 64-row O stage per warpgroup fit, and Q fits in
    // registers (128-key blocks do not fit twice beside Q). Head dims 136-192 run here, 200-256 at 256.
    return launch_forward<
        FwdTraits<192, Element, 64, 2, kWarpSpecialized, kWarpgroups, kVarlen, false, kChunksAndSequsedQ>>(args, pr);
  } else if constexpr (kHeadDim == 192) {
    // v 128 (DeepSeek): 128-key blocks fit twice beside Q with V 128 wide and the O stage shared, Q read
    // from shared memory (its registers go to S). H200, 2026-12-05: 1.09-1.21x the 64-key blocks' speed
    // at 1k-16k (perf-notes session 46).
    return launch_forward<FwdTraits<192, Element, 128, 2, kWarpSpecialized, kWarpgroups, kVarlen, false,
                                    kChunksAndSequsedQ, kHeadDimV>>(args, pr);
  } else {
    static_assert(kHeadDim == 256, "shipped head dims: 64, 128, 192, 256");
    return launch_forward<
        FwdTraits<256, Element, 64, 2, kWarpSpecialized, kWarpgroups, kVarlen, false, kChunksAndSequsedQ>>(args, pr);
  }
}

// kHeadDimV below kHeadDim: warp-specialized kernels only (forward.cu sends the ablation elsewhere; its
// 192 / 128 kernel put exponentials behind branches, tests/sass).
template <int kHeadDim, typename Element, int kHeadDimV>
Status launch_shipped_forward(const FwdArgs& args, const detail::Problem& pr) {
  if (args.options.warp_specialized)
    return launch_shipped_config<kHeadDim, Element, true, false, false, false, kHeadDimV>(args, pr);
  if constexpr (kHeadDimV != kHeadDim) {
    return Status(StatusCode::kUnsupported, "internal error in the sm_90a forward launch: v's own width without "
                                            "warp specialization");
  } else {
    return launch_shipped_config<kHeadDim, Element, false>(args, pr);
  }
}

// The variable-length kernels (kChunksAndSequsedQ: their variant for chunks and seqused_q), K/V by TMA
// or by copies.
template <int kHeadDim, typename Element, bool kChunksAndSequsedQ, int kHeadDimV>
Status launch_varlen_config(const FwdArgs& args, const detail::Problem& pr) {
  if constexpr (kHeadDim <= 128) {
    constexpr int kTileRows = 128;  // two consumer warpgroups of 64 rows
    if (takes_kv_copy_kernel(args, pr, kTileRows))
      return launch_shipped_config<kHeadDim, Element, true, /*kVarlen=*/true, /*kKvByCpAsync=*/true,
                                   kChunksAndSequsedQ, kHeadDimV>(args, pr);
  }
  return launch_shipped_config<kHeadDim, Element, /*kWarpSpecialized=*/true, /*kVarlen=*/true, false,
                               kChunksAndSequsedQ, kHeadDimV>(args, pr);
}

template <int kHeadDim, typename Element, int kHeadDimV>
Status launch_shipped_varlen_forward(const FwdArgs& args, const detail::Problem& pr) {
  return launch_varlen_config<kHeadDim, Element, /*kChunksAndSequsedQ=*/false, kHeadDimV>(args, pr);
}

// Calls with attention_chunk > 0 or seqused_q, dense batches too: the variable-length kernels' variant
// for them, so that no other kernel carries their tests (FwdTraits::kChunksAndSequsedQ).
template <int kHeadDim, typename Element, int kHeadDimV>
Status launch_shipped_chunks_seqused_q_forward(const FwdArgs& args, const detail::Problem& pr) {
  return launch_varlen_config<kHeadDim, Element, /*kChunksAndSequsedQ=*/true, kHeadDimV>(args, pr);
}

// Decoding steps at head dims 136-256 (fits_decoding_kernel, params_builder.hpp): the d 256
// variable-length kernel's decoding-only variant (FwdTraits::kDecodingOnly), which packs GQA and splits.
template <int kHeadDim, typename Element>
Status launch_shipped_decoding_forward(const FwdArgs& args, const detail::Problem& pr) {
  static_assert(kHeadDim == 256, "the decoding-only variant: d 256");
  return launch_forward<DecodingTraits256<Element>>(args, pr);
}

}  // namespace hopattn::sm90
