// A failed hopattn::Status becomes a Python exception carrying the library's message:
//   kInvalidArgument -> ValueError, kUnsupported -> NotImplementedError,
//   kNoDevice and kCudaError -> RuntimeError.
#pragma once

#include "hopattn/hopattn.hpp"

namespace hopattn::python {

// Call with the GIL held. Returns normally when the status is ok.
void raise_if_error(const Status& status);

}  // namespace hopattn::python
