// Host-side creation of TMA tensor maps. cuTensorMapEncodeTiled is a driver API function: we reach it
// through the runtime's driver entry point, so the library does not link against libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "hopattn/hopattn.hpp"

namespace hopattn::sm90 {

// A (batch, rows, heads, cols) tensor with contiguous cols, as a 4D map of boxes of
// box_cols x box_rows (one head, one batch) with the 128-byte swizzle (or `swizzle`); out-of-bounds
// rows read 0.
struct BshdView {
  const void* data;
  CUtensorMapDataType dtype;
  int element_bytes;
  std::int64_t batch, rows, heads, cols;
  std::int64_t batch_stride, row_stride, head_stride;  // elements
};

Status make_tensor_map(CUtensorMap* map, const BshdView& view, int box_cols, int box_rows,
                       CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B);

// The same tensor for GQA-packed Q tiles (fwd/packed_gqa.cuh): a 5D map (cols, head % ratio, head /
// ratio, row, batch) whose box of box_cols x ratio x 1 x box_rows, loaded at (col, 0, kv_head, row0,
// batch), holds rows row0 .. row0 + box_rows - 1 of every query head of K/V head kv_head, row-major:
// tile row r is query row row0 + r / ratio of head kv_head * ratio + r % ratio. Rows past the tensor
// read 0.
Status make_packed_q_map(CUtensorMap* map, const BshdView& view, int box_cols, int ratio, int box_rows);

// The same tensor as a 5D map (cols, row % 4, row / 4, head, batch) whose box of box_cols x 2 x 4 is
// the 8 rows 4c + e + start (c = 0..3, e = 0..1) for coordinates (col, start % 4, first / 4, ...):
// with start % 4 = 2a it loads the rows the FP8 kernel's permuted K wants in shared-memory rows
// 8a .. 8a + 7 of a 16-row group (fwd_fp8/fp8_layout.hpp, key_of_s_column). Rows past the last whole
// group of 4 are out of bounds for it: callers load only groups that lie entirely inside.
Status make_permuted_rows_map(CUtensorMap* map, const BshdView& view, int box_cols);

// The same permutation for a whole block of box_rows rows (a multiple of 16) in one box: a 5D map
// (cols of every head, row % 2, row / 4 % 4, row / 2 % 2, row / 16 of every batch) with box
// box_cols x 2 x 4 x 2 x box_rows / 16, loaded at (head * cols + col, 0, 0, 0, batch * rows / 16 +
// first / 16). Five dimensions leave none for heads and batches, so it needs both folded into
// the others: heads side by side in a row (head stride == cols), and one batch or batches back to
// back (batch stride == rows x row stride) with rows a multiple of 16; permuted_block_map_applies
// says whether.
bool permuted_block_map_applies(const BshdView& view);
Status make_permuted_block_map(CUtensorMap* map, const BshdView& view, int box_cols, int box_rows);

}  // namespace hopattn::sm90
