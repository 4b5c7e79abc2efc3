// 32-bit shared-memory loads and stores by shared-window address (what smem_address returns), for
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

}  // namespace hopattn::sm90
