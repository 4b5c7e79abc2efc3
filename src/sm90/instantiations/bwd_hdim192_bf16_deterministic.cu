// One backward instantiation per file so the build compiles them in parallel.
#include "sm90/bwd/launch.cuh"

namespace hopattn::sm90 {
template Status launch_backward<192, __nv_bfloat16, true>(const BwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
