// CPU reference backend: the same semantics as the sm_90a kernels, accumulated in float64.
// Inputs arrive validated (src/api/validate.cpp); host tensors only. num_splits and the kernel options
// do not change the math and are ignored. backward() recomputes the softmax from q and k in float64
// and does not read args.out or args.lse (they are rounded; the reference differentiates the exact
// forward). Every dq/dk/dv element that no visible (query, key) pair reaches is written as 0.
#pragma once

#include "api/problem.hpp"

namespace hopattn::reference {

Status forward(const FwdArgs& args, const detail::Problem& problem);
Status backward(const BwdArgs& args, const detail::Problem& problem);

}  // namespace hopattn::reference
