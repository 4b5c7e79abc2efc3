// One forward instantiation per file so the build compiles them in parallel.
#include "sm90/fwd_fp8/launch.cuh"

namespace hopattn::sm90 {
template Status launch_forward_fp8_decoding<256>(const FwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
