// Host launch of the FP8 forward kernel for one head dim and V layout (kVtFromGlobal: v keys-contiguous),
// dense or variable-length (kVarlen: cu_seqlens_q / cu_seqlens_k / seqused_k; the ordinary v layout only);
// src/sm90/instantiations/fwd_fp8_hdim*.cu.
#pragma once

#include "api/problem.hpp"

namespace hopattn::sm90 {

// kHeadDimV: the V and O tiles' width (Fp8FwdTraits::kHeadDimV): 128 at 192 for DeepSeek's 192 / 128.
template <int kHeadDim, bool kVtFromGlobal, bool kVarlen, int kHeadDimV = kHeadDim>
Status launch_forward_fp8(const FwdArgs& args, const detail::Problem& problem);

template <int kHeadDim, int kHeadDimV = kHeadDim>
Status launch_forward_fp8_chunks_seqused_q(const FwdArgs& args, const detail::Problem& problem);

// Decoding steps of at most 8 rows a tile at head dims 136-256 (shipped: 256; takes_decoding_kernel).
template <int kHeadDim>
Status launch_forward_fp8_decoding(const FwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::sm90
