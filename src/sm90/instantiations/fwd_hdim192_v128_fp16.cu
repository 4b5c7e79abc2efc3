// One forward instantiation per file so the build compiles them in parallel: q/k 192 with V and O
// tiles of v's 128 columns (DeepSeek's layers).
#include "sm90/fwd/shipped_configs.cuh"

namespace hopattn::sm90 {
template Status launch_shipped_forward<192, __half, 128>(const FwdArgs&, const detail::Problem&);
}  // namespace hopattn::sm90
