// Warpgroup matrix multiply-accumulate (PTX wgmma.*, sm_90a). A warpgroup is 4 consecutive warps
// starting at a warp index divisible by 4; every instruction here is executed by all 128 threads.
#pragma once

#include <cstdint>

namespace hopattn::sm90 {

#include "sm90/arch/wgmma_instructions.inc"

// wgmma.fence: orders this warpgroup's register/smem writes before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// wgmma.commit_group: closes the group of wgmmas issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// wgmma.wait_group N: waits until at most N committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Stores `value` to the shared-memory word at `slot` (never read back). ptxas moves a wgmma wait up
// past arithmetic it does not depend on, e.g. above a softmax's max reduction, which then waits for
// the GEMM instead of running beside it; it does not move the wait above a shared store, and this
// store needs `value`: so a wgmma_wait after it stays after the instructions that computed `value`.
__device__ __forceinline__ void keep_next_wait_after(float value, float* slot) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(static_cast<std::uint32_t>(__cvta_generic_to_shared(slot))),
               "f"(value)
               : "memory");
}

// The compiler does not know that wgmma reads/writes registers asynchronously. Pinning the registers
// with an empty asm after wgmma_wait (and before issue) keeps it from moving their reads/writes
// across the asynchronous window.
template <int kCount>
__device__ __forceinline__ void pin_registers(float (&regs)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(regs[i])::"memory");
}
template <int kCount>
__device__ __forceinline__ void pin_registers(std::uint32_t (&regs)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(regs[i])::"memory");
}

template <int kRows, int kCols>
__device__ __forceinline__ void pin_registers(std::uint32_t (&regs)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) pin_registers(regs[i]);
}

// Dispatch from (N, element type) to the generated instruction wrappers. A K-major or, with
// kAMNMajor, MN-major (V^T of a decoding tile's O^T = V^T P^T); B K-major (K of S = Q K^T) or, with
// kBMNMajor, MN-major (the backward's K of dQ = dS K).
template <int kN, bool kBf16, bool kBMNMajor = false, bool kAMNMajor = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                         int accumulate) {
  constexpr int kTransposeB = kBMNMajor ? 1 : 0;
  constexpr int kTransposeA = kAMNMajor ? 1 : 0;
#define HOPATTN_WGMMA_SS_CASE(N)                                                                               \
  if constexpr (kN == N) {                                                                                     \
    if constexpr (kBf16) wgmma_m64n##N##k16_ss_bf16<kTransposeB, kTransposeA>(d, desc_a, desc_b, accumulate);  \
    else wgmma_m64n##N##k16_ss_f16<kTransposeB, kTransposeA>(d, desc_a, desc_b, accumulate);                   \
    return;                                                                                                    \
  }
  HOPATTN_WGMMA_SS_CASE(8)
  HOPATTN_WGMMA_SS_CASE(16)
  HOPATTN_WGMMA_SS_CASE(32)
  HOPATTN_WGMMA_SS_CASE(48)
  HOPATTN_WGMMA_SS_CASE(64)
  HOPATTN_WGMMA_SS_CASE(80)
  HOPATTN_WGMMA_SS_CASE(96)
  HOPATTN_WGMMA_SS_CASE(128)
  HOPATTN_WGMMA_SS_CASE(176)
  HOPATTN_WGMMA_SS_CASE(192)
  HOPATTN_WGMMA_SS_CASE(256)
#undef HOPATTN_WGMMA_SS_CASE
  static_assert(kN == 8 || kN == 16 || kN == 32 || kN == 48 || kN == 64 || kN == 80 || kN == 96 || kN == 128 || kN == 176 ||
                    kN == 192 || kN == 256,
                "no wgmma wrapper generated for this N: add it to tools/gen_wgmma.py");
}

// A from registers; B MN-major (kBKMajor false: V of O = P V) or K-major (true: K of S = Q K^T).
template <int kN, bool kBf16, bool kBKMajor = false>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                         int accumulate) {
  constexpr int kTransposeB = kBKMajor ? 0 : 1;
#define HOPATTN_WGMMA_RS_CASE(N)                                                                \
  if constexpr (kN == N) {                                                                      \
    if constexpr (kBf16) wgmma_m64n##N##k16_rs_bf16<kTransposeB>(d, a, desc_b, accumulate);     \
    else wgmma_m64n##N##k16_rs_f16<kTransposeB>(d, a, desc_b, accumulate);                      \
    return;                                                                                     \
  }
  HOPATTN_WGMMA_RS_CASE(32)
  HOPATTN_WGMMA_RS_CASE(48)
  HOPATTN_WGMMA_RS_CASE(64)
  HOPATTN_WGMMA_RS_CASE(80)
  HOPATTN_WGMMA_RS_CASE(96)
  HOPATTN_WGMMA_RS_CASE(128)
  HOPATTN_WGMMA_RS_CASE(176)
  HOPATTN_WGMMA_RS_CASE(192)
  HOPATTN_WGMMA_RS_CASE(256)
#undef HOPATTN_WGMMA_RS_CASE
}

}  // namespace hopattn::sm90
