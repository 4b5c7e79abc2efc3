#include "status_error.hpp"

#include <nanobind/nanobind.h>

namespace hopattn::python {

void raise_if_error(const Status& status) {
  PyObject* type = nullptr;
  switch (status.code()) {
    case StatusCode::kOk: return;
    case StatusCode::kInvalidArgument: type = PyExc_ValueError; break;
    case StatusCode::kUnsupported: type = PyExc_NotImplementedError; break;
    case StatusCode::kNoDevice:
    case StatusCode::kCudaError: type = PyExc_RuntimeError; break;
  }
  if (type == nullptr) type = PyExc_RuntimeError;  // a status code newer than this binding
  PyErr_SetString(type, status.message().c_str());
  throw nanobind::python_error();
}

}  // namespace hopattn::python
