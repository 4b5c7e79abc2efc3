// Host launch of the FP8 forward kernel for one head dim (src/sm90/instantiations/fwd_fp8_hdim*.cu).
#pragma once

#include "api/problem.hpp"

namespace hopattn::sm90 {

template <int kHeadDim>
Status launch_forward_fp8(const FwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::sm90
