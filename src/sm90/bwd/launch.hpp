// Host entry of the backward kernels for one (head dim, element type), dense or variable-length
// batches alike; each instantiation lives in its own .cu file in src/sm90/instantiations so the build
// compiles them in parallel.
#pragma once

#include "api/problem.hpp"

namespace hopattn::sm90 {

// kDeterministic: the kernels that sum dq in a fixed order (BwdArgs::deterministic).
// kChunksAndSequsedQ: the kernels for attention_chunk and seqused_q (BwdTraits), not deterministic.
// kHeadDimV: the width of the V and dO tiles and of dV (BwdTraits; narrower than kHeadDim at 192 / 128).
template <int kHeadDim, typename Element, bool kDeterministic = false, bool kChunksAndSequsedQ = false,
          int kHeadDimV = kHeadDim>
Status launch_backward(const BwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::sm90
