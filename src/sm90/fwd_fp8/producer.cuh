// The FP8 producer warpgroup. Warp 0: one elected thread hands out the tiles and issues every TMA
// load (Q per tile, K and V per key block through the stage ring). Warps 1..3: transpose each landed
// V stage into the V^T stage the P V GEMM reads (8-bit B must be K-major), permuting keys as
// fp8_layout.hpp explains, so the transpose overlaps the consumers' GEMMs instead of sitting on their
// path.
#pragma once

#include <cuda.h>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd_fp8/fp8_layout.hpp"
#include "sm90/fwd_fp8/params.hpp"
#include "sm90/fwd/producer.cuh"
#include "sm90/pipeline/stage_ring.cuh"

namespace hopattn::sm90 {

// The tile hand-out of scheduler.cuh: the first tile is blockIdx.x, the next ones are claimed; each is
// published to the consumers (s.tile, then q_full) once they are done with the previous Q tile, and a
// tile index >= num_tiles tells them to stop. Then the transposers are told to stop (finish_v).
template <class Traits>
__device__ void run_fp8_loads(typename Traits::SharedStorage& s, const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                              const CUtensorMap* tm_v, const FwdParams& p) {
  constexpr int kCols = Traits::kColsPerBlock;
  StageRing<Traits::kStages> ring;
  std::uint32_t q_phase = 0;
  for (int tile = blockIdx.x;; tile = claim_next_tile(p)) {
    mbarrier_wait(&s.q_empty, q_phase ^ 1);  // consumers done with the previous Q tile and tile index
    q_phase ^= 1;
    atomicExch(&s.tile, tile);  // ordered by the q_full arrive; atomic for racecheck (fwd/producer.cuh)
    if (tile >= p.num_tiles) {
      mbarrier_arrive(&s.q_full);
      finish_schedule(p);
      break;
    }
    const TileCoord c = decode_tile(p, tile);
    const int kv_head = c.head / p.head_ratio;
    int n_begin, n_end;
    kv_block_range<Traits::kBlockM, Traits::kBlockN>(p, c.m_block, &n_begin, &n_end);
    mbarrier_arrive_expect_tx(&s.q_full, Traits::QTile::kBytes);
    load_tile<typename Traits::QTile, kCols>(s.q, tm_q, &s.q_full, c.m_block * Traits::kBlockM, c.head, c.batch);

    for (int n = n_end - 1; n >= n_begin; --n) {  // the consumers' order
      const int stage = ring.index();
      mbarrier_wait(&s.k_empty[stage], ring.phase() ^ 1);
      mbarrier_arrive_expect_tx(&s.k_full[stage], Traits::KTile::kBytes);
      load_tile<typename Traits::KTile, kCols>(s.k[stage], tm_k, &s.k_full[stage], n * Traits::kBlockN, kv_head,
                                                   c.batch);
      mbarrier_wait(&s.v_empty[stage], ring.phase() ^ 1);  // transposers done reading this V stage
      mbarrier_arrive_expect_tx(&s.v_full[stage], Traits::VTile::kBytes);
      load_tile<typename Traits::VTile, kCols>(s.v[stage], tm_v, &s.v_full[stage], n * Traits::kBlockN, kv_head,
                                                   c.batch);
      ring.advance();
    }
  }
  // finish_v: the next V stage completes without data, with its v_end set (released by the arrive),
  // once the transposers are done with what it held. Per stage: the transposers may still be on
  // earlier stages, whose flags must stay 0.
  const int stage = ring.index();
  mbarrier_wait(&s.v_empty[stage], ring.phase() ^ 1);
  atomicExch(&s.v_end[stage], 1);  // ordered by the v_empty wait; atomic for racecheck, as s.tile
  mbarrier_arrive(&s.v_full[stage]);
}

// 4 x 4 byte transpose: byte j of out[i] = byte i of in[j].
__device__ __forceinline__ void transpose_bytes_4x4(const std::uint32_t (&in)[4], std::uint32_t (&out)[4]) {
  const std::uint32_t lo01 = __byte_perm(in[0], in[1], 0x5140);  // in0.b0 in1.b0 in0.b1 in1.b1
  const std::uint32_t hi01 = __byte_perm(in[0], in[1], 0x7362);  // in0.b2 in1.b2 in0.b3 in1.b3
  const std::uint32_t lo23 = __byte_perm(in[2], in[3], 0x5140);
  const std::uint32_t hi23 = __byte_perm(in[2], in[3], 0x7362);
  out[0] = __byte_perm(lo01, lo23, 0x5410);
  out[1] = __byte_perm(lo01, lo23, 0x7632);
  out[2] = __byte_perm(hi01, hi23, 0x5410);
  out[3] = __byte_perm(hi01, hi23, 0x7632);
}

// V (keys x dims, TMA layout) -> V^T (dims x reduction columns), V^T[d][a] = V[key_of_column(a)][d],
// by kWarps warps on the same stage. Each lane keeps the offsets of its unit in task 0 and reaches
// every other task by XOR with compile-time constants (fp8_layout.hpp), so a task is 4 LDS, 8 PRMT,
// 4 STS and their 8 LOP3 instead of recomputing swizzled offsets from indices.
template <class VTile, class VtTile, int kHeadDim, int kKeys, int kWarps>
class VTransposer {
  static constexpr int kTasks = fp8::transpose_tasks(kHeadDim, kKeys);

