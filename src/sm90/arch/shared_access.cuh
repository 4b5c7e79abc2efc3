// Shared-memory matrix loads and stores by shared-window address (what smem_address returns), for code
// that computes swizzled offsets itself: a 32-bit address keeps the arithmetic in one register and lets
// the compiler emit plain LDSM/STSM without generic-to-shared conversion.
#pragma once

#include <cstdint>

namespace hopattn::sm90 {

// Sixteen zero bytes at `address` (16-byte aligned).
__device__ __forceinline__ void store_zero_16b(std::uint32_t address) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(address), "r"(0) : "memory");
}

// Four 8 x 8 matrices of 16-bit elements, one 16-byte row per address: lanes 8i .. 8i+7 address the
// rows of matrix i. Lane t gets in out[i] row t / 4, elements 2 (t % 4) and 2 (t % 4) + 1 of matrix i.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t address, std::uint32_t (&out)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
               : "r"(address));
}

// The same, transposed: lane t gets in out[i] the elements (row 2 (t % 4), column t / 4) in the low
// half and (row 2 (t % 4) + 1, column t / 4) in the high half.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t address, std::uint32_t (&out)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
               : "r"(address));
}

// The store counterpart, not transposed: lanes 8i .. 8i+7 address the rows of matrix i, and lane t
// writes in[i] to row t / 4, bytes 4 (t % 4) .. 4 (t % 4) + 3 of matrix i.
__device__ __forceinline__ void stmatrix_x4(std::uint32_t address, const std::uint32_t (&in)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(in[0]),
               "r"(in[1]), "r"(in[2]), "r"(in[3])
               : "memory");
}

// The store counterpart of ldmatrix_x4_trans: lanes 8i .. 8i+7 address the 8 rows of matrix i in
// memory, and lane t writes in[i]'s low half to (row 2 (t % 4), column t / 4) and its high half to
// (row 2 (t % 4) + 1, column t / 4): a register fragment stored transposed.
__device__ __forceinline__ void stmatrix_x4_trans(std::uint32_t address, const std::uint32_t (&in)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
               "r"(in[0]), "r"(in[1]), "r"(in[2]), "r"(in[3])
               : "memory");
}

// stmatrix_x4_trans with two matrices: lanes 0-7 address matrix 0's rows, lanes 8-15 matrix 1's.
__device__ __forceinline__ void stmatrix_x2_trans(std::uint32_t address, const std::uint32_t (&in)[2]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(address), "r"(in[0]),
               "r"(in[1])
               : "memory");
}

}  // namespace hopattn::sm90
