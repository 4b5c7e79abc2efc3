// Reductions into global memory straight from registers.
#pragma once

namespace hopattn::sm90 {

// *dst += {x, y, z, w}, four floats in one L2 reduction (sm_90: red with a vector of f32); dst
// 16-byte aligned. Not waited for: the kernel's end orders it before any later kernel's reads.
__device__ __forceinline__ void red_add_f32x4(float* dst, float x, float y, float z, float w) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(x), "f"(y), "f"(z), "f"(w)
               : "memory");
}

}  // namespace hopattn::sm90
