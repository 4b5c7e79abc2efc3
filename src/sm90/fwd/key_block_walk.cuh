// The K/V blocks of a consumer's visit, in the order the producer fills the ring. Most kernels know
// them up front: n_end - 1 down to n_begin. The copy kernels (FwdTraits::kKvByCpAsync) read each from
// its K stage's entry once the stage has landed: a piece that shares its tile's blocks learns them only
// as its producer claims them (split_plan.hpp, SharedTileBlocks; kv_cp_async.cuh, post_block).
#pragma once

#include "sm90/fwd/cp_async_visit.hpp"

namespace hopattn::sm90 {

// A stage's entry, for every lane of the calling warp: read by lane 0 atomically (the producer writes it
// so, for racecheck: scheduler.cuh, publish_visit) and passed on by a shuffle, one shared-memory access a
// warp.
__device__ __forceinline__ int read_stage_entry(int* entry) {
  int value = 0;
  if (threadIdx.x % 32 == 0) value = atomicOr(entry, 0);
  return __shfl_sync(0xffffffffu, value, 0);
}

// Loops read: for (int n = n_end - 1; walk.more(n, n_begin); --n) { wait for the K stage; n = walk.at(s,
// stage, n); ... }. A visit's first block is n_end - 1 either way (a sharing piece's own); the copy
// kernels' walk takes each next block from its stage, so the countdown's value is only the plain walk's.
// That one is the loop it replaced, to the letter: those kernels' SASS is as before but for one loop
// test's sense (d 128 dense; a walk with its own bounds and loop shape had moved ~1,700 lines of it).
template <class Traits>
class KeyBlockWalk {
 public:
  // Whether block n (after the last walked, by the countdown) is still to come; n_begin: the visit's.
  __device__ bool more(int n, int n_begin) const {
    if constexpr (Traits::kKvByCpAsync) return !last_;
    else return n >= n_begin;
  }

  // The block in K stage `stage`, once it has landed (n: the countdown's).
  __device__ int at(typename Traits::SharedStorage& s, int stage, int n) {
    if constexpr (Traits::kKvByCpAsync) {
      const int entry = read_stage_entry(&s.stage_block[stage]);
      last_ = stage_entry_is_last(entry);
      return stage_entry_block(entry);
    } else {
      return n;
    }
  }

  // Whether block n, just taken by at(), is the visit's last.
  __device__ bool is_last(int n, int n_begin) const {
    if constexpr (Traits::kKvByCpAsync) return last_;
    else return n == n_begin;
  }

 private:
  bool last_ = false;
};

}  // namespace hopattn::sm90
