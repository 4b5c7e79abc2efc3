// An owning host buffer of any Dtype for tests, plus helpers to read strided Tensor views.
//   HostTensor q(Dtype::kBFloat16, {2, 7, 4, 64});
//   q.fill_random(seed);          // uniform in [-1, 1), already rounded to the dtype
//   out.poison();                 // NaN everywhere (INT32_MIN for int32), so unwritten output shows
//   std::vector<double> x = q.to_double();
//   hopattn::Tensor view = q.tensor();   // contiguous view; view(shape, stride)/select() give strided ones
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hopattn/hopattn.hpp"
#include "reference/numeric.hpp"

namespace hopattn::test {

// Logical (row-major) index -> element offset of a strided view.
inline std::int64_t strided_offset(const Tensor& t, std::int64_t flat) {
  std::int64_t offset = 0;
  for (int d = t.rank - 1; d >= 0; --d) {
    offset += (flat % t.shape[d]) * t.stride[d];
    flat /= t.shape[d];
  }
  return offset;
}

inline void* element_ptr(const Tensor& t, std::int64_t flat) {
  return static_cast<char*>(t.data) + strided_offset(t, flat) * static_cast<std::int64_t>(dtype_size(t.dtype));
}

// Every element of a host view, in row-major logical order.
inline std::vector<double> read_tensor(const Tensor& t) {
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) values[i] = reference::load_scalar(element_ptr(t, i), t.dtype);
  return values;
}

inline void write_tensor(const Tensor& t, const std::vector<double>& values) {
  if (static_cast<std::int64_t>(values.size()) != t.numel()) throw std::invalid_argument("write_tensor: size mismatch");
  for (std::int64_t i = 0; i < t.numel(); ++i) reference::store_scalar(element_ptr(t, i), t.dtype, values[i]);
}

// The view with dimension `dim` fixed at `index` (rank drops by one), e.g. q out of a packed qkv.
inline Tensor select(const Tensor& t, int dim, std::int64_t index) {
  Tensor s = t;
  s.data = static_cast<char*>(t.data) + index * t.stride[dim] * static_cast<std::int64_t>(dtype_size(t.dtype));
  s.rank = t.rank - 1;
  for (int d = dim; d < s.rank; ++d) {
    s.shape[d] = t.shape[d + 1];
    s.stride[d] = t.stride[d + 1];
  }
  s.shape[s.rank] = 0;
  s.stride[s.rank] = 0;
  return s;
}

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(Dtype dtype, std::vector<std::int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
    numel_ = 1;
    for (std::int64_t extent : shape_) numel_ *= extent;
    bytes_.assign(static_cast<std::size_t>(numel_) * dtype_size(dtype_), 0);
  }

  Dtype dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return numel_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }

  // Contiguous view of the whole buffer (the view does not own; keep this object alive).
  Tensor tensor() const {
    if (shape_.size() > static_cast<std::size_t>(kMaxRank)) throw std::invalid_argument("HostTensor: rank > kMaxRank");
    Tensor t;
    t.data = const_cast<unsigned char*>(bytes_.data());
    t.dtype = dtype_;
    t.rank = static_cast<int>(shape_.size());
    std::int64_t stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      t.shape[d] = shape_[d];
      t.stride[d] = stride;
      stride *= shape_[d];
    }
    return t;
  }

  // Any strided view into the buffer, starting `offset` elements in (e.g. q inside a packed qkv).
  Tensor view(std::initializer_list<std::int64_t> shape, std::initializer_list<std::int64_t> stride,
              std::int64_t offset = 0) const {
    if (shape.size() != stride.size() || shape.size() > static_cast<std::size_t>(kMaxRank))
      throw std::invalid_argument("HostTensor::view: shape and stride need the same rank <= kMaxRank");
    Tensor t;
    t.data = at(offset);
    t.dtype = dtype_;
    t.rank = static_cast<int>(shape.size());
    std::copy(shape.begin(), shape.end(), t.shape);
    std::copy(stride.begin(), stride.end(), t.stride);
    return t;
  }

  double get(std::int64_t flat) const { return reference::load_scalar(at(flat), dtype_); }
  void set(std::int64_t flat, double value) { reference::store_scalar(at(flat), dtype_, value); }

  std::vector<double> to_double() const { return read_tensor(tensor()); }
  void from_double(const std::vector<double>& values) { write_tensor(tensor(), values); }

  // Uniform values in [lo, hi), rounded to the dtype (int32: integers in [lo, hi]).
  void fill_random(std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
    std::mt19937_64 rng(seed);
    if (dtype_ == Dtype::kInt32) {
      std::uniform_int_distribution<std::int64_t> dist(static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi));
      for (std::int64_t i = 0; i < numel_; ++i) set(i, static_cast<double>(dist(rng)));
      return;
    }
    std::uniform_real_distribution<double> dist(lo, hi);
    for (std::int64_t i = 0; i < numel_; ++i) set(i, dist(rng));
  }

  // NaN in every element (INT32_MIN for int32), so an element the callee forgot to write shows.
  void poison() {
    const double value = dtype_ == Dtype::kInt32 ? static_cast<double>(INT32_MIN)
                                                 : std::numeric_limits<double>::quiet_NaN();
    for (std::int64_t i = 0; i < numel_; ++i) set(i, value);
  }

 private:
  unsigned char* at(std::int64_t flat) const {
    if (flat < 0 || flat >= numel_) throw std::out_of_range("HostTensor: index " + std::to_string(flat));
    return const_cast<unsigned char*>(bytes_.data()) + flat * static_cast<std::int64_t>(dtype_size(dtype_));
  }

  Dtype dtype_ = Dtype::kFloat32;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_ = 0;
  std::vector<unsigned char> bytes_;
};

}  // namespace hopattn::test
