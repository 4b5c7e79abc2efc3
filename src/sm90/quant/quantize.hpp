// GPU side of quantize_fp8 for CUDA tensors (src/sm90/quant/quantize.cu). Bit-identical to the CPU
// quantizer (src/reference/fp8_quantize.cpp) for the same inputs.
#pragma once

#include "api/quantize_plan.hpp"

namespace hopattn::sm90 {

// Enqueues the quantization of the plan's three jobs on `stream` (a cudaStream_t).
Status quantize_fp8(const detail::QuantizePlan& plan, void* stream);

}  // namespace hopattn::sm90
