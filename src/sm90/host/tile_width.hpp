// The kernel tile width a head dim runs in, shared by the forward (16-bit and FP8) and backward dispatch.
#pragma once

#include <type_traits>

#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::sm90 {

// launch(std::integral_constant<int, W>{}) for the narrowest tile width W of 64, 128, 192 and 256 that
// holds head_dim (validation lets through at most 256). A head dim between them runs in the next wider
// kernel: its TMA loads zero-fill the columns past head_dim, which add nothing to q.k or to P V, and its
// stores leave them out.
template <class Launch>
Status launch_at_tile_width(int head_dim, Launch&& launch) {
  if (head_dim <= 64) return launch(std::integral_constant<int, 64>{});
  if (head_dim <= 128) return launch(std::integral_constant<int, 128>{});
  if (head_dim <= 192) return launch(std::integral_constant<int, 192>{});
  return launch(std::integral_constant<int, 256>{});
}

// The one pair of head dims with kernels of v's own width: q/k at the 192 tile with v at most 128
// (DeepSeek's 192 / 128). The forward's V and O tiles and the backward's V and dO tiles are then 128
// wide, so that P V, dP and dV skip the zero-filled columns.
inline bool takes_v128_kernels(const detail::Problem& pr) {
  return pr.head_dim > 128 && pr.head_dim <= 192 && pr.head_dim_v <= 128;
}

}  // namespace hopattn::sm90
