// The MLA forward (FwdArgs::qv at q/k head dim 64, v 512): one instantiation per element type
// (instantiations/mla_forward_*.cu); forward.cu routes qv calls here.
#pragma once

#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::sm90 {

template <typename Element>
Status launch_mla_forward(const FwdArgs& args, const detail::Problem& pr);

}  // namespace hopattn::sm90
