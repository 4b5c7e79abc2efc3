// The producer side of the pipeline: TMA loads of a Q tile once per CTA tile, and of K and V blocks
// through the ring of kStages shared-memory stages. One thread issues every load. With warp
// specialization that thread belongs to the producer warpgroup and runs ahead on its own
// (run_producer); without it a consumer thread calls the same TileLoader between its GEMMs.
#pragma once

#include <cuda.h>

#include "sm90/arch/cp_async.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/pipeline/stage_ring.cuh"
#include "sm90/pipeline/tile_load.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// A paged visit's page ids, one a chunk of paged_chunk_rows (params.hpp) rows of each K/V block (the host takes page
// sizes that are powers of two from 16 and launches key blocks that a page size divides or that divide it, so a chunk
// never straddles a page and, a multiple of 8 rows, starts on a 1024-byte swizzle atom), in SharedStorage::paged_ids,
// block n's in [n & 1] (the K thread's and the V thread's each). Each of them copies block n - 1's ids there with
// 4-byte cp.async before it issues block n's boxes: the reads land while the boxes go out and the thread waits for the
// stages, and no register holds them between blocks (the producer runs on 24). Read in front of their boxes, each read
// and then its box cost ~300 cycles a chunk, and pages of 16 keys ran prefill 1.28-1.68x the K/V copies' time
// (perf-notes v82); a block ahead, 2-4% faster than the copies at 4 KB pages (d 128's pages of 16), 1.10-1.25x their
// time at 2 KB (v166). A chunk past the sequence's last key takes the last key's page (load_paged_chunks reads it from
// that key's row on), never a table entry past the keys in use.
template <int kBlockN>
using PagedChunkIds = int[2][kBlockN / kMinPageSize];

// Reads block n's ids into ids[n & 1], a commit group of their own: a visit's first block's (n_end - 1)
// before its Q is published (begin_paged_visit), the others from read_following_chunk_page_ids.
template <int kBlockN>
__device__ __forceinline__ void read_chunk_page_ids(const FwdParams& p, const VarlenVisit& v, int n,
                                                    PagedChunkIds<kBlockN>& ids) {
  const int chunk_rows = paged_chunk_rows(p.page_size, kBlockN);
  const int page_shift = __ffs(p.page_size) - 1;  // a power of two
  const int* table = p.page_table + v.coord.batch * p.page_table_batch_stride;
  const int last_key = v.seq.bounds.seqlen_k - 1;
  for (int row = 0, c = 0; row < kBlockN; row += chunk_rows, ++c) {
    const int key = min(n * kBlockN + row, last_key);
    cp_async_4(smem_address(&ids[n & 1][c]), table + (key >> page_shift) * p.page_table_page_stride);
  }
  cp_async_commit_group();
}

// Before block n's boxes: block n - 1's reads (the visit's next block), or at its last block an empty
// group, so that cp_async_wait_group<1> then leaves only these pending and block n's ids have landed.
template <int kBlockN>
__device__ __forceinline__ void read_following_chunk_page_ids(const FwdParams& p, const VarlenVisit& v, int n,
                                                              PagedChunkIds<kBlockN>& ids) {
  if (n > v.visit.n_begin) read_chunk_page_ids<kBlockN>(p, v, n - 1, ids);
  else cp_async_commit_group();
}

// A paged cache's rows of K/V block n (FwdParams::page_table; v: a tile with keys) into `smem`, a box a
// chunk from its page (ids: block n's PagedChunkIds, landed). A chunk past the sequence's last key reads
// the last key's page from that key's row on (the consumers mask those keys; rows past the page end are
// TMA's zero fill). The caller has armed `full` for the whole tile.
template <class Tile, int kColsPerBlock, int kBlockN>
__device__ __forceinline__ void load_paged_chunks(const FwdParams& p, const VarlenVisit& v, std::uint8_t* smem,
                                                  const CUtensorMap* map, std::uint64_t* full, int kv_head, int n,
                                                  const int* ids) {
  const int chunk_rows = paged_chunk_rows(p.page_size, kBlockN);
  const int last_key = v.seq.bounds.seqlen_k - 1;
  for (int row = 0, c = 0; row < kBlockN; row += chunk_rows, ++c) {
    const int key = min(n * kBlockN + row, last_key);
    load_tile<Tile, kColsPerBlock>(smem + row * kSwizzleBytes, map, full, key & (p.page_size - 1), kv_head, ids[c]);
  }
}

