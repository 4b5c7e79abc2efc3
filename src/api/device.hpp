// What the CUDA runtime says about the GPU: is it a Hopper (sm_90) part this build can run on.
#pragma once

#include "hopattn/hopattn.hpp"

namespace hopattn::detail {

// Ok when device `device_index` exists, is compute capability 9.0 and this build has sm_90a kernels;
// otherwise a kNoDevice/kUnsupported status saying which of these failed.
Status require_hopper(int device_index);

}  // namespace hopattn::detail
