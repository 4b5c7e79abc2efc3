// Host-side creation of TMA tensor maps. cuTensorMapEncodeTiled is a driver API function: we reach it
// through the runtime's driver entry point, so the library does not link against libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "hopattn/hopattn.hpp"

namespace hopattn::sm90 {

// A (batch, rows, heads, cols) tensor with contiguous cols, as a 4D map of boxes of
// box_cols x box_rows (one head, one batch) with the 128-byte swizzle; out-of-bounds rows read 0.
struct BshdView {
  const void* data;
  CUtensorMapDataType dtype;
  int element_bytes;
  std::int64_t batch, rows, heads, cols;
  std::int64_t batch_stride, row_stride, head_stride;  // elements
};

Status make_tensor_map(CUtensorMap* map, const BshdView& view, int box_cols, int box_rows);

}  // namespace hopattn::sm90
