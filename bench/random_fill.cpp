#include "random_fill.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda_check.hpp"

namespace hopattn::bench {
namespace {

std::uint64_t splitmix64(std::uint64_t* state) {
  std::uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A random code of `dtype`, built from its bit fields: random sign and mantissa, an exponent picked
// from six binades [2^-5, 2^0], so the value lies in [2^-5, 2).
template <typename Code>
Code random_code(std::uint64_t bits, int mantissa_bits, int exponent_bias) {
  const unsigned total_bits = 8 * sizeof(Code);
  const std::uint64_t mantissa = bits & ((1ull << mantissa_bits) - 1);
  const std::uint64_t exponent = static_cast<std::uint64_t>(exponent_bias - 5 + static_cast<int>((bits >> 24) % 6));
  const std::uint64_t sign = (bits >> 40) & 1;
  return static_cast<Code>((sign << (total_bits - 1)) | (exponent << mantissa_bits) | mantissa);
}

void fill_host(unsigned char* out, Dtype dtype, std::int64_t count, std::uint64_t* state) {
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint64_t bits = splitmix64(state);
    switch (dtype) {
      case Dtype::kBFloat16: {
        const auto code = random_code<std::uint16_t>(bits, 7, 127);
        std::memcpy(out + 2 * i, &code, 2);
        break;
      }
      case Dtype::kFloat16: {
        const auto code = random_code<std::uint16_t>(bits, 10, 15);
        std::memcpy(out + 2 * i, &code, 2);
        break;
      }
      case Dtype::kFloat8E4M3:
        out[i] = random_code<std::uint8_t>(bits, 3, 7);
        break;
      case Dtype::kFloat32: {
        const auto code = random_code<std::uint32_t>(bits, 23, 127);
        std::memcpy(out + 4 * i, &code, 4);
        break;
      }
      case Dtype::kInt32: {
        const auto value = static_cast<std::int32_t>(bits % 1000) + 1;
        std::memcpy(out + 4 * i, &value, 4);
        break;
      }
    }
  }
}

}  // namespace

void fill_random_host(void* data, Dtype dtype, std::int64_t count, std::uint64_t seed) {
  fill_host(static_cast<unsigned char*>(data), dtype, count, &seed);
}

Status fill_random_device(void* data, Dtype dtype, std::int64_t count, std::uint64_t seed) {
  const std::size_t element_bytes = dtype_size(dtype);
  auto* bytes = static_cast<unsigned char*>(data);
  const std::int64_t random_count = std::min(count, kRandomElements);
  std::vector<unsigned char> staging(static_cast<std::size_t>(random_count) * element_bytes);
  fill_host(staging.data(), dtype, random_count, &seed);
  HOPATTN_BENCH_CHECK_CUDA(cudaMemcpy(bytes, staging.data(), staging.size(), cudaMemcpyHostToDevice));
  // The rest repeats what is there, doubling on the device.
  for (std::int64_t filled = random_count; filled < count;) {
    const std::int64_t n = std::min(filled, count - filled);
    HOPATTN_BENCH_CHECK_CUDA(cudaMemcpy(bytes + filled * element_bytes, bytes,
                                        static_cast<std::size_t>(n) * element_bytes, cudaMemcpyDeviceToDevice));
    filled += n;
  }
  return Status::Ok();
}

}  // namespace hopattn::bench