 public:
  __device__ explicit VTransposer(int lane) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      load_[i] = fp8::transpose_load_offset<VTile>(0, kKeys, lane, i);
      store_[i] = fp8::transpose_store_offset<VtTile>(0, kKeys, lane, i);
    }
  }

  // Warp `warp` (0..kWarps-1) takes tasks warp, warp + kWarps, ...; one code path per warp keeps the
  // tasks, and so the XOR constants, known at compile time.
  __device__ void transpose(std::uint32_t v, std::uint32_t vt, int warp) {
    // The offsets look loop-invariant to the compiler, which would hoist all 8 x tasks XORed offsets
    // out of the stage loop and spill them at the transposers' 32 registers; this opaque "update"
    // keeps the XORs inside.
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(load_[i]), "+r"(store_[i]));
    transpose_as<0>(v, vt, warp);
  }

 private:
  template <int kWarp>
  __device__ __forceinline__ void transpose_as(std::uint32_t v, std::uint32_t vt, int warp) const {
    if constexpr (kWarp + 1 < kWarps) {
      if (warp != kWarp) return transpose_as<kWarp + 1>(v, vt, warp);
    }
    transpose_tasks<kWarp>(v, vt);
  }

  template <int kWarp>
  __device__ __forceinline__ void transpose_tasks(std::uint32_t v, std::uint32_t vt) const {
#pragma unroll
    for (int task = kWarp; task < kTasks; task += kWarps) {
      const std::uint32_t load_xor = fp8::transpose_load_xor<VTile>(task, kKeys);
      const std::uint32_t store_xor = fp8::transpose_store_xor<VtTile>(task, kKeys);
      std::uint32_t in[4], out[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) in[i] = ld_shared_u32(v + (load_[i] ^ load_xor));
      transpose_bytes_4x4(in, out);
#pragma unroll
      for (int i = 0; i < 4; ++i) st_shared_u32(vt + (store_[i] ^ store_xor), out[i]);
    }
  }

  std::uint32_t load_[4];
  std::uint32_t store_[4];
};

// Transposer warp `warp` (0..kTransposeWarps-1): one V^T stage per landed V stage, in the loads' order,
// until the TMA thread marks a stage as the end (v_end). It needs no tile index: the stages arrive in
// the order the consumers read them.
template <class Traits>
__device__ void run_v_transposer(typename Traits::SharedStorage& s, int warp) {
  const int lane = threadIdx.x % 32;
  VTransposer<typename Traits::VTile, typename Traits::VtTile, Traits::kHeadDim, Traits::kBlockN,
              Traits::kTransposeWarps>
      transposer(lane);
  StageRing<Traits::kStages> ring;
  while (true) {
    const int stage = ring.index();
    mbarrier_wait(&s.v_full[stage], ring.phase());  // TMA -> us: V landed, or no V block follows
    // Atomic read: every lane reads the flag but only lane 0 arrives on v_empty after the __syncwarp,
    // an order compute-sanitizer racecheck does not model (it flags the TMA thread's next write).
    if (atomicOr(&s.v_end[stage], 0)) return;
    mbarrier_wait(&s.vt_empty[stage], ring.phase() ^ 1);  // consumers done with this V^T stage
    transposer.transpose(smem_address(s.v[stage]), smem_address(s.vt[stage]), warp);
    fence_proxy_async_shared();  // our generic stores -> the consumers' wgmma (async proxy) reads
    __syncwarp();
    if (lane == 0) {
      mbarrier_arrive(&s.vt_full[stage]);
      mbarrier_arrive(&s.v_empty[stage]);
    }
    ring.advance();
  }
}

}  // namespace hopattn::sm90
