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

// A buffer read with ldmatrix (generic proxy) that a TMA load (async proxy) overwrites next, such as
// Q once it is in registers, must not be released right after the ldmatrix: the arrive waits on no
// scoreboard and can overtake the reads still in flight (on the H200 the next tile's Q then landed
// under them; tests/gpu/test_forward_one_key.cu, without ping-pong). Two cures, each kept where it
// measured cheaper (session 10):
// - the 16-bit kernel hands Q back after the tile's first S GEMM, whose wait proves the reads done
//   (with Q in smem, after the last S GEMM that reads it, the tile's last block); the fence below
//   cost it 1.3% of cycles at d 64, 1k tokens;
// - the FP8 kernel fences the proxies (FENCE.VIEW.ASYNC.S waits for the reads) and releases at once;
//   moving its release cost 1.5-2% of FP8 d 128 cycles (ptxas's schedule of its mainloop moved).
template <bool kQInRegisters>
__device__ __forceinline__ void release_q_after_s_gemm(std::uint64_t* q_empty, int thread_in_warpgroup,
                                                       bool first_block, bool last_block) {
  if (kQInRegisters ? first_block : last_block) release_from_warp(q_empty, thread_in_warpgroup);
}

__device__ __forceinline__ void release_ldmatrix_reads_to_tma(std::uint64_t* empty, int thread_in_warpgroup) {
  fence_proxy_async_shared();
  release_from_warp(empty, thread_in_warpgroup);
}

}  // namespace hopattn::sm90
