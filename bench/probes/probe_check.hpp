// PROBE_CHECK(call): the probes' way with a CUDA runtime error: print where and what, exit 1. A probe
// measures one thing from main(); there is nothing to recover to.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define PROBE_CHECK(call)                                                                          \
  do {                                                                                             \
    if (const cudaError_t probe_error_ = (call); probe_error_ != cudaSuccess) {                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(probe_error_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)
