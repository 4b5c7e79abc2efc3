// Scratch memory for one launch, stream-ordered: the forward's split partials
// (src/sm90/fwd/split_merge.cuh), the backward's fp32 workspace (bwd/launch.cuh), the grouped FP8
// kernels' descale plan (fwd_fp8/descale_plan.cuh). It is taken on the launch's stream right before it
// and given back right after it, so launches in flight on other streams never share it. It comes from
// a pool per device that keeps its memory (release threshold: unlimited), so after the first launch
// taking it costs no allocation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "hopattn/hopattn.hpp"

namespace hopattn::sm90 {

Status acquire_split_workspace(int device, std::size_t bytes, cudaStream_t stream, void** workspace);
Status release_split_workspace(void* workspace, cudaStream_t stream);

}  // namespace hopattn::sm90
