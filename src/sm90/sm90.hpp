// Entry point of the sm_90a kernels. Without HOPATTN_WITH_SM90 (HOPATTN_SM90=OFF) the dispatch still
// links: forward() and backward() answer kUnsupported.
#pragma once

#include "api/problem.hpp"

namespace hopattn::sm90 {

Status forward(const FwdArgs& args, const detail::Problem& problem);
Status backward(const BwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::sm90
