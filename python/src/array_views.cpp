#include "array_views.hpp"

#include <algorithm>
#include <string>

namespace nb = nanobind;

namespace hopattn::python {
namespace {

// DLPack type codes, spelled out so that nanobind versions predating the float8 codes build too.
constexpr int kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLFloat8E4M3FN = 10;
// DLPack device types.
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3;

const char* const kSupportedDtypes = "float16, bfloat16, float32, float8_e4m3fn (q, k, v) and int32";

std::string dlpack_dtype_name(nb::dlpack::dtype dtype) {
  std::string base;
  switch (static_cast<int>(dtype.code)) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case 5: base = "complex"; break;
    case 6: return "bool";
    default: return "DLPack type code " + std::to_string(static_cast<int>(dtype.code));
  }
  std::string name = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

Dtype hopattn_dtype(nb::dlpack::dtype dtype, bool raw_bits, const char* name) {
  const int code = static_cast<int>(dtype.code);
  if (dtype.lanes == 1) {
    if (code == kDLFloat && dtype.bits == 32) return Dtype::kFloat32;
    if (code == kDLFloat && dtype.bits == 16) return Dtype::kFloat16;
    if (code == kDLBfloat && dtype.bits == 16) return Dtype::kBFloat16;
    if (code == kDLFloat8E4M3FN && dtype.bits == 8) return Dtype::kFloat8E4M3;
    if (code == kDLInt && dtype.bits == 32) return Dtype::kInt32;
    if (raw_bits && code == kDLUInt && dtype.bits == 8) return Dtype::kFloat8E4M3;
    if (raw_bits && code == kDLUInt && dtype.bits == 16) return Dtype::kBFloat16;
  }
  throw nb::type_error((std::string(name) + ": element type " + dlpack_dtype_name(dtype) +
                        " is not supported; hopattn takes " + kSupportedDtypes + " arrays")
                           .c_str());
}

std::string python_type_name(nb::handle object) { return nb::type_name(object.type()).c_str(); }

[[noreturn]] void raise_not_an_array(nb::handle object, const char* name) {
  throw nb::type_error((std::string(name) +
                        ": expected an array with DLPack support (torch.Tensor, jax.Array, "
                        "cupy.ndarray, numpy.ndarray), got " + python_type_name(object))
                           .c_str());
}

}  // namespace

template <typename Array>
Tensor ArrayViews::describe(const Array& array, const char* name) const {
  Tensor tensor;
  tensor.dtype = hopattn_dtype(array.dtype(), raw_bits_, name);
  if (array.ndim() > static_cast<std::size_t>(kMaxRank)) {
    throw nb::value_error((std::string(name) + ": has " + std::to_string(array.ndim()) +
                           " dimensions; hopattn arrays have at most " + std::to_string(kMaxRank))
                              .c_str());
  }
  tensor.rank = static_cast<int>(array.ndim());
  for (int i = 0; i < tensor.rank; ++i) {
    tensor.shape[i] = static_cast<std::int64_t>(array.shape(i));
    tensor.stride[i] = array.stride(i);  // DLPack strides are in elements, as hopattn's
  }
  if (array.size() == 0) {
    // An empty array addresses nothing, and NumPy >= 2.4 exports its strides as all 0, which the
    // library would take for a non-contiguous last dimension: describe it as row-major instead.
    std::int64_t stride = 1;
    for (int i = tensor.rank - 1; i >= 0; --i) {
      tensor.stride[i] = stride;
      stride *= std::max<std::int64_t>(tensor.shape[i], 1);
    }
  }
  tensor.data = const_cast<void*>(static_cast<const void*>(array.data()));
  switch (array.device_type()) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory: the CPU reads it directly
      tensor.device = DeviceType::kHost;
      tensor.device_index = 0;
      break;
    case kDLCUDA:
      tensor.device = DeviceType::kCuda;
      tensor.device_index = array.device_id();
      break;
    default:
      throw nb::value_error((std::string(name) + ": memory of DLPack device type " +
                             std::to_string(array.device_type()) +
                             " is not supported; hopattn takes host (CPU) arrays and CUDA device arrays")
                                .c_str());
  }
  return tensor;
}

Tensor ArrayViews::input(nb::handle object, const char* name) {
  nb::ndarray<nb::ro> array;
  // convert=false: never let nanobind copy; hopattn works on the caller's memory.
  if (!nb::try_cast(object, array, /*convert=*/false)) raise_not_an_array(object, name);
  Tensor tensor = describe(array, name);
  inputs_.push_back(std::move(array));
  return tensor;
}

Tensor ArrayViews::output(nb::handle object, const char* name) {
  nb::ndarray<> array;
  if (!nb::try_cast(object, array, /*convert=*/false)) {
    nb::ndarray<nb::ro> read_only;
    if (nb::try_cast(object, read_only, /*convert=*/false)) {
      throw nb::value_error((std::string(name) + ": is read-only; outputs must be writable arrays").c_str());
    }
    raise_not_an_array(object, name);
  }
  Tensor tensor = describe(array, name);
  outputs_.push_back(std::move(array));
  return tensor;
}

std::optional<Tensor> ArrayViews::optional_input(nb::handle object, const char* name) {
  if (object.is_none()) return std::nullopt;
  return input(object, name);
}

std::optional<Tensor> ArrayViews::optional_output(nb::handle object, const char* name) {
  if (object.is_none()) return std::nullopt;
  return output(object, name);
}

}  // namespace hopattn::python
