// CUDA runtime errors as hopattn::Status, so the bench reports them per row instead of aborting.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "hopattn/hopattn.hpp"

namespace hopattn::bench {

inline Status cuda_status(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(call) + ": " + cudaGetErrorString(error));
}

}  // namespace hopattn::bench

#define HOPATTN_BENCH_CHECK_CUDA(call)                                                   \
  do {                                                                                   \
    if (::hopattn::Status status_ = ::hopattn::bench::cuda_status((call), #call); !status_.ok()) \
      return status_;                                                                    \
  } while (0)