struct TensorMaps {
  const CUtensorMap* q;
  const CUtensorMap* k;
  const CUtensorMap* v;
  const CUtensorMap* o;  // stores; read only when FwdParams::store_o_by_tma
};

template <class Traits>
class TileLoader {
  using QTile = typename Traits::QTile;
  using KTile = typename Traits::KTile;
  using VTile = typename Traits::VTile;
  static constexpr int kCols = Traits::kColsPerBlock;

 public:
  __device__ TileLoader(typename Traits::SharedStorage& s, TensorMaps maps) : s_(s), maps_(maps) {}

  // Publishes visit `id` to the consumers and loads its Q tile (v: decode_visit(id)), or
  // (kNoVisitLeft) tells them that no work is left. The previous visit's consumers must be done with
  // their last S GEMM (q_empty) before Q and the visit are overwritten; the first wait passes at once
  // (parity of the phase before the first).
  __device__ void publish_visit(const FwdParams& p, int id, const TileVisit& v) {
    if (!publish_id(id)) return;
    const TileCoord c = decode_tile(p, v.tile);
    load_q(c.m_block * Traits::kBlockM, c.head, c.batch);
  }

  // The same for a tile of a variable-length batch (v: decode_varlen_visit(id)): Q from its sequence's
  // rows; a packed GQA tile (FwdParams::pack_gqa) from its tile_q_rows rows of every query head of
  // its K/V head, through the 5D map of make_packed_q_map (host/tensor_map.hpp), whose box lands them
  // in the tile's rows in packed order. Rows [packed_rows, kBlockM) are not loaded: what they compute
  // is never stored.
  __device__ void publish_varlen_visit(const FwdParams& p, int id, const VarlenVisit& v) {
    publish_id(id);
    const int row0 = v.seq.rows.q_row0 + v.coord.m_block * p.tile_q_rows;
    if (!(Traits::kPacksGqa && p.pack_gqa)) {
      load_q(row0, v.coord.head, v.seq.rows.q_batch);
      return;
    }
    mbarrier_arrive_expect_tx(&s_.q_full, p.packed_rows * (QTile::kBytes / Traits::kBlockM));
#pragma unroll
    for (int cb = 0; cb < QTile::kColumnBlocks; ++cb) {
      tma_load_5d(s_.q + cb * QTile::kColumnBlockBytes, maps_.q, &s_.q_full, cb * kCols, 0, v.coord.head, row0,
                  v.seq.rows.q_batch);
    }
  }

  // K and V of block n into the next ring stage, once the consumers have released that stage.
  __device__ void load_kv(const TileCoord& c, int kv_head, int n) {
    load_kv_rows(n * Traits::kBlockN, kv_head, c.batch);
  }

  // The same for a tile of a variable-length batch. A block that runs past its sequence's keys reads
  // the next sequence's (or TMA's zero fill past the tensor's end); the consumers mask those keys.
  __device__ void load_varlen_kv(const SequenceRows& rows, int kv_head, int n) {
    load_kv_rows(rows.k_row0 + n * Traits::kBlockN, kv_head, rows.k_batch);
  }

  // The same for a visit from a paged KV cache (FwdParams::page_table; v: a tile with keys), block by
  // block in chunks of at most a page (load_paged_chunks), their page ids read a block ahead
  // (PagedChunkIds): K's boxes (kV false, from the producer warp's leader) or V's (kV true, from the
  // second producer warp; run_varlen_producer), each with its own ids. begin_paged_visit reads the
  // first block's ids: the K thread calls it before it waits to publish the visit's Q, so that read's
  // global latency passes during that wait; each later read passes during the wait for a stage (d 128
  // prefill from pages of 16 0.9% faster, perf-notes v178).
  template <bool kV>
  __device__ void begin_paged_visit(const FwdParams& p, const VarlenVisit& v) {
    // No block (no key): its first block's ids would be no page's.
    if (v.visit.n_end > v.visit.n_begin) read_chunk_page_ids<Traits::kBlockN>(p, v, v.visit.n_end - 1, s_.paged_ids[kV]);
  }
  template <bool kV>
  __device__ void load_paged_visit(const FwdParams& p, const VarlenVisit& v, int kv_head) {
    PagedChunkIds<Traits::kBlockN>& ids = s_.paged_ids[kV];
    for (int n = v.visit.n_end - 1; n >= v.visit.n_begin; --n) {
      read_following_chunk_page_ids<Traits::kBlockN>(p, v, n, ids);
      const int stage = ring_.index();
      std::uint64_t* full = kV ? &s_.v_full[stage] : &s_.k_full[stage];
      mbarrier_wait(kV ? &s_.v_empty[stage] : &s_.k_empty[stage], ring_.phase() ^ 1);
      cp_async_wait_group<1>();  // block n's ids
      if constexpr (kV) {
        mbarrier_arrive_expect_tx(full, VTile::kBytes);
        load_paged_chunks<VTile, kCols, Traits::kBlockN>(p, v, s_.v[stage], maps_.v, full, kv_head, n, ids[n & 1]);
      } else {
        mbarrier_arrive_expect_tx(full, KTile::kBytes);
        load_paged_chunks<KTile, kCols, Traits::kBlockN>(p, v, s_.k[stage], maps_.k, full, kv_head, n, ids[n & 1]);
      }
      ring_.advance();
    }
  }

