// Turns Python arrays (anything nanobind imports through DLPack or the buffer protocol: torch, JAX,
// CuPy, NumPy) into hopattn::Tensor views without copying, and keeps the imported arrays alive for
// as long as the views are used.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <vector>

#include "hopattn/hopattn.hpp"

namespace hopattn::python {

class ArrayViews {
 public:
  // raw_bits: the Python layer passed float8_e4m3 data as uint8 and bfloat16 data as uint16, because
  // the array library (NumPy with ml_dtypes, or a DLPack producer without those codes) cannot export
  // them. Without it, uint8/uint16 arrays are rejected like any other unsupported element type.
  explicit ArrayViews(bool raw_bits) : raw_bits_(raw_bits) {}

  // Each call raises TypeError (not an array, or an element type hopattn never takes) or ValueError
  // (unsupported memory kind, rank, or a read-only array given as an output), naming `name`.
  Tensor input(nanobind::handle object, const char* name);
  Tensor output(nanobind::handle object, const char* name);
  // None gives nullopt.
  std::optional<Tensor> optional_input(nanobind::handle object, const char* name);
  std::optional<Tensor> optional_output(nanobind::handle object, const char* name);

 private:
  template <typename Array>
  Tensor describe(const Array& array, const char* name) const;

  bool raw_bits_;
  std::vector<nanobind::ndarray<nanobind::ro>> inputs_;
  std::vector<nanobind::ndarray<>> outputs_;
};

}  // namespace hopattn::python
