// Chunked attention (Problem::attention_chunk, 0 = off): row i sees only the keys of the chunk
// [c * chunk, (c + 1) * chunk) that holds its diagonal key i + seqlen_k - seqlen_q. The forward's masks
// and block ranges and the backward's (bwd/block_range.hpp) narrow a row's window by it. Host and
// device, so that the CPU tests can check the block bounds built on it.
#pragma once

#include <cstdint>

#include "sm90/tile/fast_divisor.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// The first key of the chunk holding `diagonal` (chunk > 0). A diagonal before key 0 (seqlen_q >
// seqlen_k) lies in a negative chunk, which ends at or before key 0: its row sees no key.
HOPATTN_HOST_DEVICE constexpr int chunk_first_key(int diagonal, int chunk) {
  return (diagonal >= 0 ? diagonal / chunk : -((-diagonal + chunk - 1) / chunk)) * chunk;
}

// x, where the compiler cannot see through it: a value computed from it stays where it is computed
// instead of being hoisted out of a loop and held in a register across it.
HOPATTN_HOST_DEVICE inline int opaque(int x) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+r"(x));
#endif
  return x;
}

// chunk_first_key as the per-element masks compute it: a multiply-high division (FastDivisor) of the
// diagonal moved to non-negative by bias, a multiple of the chunk >= seqlen_q (no diagonal is below
// -seqlen_q). A 32-bit division per row there spilled the d 128 kernels without warp specialization.
// Exact where chunk_first_key is, for diagonal + bias < 2^31.
struct ChunkDivisor {
  FastDivisor chunk;  // divisor attention_chunk; unused when chunks are off
  int bias = 0;

  ChunkDivisor() = default;
  ChunkDivisor(int attention_chunk, int seqlen_q)
      : chunk(static_cast<std::uint32_t>(attention_chunk > 0 ? attention_chunk : 1)),
        bias(attention_chunk > 0 ? (seqlen_q + attention_chunk - 1) / attention_chunk * attention_chunk : 0) {}

  HOPATTN_HOST_DEVICE int first_key(int diagonal) const {
    return static_cast<int>(chunk.divide(static_cast<std::uint32_t>(diagonal + bias)) * chunk.divisor) - bias;
  }
  HOPATTN_HOST_DEVICE int size() const { return static_cast<int>(chunk.divisor); }
};

}  // namespace hopattn::sm90