 private:
  // Waits until Q's buffer is free and publishes `id`; false (after telling the consumers) when it is
  // kNoVisitLeft.
  __device__ bool publish_id(int id) {
    mbarrier_wait(&s_.q_empty, q_phase_ ^ 1);
    q_phase_ ^= 1;
    sm90::publish_visit(&s_.visit, id);  // ordered before the consumers' read by q_full's arrive and wait
    if (id == kNoVisitLeft) {
      mbarrier_arrive(&s_.q_full);
      return false;
    }
    return true;
  }

  __device__ void load_q(int row0, int head, int batch) {
    mbarrier_arrive_expect_tx(&s_.q_full, QTile::kBytes);
    load_tile<QTile, kCols>(s_.q, maps_.q, &s_.q_full, row0, head, batch);
  }

  // Rows [row0, row0 + kBlockN) of K and V (one TMA map batch entry, one kv head) into the next stage.
  __device__ void load_kv_rows(int row0, int kv_head, int batch) {
    const int stage = ring_.index();
    mbarrier_wait(&s_.k_empty[stage], ring_.phase() ^ 1);
    mbarrier_arrive_expect_tx(&s_.k_full[stage], KTile::kBytes);
    load_tile<KTile, kCols>(s_.k[stage], maps_.k, &s_.k_full[stage], row0, kv_head, batch);
    mbarrier_wait(&s_.v_empty[stage], ring_.phase() ^ 1);
    mbarrier_arrive_expect_tx(&s_.v_full[stage], VTile::kBytes);
    load_tile<VTile, kCols>(s_.v[stage], maps_.v, &s_.v_full[stage], row0, kv_head, batch);
    ring_.advance();
  }

  typename Traits::SharedStorage& s_;
  TensorMaps maps_;
  StageRing<Traits::kStages> ring_;
  std::uint32_t q_phase_ = 0;
};

// The K/V head a variable-length tile reads: the tile's own head when it packs GQA heads (its
// coordinates name the K/V head, packed_gqa.cuh), else its query head's.
template <class Traits>
__device__ __forceinline__ int varlen_kv_head(const FwdParams& p, const TileCoord& c) {
  return Traits::kPacksGqa && p.pack_gqa ? c.head : int(p.head_ratio_divisor.divide(unsigned(c.head)));
}

// Warp-specialized producer of the dense kernels, one thread: walks the whole schedule, K/V blocks from
// the last to the first (the order the consumers use: masked blocks first), throttled only by the empty
// barriers.
template <class Traits>
__device__ void run_producer(typename Traits::SharedStorage& s, TensorMaps maps, const FwdParams& p) {
  TileLoader<Traits> loader(s, maps);
  VisitSequence visits(p);
  for (int id = visits.next(); id != kNoVisitLeft; id = visits.next()) {
    const TileVisit v = decode_visit<Traits::kBlockM, Traits::kBlockN, Traits::kChunksAndSequsedQ>(p, id);
    loader.publish_visit(p, id, v);
    const TileCoord c = decode_tile(p, v.tile);
    const int kv_head = int(p.head_ratio_divisor.divide(unsigned(c.head)));
    for (int n = v.n_end - 1; n >= v.n_begin; --n) loader.load_kv(c, kv_head, n);
  }
  loader.publish_visit(p, kNoVisitLeft, TileVisit{});
  finish_schedule(p);
}

