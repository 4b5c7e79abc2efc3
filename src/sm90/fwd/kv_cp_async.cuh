// The decoding kernels' producer (FwdTraits::kKvByCpAsync): the whole producer warpgroup loads K and V
// blocks with 16-byte cp.async copies instead of one thread issuing TMA boxes. A decoding step is
// bound by HBM; streaming a step's K/V alone, TMA boxes reached 4.05-4.17 TB/s on the H200 whatever
// their shape, the ring depth or the CTAs per SM, and 128 threads of cp.async 4.41-4.49
// (bench/probes/tma_stream.cu, perf-notes session 21). Q still comes by TMA (one box, or the packed
// GQA box). Not from a paged cache (the launch keeps those on the TMA producer, producer.cuh).
//
// The copies land in the layout TMA would write (the 128B swizzle of smem_layout.hpp), and each
// thread's copies of a block count in on the stage's full barrier as they land (128 arrivals). Two
// things differ for the consumers (consumer.cuh, FwdTraits::kKvByCpAsync): cp.async writes through the
// generic proxy and wgmma reads through the async proxy, so after each full barrier they run
// fence.proxy.async; and rows past a sequence's keys and columns past the head dim arrive as zeros
// here, so the V rows past the keys need no clearing in shared memory (v_tail.cuh).
#pragma once

#include "sm90/arch/cp_async.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/producer.cuh"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/pipeline/stage_ring.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// One visit's K/V copies: its sequence's first K/V row and batch entry, key count and K/V head, and
// the visit's blocks [n_begin, n_end).
struct CpAsyncVisit {
  int k_row0, k_batch, keys, kv_head, n_begin, n_end;
};

// Arrivals that complete a K or V stage's full barrier when cp.async fills it: one per producer thread.
template <class Traits>
__host__ __device__ constexpr int cp_async_full_arrivals() {
  return Traits::kWarpgroupThreads;
}

template <class Traits>
class CpAsyncKvLoader {
  using KTile = typename Traits::KTile;
  static constexpr int kThreads = Traits::kWarpgroupThreads;
  static constexpr int kChunksPerRow = Traits::kHeadDim * Traits::kElementBytes / 16;
  // Thread t copies chunk t % kChunksPerRow of rows t / kChunksPerRow + i * kRowsPerPass: a warp reads
  // whole key rows (256 bytes at d 128), and a thread's rows share row % 8, so its chunk's swizzled
  // place in a row is the same for all of them.
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = Traits::kBlockN / kRowsPerPass;
  static_assert(kRowsPerPass % 8 == 0 && Traits::kBlockN % kRowsPerPass == 0, "rows per pass: whole swizzle atoms");

 public:
  // K/V blocks n_end - 1 down to n_begin of one visit through the ring.
  __device__ void load_visit(typename Traits::SharedStorage& s, const FwdParams& p, const CpAsyncVisit& v) {
    const int row_end = v.k_row0 + v.keys;
    for (int n = v.n_end - 1; n >= v.n_begin; --n) {
      const int stage = ring_.index();
      const int row0 = v.k_row0 + n * Traits::kBlockN;
      mbarrier_wait(&s.k_empty[stage], ring_.phase() ^ 1);
      copy_block(p, p.k_rows, s.k[stage], row0, row_end, v.kv_head, v.k_batch);
      cp_async_arrive_when_landed(&s.k_full[stage]);
      mbarrier_wait(&s.v_empty[stage], ring_.phase() ^ 1);
      copy_block(p, p.v_rows, s.v[stage], row0, row_end, v.kv_head, v.k_batch);
      cp_async_arrive_when_landed(&s.v_full[stage]);
      ring_.advance();
    }
  }

 private:
  // Rows [row0, row0 + kBlockN) of one head of one batch entry into a swizzled tile; rows from row_end
  // (or past the entry) and columns past the head dim as zeros (their source is never read).
  __device__ void copy_block(const FwdParams& p, const KvRowsView& view, std::uint8_t* tile, int row0, int row_end,
                             int head, int batch) const {
    // Recomputed per block rather than kept: the producer runs on few registers.
    const int thread = threadIdx.x % kThreads, chunk = thread % kChunksPerRow, first_row = thread / kChunksPerRow;
    const int rows = min(row_end, view.rows);
    const bool column_inside = chunk * 16 < p.head_dim * Traits::kElementBytes;
    int row = row0 + first_row;
    const std::uint8_t* src =
        view.data + batch * view.batch_stride + head * view.head_stride + row * view.row_stride + chunk * 16;
    std::uint32_t dst = smem_address(tile) + chunk / 8 * KTile::kColumnBlockBytes + first_row * kSwizzleBytes +
                        ((chunk % 8) ^ (first_row % 8)) * 16;
    // Not unrolled: 16 copies a thread need few instructions.
#pragma unroll 1
    for (int pass = 0; pass < kPasses; ++pass) {
      cp_async_16_or_zero(dst, src, column_inside && row < rows);
      row += kRowsPerPass;
      src += kRowsPerPass * view.row_stride;
      dst += kRowsPerPass * kSwizzleBytes;
    }
  }

  StageRing<Traits::kStages> ring_;
};

// The producer warpgroup of a kKvByCpAsync kernel, every thread: its leader
// claims and publishes each visit with its Q tile (TileLoader) and hands its id to the others through
// shared memory, and all of them copy the visit's K/V blocks.
template <class Traits>
__device__ void run_cp_async_producer(typename Traits::SharedStorage& s, TensorMaps maps, const FwdParams& p) {
  const bool leader = threadIdx.x % Traits::kWarpgroupThreads == 0;
  TileLoader<Traits> publisher(s, maps);
  VisitSequence visits(p);
  CpAsyncKvLoader<Traits> loader;
  for (int slot = 0;; slot ^= 1) {
    if (leader) {
      int id = visits.next();
      while (id != kNoVisitLeft &&
             varlen_tile_is_empty(p, decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit>(p, id)))
        id = visits.next();
      if (id == kNoVisitLeft) {
        publisher.publish_visit(p, kNoVisitLeft, TileVisit{});
        finish_schedule(p);
      } else {
        publisher.publish_varlen_visit(
            p, id, decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit>(p, id));
      }
      s.producer_visit[slot] = id;
    }
    named_barrier_sync(Traits::kProducerBarrier, Traits::kWarpgroupThreads);
    const int id = s.producer_visit[slot];
    if (id == kNoVisitLeft) return;
    const VarlenVisit v = decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit>(p, id);
    loader.load_visit(s, p, CpAsyncVisit{v.seq.rows.k_row0, v.seq.rows.k_batch, v.seq.bounds.seqlen_k,
                                         varlen_kv_head<Traits>(p, v.coord), v.visit.n_begin, v.visit.n_end});
  }
}

}  // namespace hopattn::sm90
