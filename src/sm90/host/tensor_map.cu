#include "sm90/host/tensor_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>

namespace hopattn::sm90 {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_entry_point() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      ptr = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// One tiled map with the given swizzle; out-of-bounds elements read 0.
Status encode_swizzled(CUtensorMap* map, const BshdView& view, cuuint32_t rank, const cuuint64_t* dims,
                       const cuuint64_t* byte_strides, const cuuint32_t* box,
                       CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled_entry_point();
  if (encode == nullptr) {
    return Status(StatusCode::kCudaError, "the CUDA driver does not provide cuTensorMapEncodeTiled (TMA)");
  }
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUresult r = encode(map, view.dtype, rank, const_cast<void*>(view.data), dims, byte_strides, box, element_strides,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status(StatusCode::kCudaError,
                  "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r)) +
                      " (strides must be multiples of 16 bytes, base 16-byte aligned)");
  }
  return Status::Ok();
}

// A zero extent is not encodable; such dimensions are never loaded, so 1 is as good.
cuuint64_t at_least_one(std::int64_t x) { return static_cast<cuuint64_t>(x < 1 ? 1 : x); }

}  // namespace

Status make_tensor_map(CUtensorMap* map, const BshdView& view, int box_cols, int box_rows,
                       CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[4] = {at_least_one(view.cols), at_least_one(view.rows), at_least_one(view.heads),
                              at_least_one(view.batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(view.row_stride * view.element_bytes),
                                 static_cast<cuuint64_t>(view.head_stride * view.element_bytes),
                                 static_cast<cuuint64_t>(view.batch_stride * view.element_bytes)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1, 1};
  return encode_swizzled(map, view, 4, dims, strides, box, swizzle);
}

Status make_packed_q_map(CUtensorMap* map, const BshdView& view, int box_cols, int ratio, int box_rows) {
  const cuuint64_t dims[5] = {at_least_one(view.cols), static_cast<cuuint64_t>(ratio),
                              at_least_one(view.heads / ratio), at_least_one(view.rows), at_least_one(view.batch)};
  const cuuint64_t strides[4] = {static_cast<cuuint64_t>(view.head_stride * view.element_bytes),
                                 static_cast<cuuint64_t>(ratio * view.head_stride * view.element_bytes),
                                 static_cast<cuuint64_t>(view.row_stride * view.element_bytes),
                                 static_cast<cuuint64_t>(view.batch_stride * view.element_bytes)};
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(ratio), 1,
                             static_cast<cuuint32_t>(box_rows), 1};
  return encode_swizzled(map, view, 5, dims, strides, box);
}

Status make_permuted_rows_map(CUtensorMap* map, const BshdView& view, int box_cols) {
  const std::int64_t row_bytes = view.row_stride * view.element_bytes;
  const cuuint64_t dims[5] = {at_least_one(view.cols), 4, at_least_one(view.rows / 4), at_least_one(view.heads),
                              at_least_one(view.batch)};
  const cuuint64_t strides[4] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(4 * row_bytes),
                                 static_cast<cuuint64_t>(view.head_stride * view.element_bytes),
                                 static_cast<cuuint64_t>(view.batch_stride * view.element_bytes)};
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(box_cols), 2, 4, 1, 1};
  return encode_swizzled(map, view, 5, dims, strides, box);
}

bool permuted_block_map_applies(const BshdView& view) {
  // One batch folds at any length: only blocks wholly inside the keys are loaded through the map.
  const bool batches_fold =
      view.batch == 1 || (view.rows % 16 == 0 && view.batch_stride == view.rows * view.row_stride);
  return view.head_stride == view.cols && batches_fold;
}

Status make_permuted_block_map(CUtensorMap* map, const BshdView& view, int box_cols, int box_rows) {
  const std::int64_t row_bytes = view.row_stride * view.element_bytes;
  const cuuint64_t dims[5] = {at_least_one(view.heads * view.cols), 2, 4, 2, at_least_one(view.batch * view.rows / 16)};
  const cuuint64_t strides[4] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(4 * row_bytes),
                                 static_cast<cuuint64_t>(2 * row_bytes), static_cast<cuuint64_t>(16 * row_bytes)};
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(box_cols), 2, 4, 2, static_cast<cuuint32_t>(box_rows / 16)};
  return encode_swizzled(map, view, 5, dims, strides, box);
}

}  // namespace hopattn::sm90