// The leader hands visit `id` (the count-th handed) to the V warp of a paged launch, or takes it there:
// two slots used in turn, each rewritten only after the V warp has passed the next hand-over.
template <class Traits>
__device__ __forceinline__ void hand_over_paged_visit(typename Traits::SharedStorage& s, int count, int id) {
  s.paged_visit[count & 1] = id;
  named_barrier_sync_unaligned(Traits::kProducerBarrier, 64);
}
template <class Traits>
__device__ __forceinline__ int take_paged_visit(typename Traits::SharedStorage& s, int count) {
  named_barrier_sync_unaligned(Traits::kProducerBarrier, 64);
  return s.paged_visit[count & 1];
}

// The same for the variable-length kernels, one thread of each of the producer's first two warps
// (warp). Warp 0's walks the schedule and loads Q, and K and V from rows; from a paged cache it loads K
// and hands each visit to warp 1's thread, which loads V: a block in pages of 16 keys is 8-12 chunks
// of K and as many of V, a TMA box each (two at d 128), and from one thread those boxes held prefill
// at 1.12x (d 128) the time of the same keys from rows (perf-notes v166, v171).
template <class Traits>
__device__ void run_varlen_producer(typename Traits::SharedStorage& s, TensorMaps maps, const FwdParams& p,
                                    int warp) {
  const bool paged = p.page_table != nullptr;
  TileLoader<Traits> loader(s, maps);
  if (warp == 1) {
    if (!paged) return;
    for (int count = 0;; ++count) {
      const int id = take_paged_visit<Traits>(s, count);
      if (id == kNoVisitLeft) return;
      const VarlenVisit v =
          decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit, Traits::kChunksAndSequsedQ>(p,
                                                                                                                  id);
      loader.template begin_paged_visit<true>(p, v);
      loader.template load_paged_visit<true>(p, v, varlen_kv_head<Traits>(p, v.coord));
    }
  }
  VisitSequence visits(p);
  int handed = 0;
  for (int id = visits.next(); id != kNoVisitLeft; id = visits.next()) {
    const VarlenVisit v =
        decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit, Traits::kChunksAndSequsedQ>(p, id);
    if (varlen_tile_is_empty(p, v)) continue;
    if (paged) loader.template begin_paged_visit<false>(p, v);
    loader.publish_varlen_visit(p, id, v);
    const int kv_head = varlen_kv_head<Traits>(p, v.coord);
    if (paged) {
      hand_over_paged_visit<Traits>(s, handed++, id);
      loader.template load_paged_visit<false>(p, v, kv_head);
      continue;
    }
    for (int n = v.visit.n_end - 1; n >= v.visit.n_begin; --n) loader.load_varlen_kv(v.seq.rows, kv_head, n);
  }
  loader.publish_visit(p, kNoVisitLeft, TileVisit{});
  if (paged) hand_over_paged_visit<Traits>(s, handed, kNoVisitLeft);
  finish_schedule(p);
}

// Inline producer for the non-warp-specialized kernel: a consumer thread keeps kStages blocks in
// flight, issuing the next load after each block it finishes.
template <class Traits>
class InlineProducer {
 public:
  __device__ InlineProducer(typename Traits::SharedStorage& s, TensorMaps maps, const FwdParams& p)
      : loader_(s, maps), visits_(p) {}

  // Publishes the next visit (kNoVisitLeft once there is none). Dense batches only: the variable-length
  // kernels are warp-specialized (FwdTraits::kVarlen).
  __device__ void publish_next_visit(const FwdParams& p) {
    const int id = visits_.next();
    if (id == kNoVisitLeft) {
      loader_.publish_visit(p, id, TileVisit{});
      finish_schedule(p);
      return;
    }
    loader_.publish_visit(p, id, decode_visit<Traits::kBlockM, Traits::kBlockN, Traits::kChunksAndSequsedQ>(p, id));
  }

  // Fills the ring with the visit's first kStages K/V blocks.
  __device__ void begin_visit(const FwdParams& p, const TileCoord& c, int n_begin, int n_end) {
    coord_ = c;
    kv_head_ = int(p.head_ratio_divisor.divide(unsigned(c.head)));
    n_begin_ = n_begin;
    next_n_ = n_end - 1;
    for (int i = 0; i < Traits::kStages; ++i) load_next();
  }

  __device__ void load_next() {
    if (next_n_ >= n_begin_) loader_.load_kv(coord_, kv_head_, next_n_--);
  }

 private:
  TileLoader<Traits> loader_;
  VisitSequence visits_;
  TileCoord coord_{};
  int kv_head_ = 0;
  int n_begin_ = 0;
  int next_n_ = -1;
};

}  // namespace hopattn::sm90
