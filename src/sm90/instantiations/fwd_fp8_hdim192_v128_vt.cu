// One FP8 forward instantiation per file so the build compiles them in parallel: v keys-contiguous.
#include "sm90/fwd_fp8/launch.cuh"

namespace hopattn::sm90 {
template Status launch_forward_fp8<192, true, false, 128>(const FwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
