// Host entry of the backward kernels for one (head dim, element type, variable lengths or not); each
// instantiation lives in its own .cu file in src/sm90/instantiations so the build compiles them in
// parallel.
#pragma once

#include "api/problem.hpp"

namespace hopattn::sm90 {

// kVarlen: the variable-length kernels (cu_seqlens_q / cu_seqlens_k / seqused_k). kDeterministic: the
// kernels that sum dq in a fixed order (BwdArgs::deterministic).
template <int kHeadDim, typename Element, bool kVarlen = false, bool kDeterministic = false>
Status launch_backward(const BwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::sm90
