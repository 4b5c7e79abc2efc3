// forward()/backward(): validate once, then hand the normalized problem to the backend that owns the
// tensors' memory: the CPU reference for host tensors, the sm_90a kernels for CUDA tensors.
#include "api/device.hpp"
#include "api/problem.hpp"
#include "reference/reference.hpp"
#include "sm90/sm90.hpp"

namespace hopattn {

Status forward(const FwdArgs& args) {
  detail::Problem problem;
  if (Status s = detail::validate_forward(args, &problem); !s.ok()) return s;
  if (problem.device == DeviceType::kHost) return reference::forward(args, problem);
  if (Status s = detail::require_hopper(problem.device_index); !s.ok()) return s;
  return sm90::forward(args, problem);
}

Status backward(const BwdArgs& args) {
  detail::Problem problem;
  if (Status s = detail::validate_backward(args, &problem); !s.ok()) return s;
  if (problem.device == DeviceType::kHost) return reference::backward(args, problem);
  if (Status s = detail::require_hopper(problem.device_index); !s.ok()) return s;
  return sm90::backward(args, problem);
}

}  // namespace hopattn
