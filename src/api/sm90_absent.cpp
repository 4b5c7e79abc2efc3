// Stands in for the sm_90a kernels in a build configured with HOPATTN_SM90=OFF.
#ifndef HOPATTN_WITH_SM90
#include "sm90/sm90.hpp"

namespace hopattn::sm90 {

namespace {
Status no_kernels() {
  return Status(StatusCode::kUnsupported,
                "this build of hopattn has no sm_90a kernels (configured with HOPATTN_SM90=OFF)");
}
}  // namespace

Status forward(const FwdArgs&, const detail::Problem&) { return no_kernels(); }
Status backward(const BwdArgs&, const detail::Problem&) { return no_kernels(); }

}  // namespace hopattn::sm90
#endif
