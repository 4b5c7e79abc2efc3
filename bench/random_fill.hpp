// Fresh random tensor contents for timing: magnitudes in [2^-5, 2) with random sign, so never zero,
// never NaN and in range for every dtype (fp8 e4m3 included). Built from each dtype's bit fields.
#pragma once

#include <cstdint>

#include "hopattn/hopattn.hpp"

namespace hopattn::bench {

// Fills `count` elements of `dtype` at host pointer `data` (int32 gets 1..1000).
void fill_random_host(void* data, Dtype dtype, std::int64_t count, std::uint64_t seed);

// Elements fill_random_device generates; past them it repeats them. Generating on the host runs at
// about half a GB/s, and the decode grid fills 50 GB of KV cache; no kernel's speed depends on the
// values, only on their being finite.
constexpr std::int64_t kRandomElements = std::int64_t{1} << 24;

// Fills `count` elements of `dtype` at device pointer `data`: the first kRandomElements generated on
// the host and copied over, the rest copies of those made on the device.
Status fill_random_device(void* data, Dtype dtype, std::int64_t count, std::uint64_t seed);

}  // namespace hopattn::bench
