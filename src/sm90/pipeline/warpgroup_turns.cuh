// Synchronization of a consumer warpgroup, shared by the 16-bit and FP8 forward kernels.
//
// Ping-pong: the consumer warpgroups take turns, round robin, to issue their GEMMs. Warpgroup w waits
// on named barrier kBarrierBase + w before issuing and hands the turn to warpgroup (w + 1) % n right
// after issuing, so one warpgroup's softmax runs while another's GEMMs occupy the tensor cores. Each
// barrier counts two warpgroups: the waiting one (bar.sync) and the one that opens it (bar.arrive).
#pragma once

#include <cstdint>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"

namespace hopattn::sm90 {

template <int kBarrierBase, int kBarrierThreads, int kWarpgroups>
struct WarpgroupTurns {
  // Warpgroup 0 goes first: the last warpgroup opens its first turn once, at the start.
  __device__ static void open_first_turn(bool pingpong, int warpgroup) {
    if (pingpong && warpgroup == kWarpgroups - 1) named_barrier_arrive(kBarrierBase, kBarrierThreads);
  }
  __device__ static void begin(bool pingpong, int warpgroup) {
    if (pingpong) named_barrier_sync(kBarrierBase + warpgroup, kBarrierThreads);
  }
  __device__ static void end(bool pingpong, int warpgroup) {
    const int next = kWarpgroups == 2 ? 1 - warpgroup : (warpgroup + 1 == kWarpgroups ? 0 : warpgroup + 1);
    if (pingpong) named_barrier_arrive(kBarrierBase + next, kBarrierThreads);
  }
};

// Each consumer warp releases a buffer once its reads are complete (the empty barriers count warps).
__device__ __forceinline__ void release_from_warp(std::uint64_t* empty, int thread_in_warpgroup) {
  __syncwarp();
  if (thread_in_warpgroup % 32 == 0) mbarrier_arrive(empty);
}

}  // namespace hopattn::sm90
