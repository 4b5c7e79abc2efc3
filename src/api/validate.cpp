// STUB: replaced by the validation work (issue 2). Every check lives here.
#include "api/problem.hpp"

namespace hopattn::detail {

Status validate_forward(const FwdArgs&, Problem*) {
  return Status(StatusCode::kUnsupported, "validation not implemented yet");
}
Status validate_backward(const BwdArgs&, Problem*) {
  return Status(StatusCode::kUnsupported, "validation not implemented yet");
}

}  // namespace hopattn::detail
