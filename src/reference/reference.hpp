// CPU reference backend: the same semantics as the sm_90a kernels, accumulated in float64.
// Inputs arrive validated (src/api/validate.cpp); host tensors only.
#pragma once

#include "api/problem.hpp"

namespace hopattn::reference {

Status forward(const FwdArgs& args, const detail::Problem& problem);
Status backward(const BwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::reference
