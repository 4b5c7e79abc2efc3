// One backward instantiation per file so the build compiles them in parallel: q/k 192 with V and dO
// tiles of v's 128 columns (DeepSeek's layers), deterministic.
#include "sm90/bwd/launch.cuh"

namespace hopattn::sm90 {
template Status launch_backward<192, __nv_bfloat16, true, false, 128>(const BwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
