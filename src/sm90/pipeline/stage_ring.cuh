// Position in a ring of kStages shared-memory stages: the stage index and the mbarrier phase parity
// of the current lap. Producer and consumers each keep one and advance it identically.
#pragma once

#include <cstdint>

namespace hopattn::sm90 {

template <int kStages>
class StageRing {
 public:
  __device__ __forceinline__ int index() const { return index_; }
  __device__ __forceinline__ std::uint32_t phase() const { return phase_; }
  __device__ __forceinline__ void advance() {
    if (++index_ == kStages) {
      index_ = 0;
      phase_ ^= 1;
    }
  }

 private:
  int index_ = 0;
  std::uint32_t phase_ = 0;
};

}  // namespace hopattn::sm90
