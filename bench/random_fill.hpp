// Fresh random tensor contents for timing: magnitudes in [2^-5, 2) with random sign, so never zero,
// never NaN and in range for every dtype (fp8 e4m3 included). Built from each dtype's bit fields.
#pragma once

#include <cstdint>

#include "hopattn/hopattn.hpp"

namespace hopattn::bench {

// Fills `count` elements of `dtype` at host pointer `data` (int32 gets 1..1000).
void fill_random_host(void* data, Dtype dtype, std::int64_t count, std::uint64_t seed);

// Fills `count` elements of `dtype` at device pointer `data`: generated on the host in
// chunks and copied over.
Status fill_random_device(void* data, Dtype dtype, std::int64_t count, std::uint64_t seed);

}  // namespace hopattn::bench
