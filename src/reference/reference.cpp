// STUB: replaced by the reference backend work (issue 2).
#include "reference/reference.hpp"

namespace hopattn::reference {

Status forward(const FwdArgs&, const detail::Problem&) {
  return Status(StatusCode::kUnsupported, "reference forward not implemented yet");
}
Status backward(const BwdArgs&, const detail::Problem&) {
  return Status(StatusCode::kUnsupported, "reference backward not implemented yet");
}

}  // namespace hopattn::reference
