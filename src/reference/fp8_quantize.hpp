// CPU side of quantize_fp8: the float32 Walsh-Hadamard transform and the block quantizer, written so
// that every float operation is the one the GPU kernel (src/sm90/quant/quantize.cu) performs, in the
// same order: the two give identical e4m3 codes and scales.
#pragma once

#include <cstdint>

#include "api/quantize_plan.hpp"

namespace hopattn::reference {

// In place, unnormalized: x <- x H for H block-diagonal, one Walsh-Hadamard matrix per block of
// detail::hadamard_block(d) columns (H itself where d is a power of two). Butterfly stages run at strides
// 1, 2, 4, ... below the block; the pair (j, j + stride) becomes (x_j + x_{j+stride}, x_j - x_{j+stride}).
void fwht(float* x, int d);

// In place: x <- x M with M = H diag(s) / sqrt(block), `norm` = 1/sqrt(block) as a float.
void incoherent_transform(float* x, int d, const detail::HadamardSigns& signs, float norm);

// The e4m3 code of x * inverse_scale (detail::inverse_scale of the group's scale), rounded to nearest
// even and saturated to +-448 (cuda_fp8.h's conversion).
std::uint8_t quantize_e4m3(float x, float inverse_scale);

// Quantizes the three jobs of a validated plan on host tensors.
Status quantize_fp8(const detail::QuantizePlan& plan);

}  // namespace hopattn::reference
