// Division by a run-time constant as a multiply-high and a shift (Granlund-Montgomery): the tile
// scheduler decodes tile indices in the producer thread, which runs on very few registers, and a
// hardware-less 32-bit division costs a long instruction sequence and several temporaries.
// Exact for every dividend in [0, 2^31) and divisor in [1, 2^31).
#pragma once

#include <cstdint>

#include "sm90/tile/smem_layout.hpp"  // HOPATTN_HOST_DEVICE

namespace hopattn::sm90 {

struct FastDivisor {
  std::uint32_t divisor = 1;
  std::uint32_t multiplier = 0;
  std::uint32_t shift = 0;

  FastDivisor() = default;
  // d = 0 gives a divisor that fwd_params_error reports instead of a host crash.
  explicit FastDivisor(std::uint32_t d) : divisor(d) {
    if (d == 0) return;
    // shift = ceil(log2(d)); multiplier = floor(2^32 (2^shift - d) / d) + 1.
    while ((std::uint64_t{1} << shift) < d) ++shift;
    multiplier = static_cast<std::uint32_t>(((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d)) / d + 1);
  }

  HOPATTN_HOST_DEVICE std::uint32_t divide(std::uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t high = __umulhi(n, multiplier);
#else
    const std::uint32_t high = static_cast<std::uint32_t>((std::uint64_t{n} * multiplier) >> 32);
#endif
    return (high + n) >> shift;
  }
};

}  // namespace hopattn::sm90
