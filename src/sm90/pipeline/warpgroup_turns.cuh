// Synchronization of a consumer warpgroup, shared by the 16-bit and FP8 forward kernels.
//
// Ping-pong: the two consumer warpgroups take turns to issue their GEMMs. Warpgroup w waits on named
// barrier kBarrierBase + w before issuing and hands the turn to its partner right after issuing, so
// one warpgroup's softmax runs while the other's GEMMs occupy the tensor cores. Each barrier counts
// both warpgroups: the waiting one (bar.sync) and the partner that opens it (bar.arrive).
#pragma once

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"

namespace hopattn::sm90 {

template <int kBarrierBase, int kBarrierThreads>
struct WarpgroupTurns {
  // Warpgroup 0 goes first: warpgroup 1 opens its partner's first turn once, at the start.
  __device__ static void open_first_turn(bool pingpong, int warpgroup) {
    if (pingpong && warpgroup == 1) named_barrier_arrive(kBarrierBase, kBarrierThreads);
  }
  __device__ static void begin(bool pingpong, int warpgroup) {
    if (pingpong) named_barrier_sync(kBarrierBase + warpgroup, kBarrierThreads);
  }
  __device__ static void end(bool pingpong, int warpgroup) {
    if (pingpong) named_barrier_arrive(kBarrierBase + 1 - warpgroup, kBarrierThreads);
  }
};

// Each consumer warp releases a buffer once its reads are complete (the empty barriers count warps).
__device__ __forceinline__ void release_from_warp(std::uint64_t* empty, int thread_in_warpgroup) {
  __syncwarp();
  if (thread_in_warpgroup % 32 == 0) mbarrier_arrive(empty);
}

}  // namespace hopattn::sm90
