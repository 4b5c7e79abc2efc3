// One FP8 forward instantiation per file so the build compiles them in parallel: the kernels for
// attention_chunk and seqused_q.
#include "sm90/fwd_fp8/launch.cuh"

namespace hopattn::sm90 {
template Status launch_forward_fp8_chunks_seqused_q<192, 128>(const FwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
