// Host entry of the forward kernels for one (head dim, element type). The tile configuration is
// chosen inside (shipped_configs.cuh); each instantiation lives in its own .cu file in
// src/sm90/instantiations so the build compiles them in parallel.
#pragma once

#include "api/problem.hpp"

namespace hopattn::sm90 {

// kHeadDimV: the V and O tiles' width, where v's head dim is narrower (shipped: 192 / 128, DeepSeek's).
template <int kHeadDim, typename Element, int kHeadDimV = kHeadDim>
Status launch_shipped_forward(const FwdArgs& args, const detail::Problem& problem);

// The same for variable-length batches (cu_seqlens_q / cu_seqlens_k / seqused_k) and paged KV caches
// (page sizes: powers of two from 16); warp-specialized kernels only.
template <int kHeadDim, typename Element, int kHeadDimV = kHeadDim>
Status launch_shipped_varlen_forward(const FwdArgs& args, const detail::Problem& problem);

template <int kHeadDim, typename Element, int kHeadDimV = kHeadDim>
Status launch_shipped_chunks_seqused_q_forward(const FwdArgs& args, const detail::Problem& problem);

// Decoding steps whose tiles hold at most 8 live rows, at head dims 136-256 (shipped: 256).
template <int kHeadDim, typename Element>
Status launch_shipped_decoding_forward(const FwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::sm90
