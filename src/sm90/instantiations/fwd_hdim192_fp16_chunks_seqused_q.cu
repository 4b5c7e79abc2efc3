// One forward instantiation per file so the build compiles them in parallel: the kernels for
// attention_chunk and seqused_q.
#include "sm90/fwd/shipped_configs.cuh"

namespace hopattn::sm90 {
template Status launch_shipped_chunks_seqused_q_forward<192, __half>(const FwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
