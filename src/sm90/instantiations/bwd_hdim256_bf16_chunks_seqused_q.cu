// One backward instantiation per file so the build compiles them in parallel: the kernels for
// attention_chunk and seqused_q.
#include "sm90/bwd/launch.cuh"

namespace hopattn::sm90 {
template Status launch_backward<256, __nv_bfloat16, false, true>(const BwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
