#include "hopattn/hopattn.hpp"

namespace hopattn {

const char* dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32: return "float32";
    case Dtype::kFloat16: return "float16";
    case Dtype::kBFloat16: return "bfloat16";
    case Dtype::kFloat8E4M3: return "float8_e4m3";
    case Dtype::kInt32: return "int32";
  }
  return "unknown";
}

std::size_t dtype_size(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32: return 4;
    case Dtype::kFloat16: return 2;
    case Dtype::kBFloat16: return 2;
    case Dtype::kFloat8E4M3: return 1;
    case Dtype::kInt32: return 4;
  }
  return 0;
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

Tensor make_tensor(void* data, Dtype dtype, std::initializer_list<std::int64_t> shape, DeviceType device,
                   int device_index) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_index = device_index;
  t.rank = static_cast<int>(shape.size() < kMaxRank ? shape.size() : kMaxRank);
  int i = 0;
  for (std::int64_t extent : shape) {
    if (i == t.rank) break;
    t.shape[i++] = extent;
  }
  std::int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

}  // namespace hopattn
