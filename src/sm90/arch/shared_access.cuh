// Shared-memory loads and stores by shared-window address (what smem_address returns), for
// code that computes swizzled offsets itself: a 32-bit address keeps the arithmetic in one register
// and lets the compiler emit plain LDS/STS without generic-to-shared conversion.
#pragma once

#include <cstdint>

namespace hopattn::sm90 {

__device__ __forceinline__ std::uint32_t ld_shared_u32(std::uint32_t address) {
  std::uint32_t value;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(value) : "r"(address));
  return value;
}

__device__ __forceinline__ void st_shared_u32(std::uint32_t address, std::uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}

// ldmatrix .x4 (no transpose): lanes 8i..8i+7 give the row addresses (16 bytes each) of 8x8 16-bit
// matrix i; lane t receives in r[i] row t/4, elements 2(t%4) and 2(t%4)+1 of matrix i.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t address, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

}  // namespace hopattn::sm90
