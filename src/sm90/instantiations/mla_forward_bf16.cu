// The MLA forward (qv) for one element type, in a file of its own so the build compiles it in parallel.
#include "sm90/mla/launch.cuh"

namespace hopattn::sm90 {
template Status launch_mla_forward<__nv_bfloat16>(const FwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
