// Host launch of the forward kernel for one (head dim, element type); one instantiation per .cu file
// in src/sm90/instantiations so they compile in parallel.
#pragma once

#include "api/problem.hpp"

namespace hopattn::sm90 {

template <int kHeadDim, typename Element>
Status launch_forward(const FwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::sm90
