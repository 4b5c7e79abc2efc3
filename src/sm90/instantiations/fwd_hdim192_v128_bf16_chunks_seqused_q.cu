// One forward instantiation per file so the build compiles them in parallel: q/k 192 with V and O
// tiles of v's 128 columns (DeepSeek's layers), the kernels for attention_chunk and seqused_q.
#include "sm90/fwd/shipped_configs.cuh"

namespace hopattn::sm90 {
template Status launch_shipped_chunks_seqused_q_forward<192, __nv_bfloat16, 128>(const FwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
