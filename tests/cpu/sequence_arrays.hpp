// The int32 arrays of variable-length calls, for the CPU tests: cu_seqlens from per-sequence lengths,
// and an owning host tensor holding such an array.
#pragma once

#include <cstdint>
#include <vector>

#include "common/host_tensor.hpp"

namespace hopattn::test {

// cu_seqlens of `lengths`: 0, then the running sums (one more entry than sequences).
inline std::vector<int> prefix_sums(const std::vector<int>& lengths) {
  std::vector<int> sums(1, 0);
  for (int n : lengths) sums.push_back(sums.back() + n);
  return sums;
}

inline HostTensor int_array(const std::vector<int>& values) {
  HostTensor t(Dtype::kInt32, {static_cast<std::int64_t>(values.size())});
  for (std::size_t i = 0; i < values.size(); ++i) static_cast<int*>(t.data())[i] = values[i];
  return t;
}

}  // namespace hopattn::test
