// Reductions into global memory without a return value (PTX red): the backward adds each CTA's dQ
// share into a float32 workspace that CTAs of other key blocks add to as well.
#pragma once

namespace hopattn::sm90 {

// address[0] += a, address[1] += b, as one vector reduction (sm_90: red.global.add.v2.f32); address
// 8-byte aligned.
__device__ __forceinline__ void red_add_pair(float* address, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(address), "f"(a), "f"(b) : "memory");
}

}  // namespace hopattn::sm90
