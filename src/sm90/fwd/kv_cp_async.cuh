// The decoding kernels' producer (FwdTraits::kKvByCpAsync): the whole producer warpgroup loads K and V
// blocks with 16-byte cp.async copies instead of one thread issuing TMA boxes. A decoding step is
// bound by HBM; streaming a step's K/V alone, TMA boxes reached 4.05-4.17 TB/s on the H200 whatever
// their shape, the ring depth or the CTAs per SM, and 128 threads of cp.async 4.41-4.49
// (bench/probes/tma_stream.cu, perf-notes session 21). Q still comes by TMA (one box, or the packed
// GQA box). K/V come from a packed or dense tensor (load_visit) or, in kernels of their own
// (kernel.cuh, KvCopySource), from a paged cache (load_paged_visit), whose page ids each warp reads a
// block ahead of its copies: one a page for pages of 16 keys or more, one a row for pages of at most a
// pass's rows (1-8 keys, and d 64's 16 outside decoding steps) and for page sizes that are no power of two.
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
#include "sm90/fwd/cp_async_visit.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/producer.cuh"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/pipeline/stage_ring.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// Arrivals that complete a stage's full barrier when cp.async fills it: one per producer thread, and for
// a K stage one more, the leader's after it posted the stage's entry (post_block).
template <class Traits>
__host__ __device__ constexpr int cp_async_full_arrivals(bool k_stage) {
  return Traits::kWarpgroupThreads + (k_stage ? 1 : 0);
}

template <class Traits>
class CpAsyncKvLoader {
  using KTile = typename Traits::KTile;
  static constexpr int kThreads = Traits::kWarpgroupThreads;
  static constexpr int kChunksPerRow = Traits::kHeadDim * Traits::kElementBytes / 16;

 public:
  // Thread t copies chunk t % kChunksPerRow of rows t / kChunksPerRow + i * kRowsPerPass: a warp reads
  // whole key rows (256 bytes at d 128), and a thread's rows share row % 8, so its chunk's swizzled
  // place in a row is the same for all of them. Pages of at most kRowsPerPass keys may take the row
  // copies (paged_kv_copy_source, params_builder.hpp).
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;

 private:
  static_assert(kRowsPerPass % 8 == 0 && Traits::kBlockN % kRowsPerPass == 0, "rows per pass: whole swizzle atoms");
  // A paged cache: pages of at least 16 keys hold whole passes, and a block's pages fit the lanes of a warp.
  static_assert(16 % kRowsPerPass == 0 && Traits::kBlockN / 16 <= 32, "paged: passes in one page, a lane a page");
  // Pages of at most a pass (1-8 keys, kMaxRowPageSize, and d 64's 16 in prefill) put each of a thread's
  // rows in a page of its own, and so may pages of a size that is no power of two: each row needs its
  // own page id (RowPageIds).
  static constexpr int kPasses = Traits::kBlockN / kRowsPerPass;
  static constexpr int kRowIdRegisters = (kPasses + kChunksPerRow - 1) / kChunksPerRow;
  static_assert(32 % kChunksPerRow == 0 && kRowsPerPass % kMaxRowPageSize == 0,
                "row pages: a row's threads are a segment of a warp, and a page's rows repeat with each pass");

 public:
  // One visit's K/V blocks through the ring, highest first: n_end - 1 down to n_begin, or a sharing
  // piece's own block and then those it claims (split_plan.hpp), one at a time. The leader posts each K
  // stage's entry for the consumers (post_block), and hands a sharing piece's next block to the others.
  __device__ void load_visit(typename Traits::SharedStorage& s, const FwdParams& p, const HandedVisit& h, bool leader) {
    const CpAsyncVisit& v = h.kv;
    if (v.n_end <= v.n_begin) return;
    const bool sharing = h.tile.claims > 0;
    const int row_end = v.k_row0 + v.keys;
    for (int n = v.n_end - 1; n >= 0;) {
      // The claim goes out before the copies and is read after them: its round trip to L2 under the
      // stream's load overlaps the wait for the stage and the copies' issue.
      int claim = 0;
      if (sharing && leader) claim = atomicAdd(h.counter, 1);
      const int stage = ring_.index();
      const int row0 = v.k_row0 + n * Traits::kBlockN;
      mbarrier_wait(&s.k_empty[stage], ring_.phase() ^ 1);
      copy_block(p.k_rows, s.k[stage], row0, row_end, v.kv_head, v.k_batch);
      cp_async_arrive_when_landed(&s.k_full[stage]);
      int next = n > v.n_begin ? n - 1 : -1;
      if (sharing && leader) next = resolve_claim(h, claim);
      if (leader) post_block(s, stage, n, next < 0);
      mbarrier_wait(&s.v_empty[stage], ring_.phase() ^ 1);
      copy_block(p.v_rows, s.v[stage], row0, row_end, v.kv_head, v.k_batch);
      cp_async_arrive_when_landed(&s.v_full[stage]);
      ring_.advance();
      n = sharing ? hand_over_next_block(s, leader, next) : next;
    }
  }

  // The same from a paged cache (FwdParams::page_table), whose pieces keep fixed shares
  // (pieces_share_blocks). A block's copies need its page ids; read in
  // front of them, each block would wait out a dependent global load before its first copy (v75 in
  // perf-notes: 1.75x the TMA producer's time). So each warp holds the ids of the block it copies, one
  // page a lane, and reads the next block's before it waits for the stages and copies this one: the
  // read lands while the copies issue (only a visit's first block waits for its ids; two or four
  // blocks ahead were level or slower: v159, v159c in perf-notes). K and V of a block share them.
  // kSource kPages: pages of at least kMinPageSize keys (block_page_ids, copy_paged_block); kRowPages and
  // kAnyPages: a page id a row (row_page_ids, copy_row_paged_block).
  template <KvCopySource kSource>
  __device__ void load_paged_visit(typename Traits::SharedStorage& s, const FwdParams& p, const CpAsyncVisit& v,
                                   bool leader) {
    if (v.n_end <= v.n_begin) return;  // no block: its first block's ids would be no page's
    const int* table = p.page_table + v.k_batch * p.page_table_batch_stride;
    const int page_shift = __ffs(p.page_size) - 1;  // of a power of two (kAnyPages divides instead)
    constexpr bool kAnySize = kSource == KvCopySource::kAnyPages;
    const auto ids_of = [&](int n) {
      if constexpr (kSource == KvCopySource::kPages) return block_page_ids(p, table, page_shift, v.keys, n);
      else return row_page_ids<kAnySize>(p, table, page_shift, v.keys, n);
    };
    const auto copy = [&](const KvRowsView& view, std::uint8_t* tile, int n, const auto& ids) {
      if constexpr (kSource == KvCopySource::kPages) copy_paged_block(p, view, tile, n, v.keys, v.kv_head, ids);
      else copy_row_paged_block<kAnySize>(p, view, tile, n, v.keys, v.kv_head, ids);
    };
    auto block_pages = ids_of(v.n_end - 1);
    for (int n = v.n_end - 1; n >= v.n_begin; --n) {
      const auto next_block_pages = n > v.n_begin ? ids_of(n - 1) : decltype(block_pages){};
      const int stage = ring_.index();
      mbarrier_wait(&s.k_empty[stage], ring_.phase() ^ 1);
      copy(p.k_rows, s.k[stage], n, block_pages);
      cp_async_arrive_when_landed(&s.k_full[stage]);
      if (leader) post_block(s, stage, n, n == v.n_begin);
      mbarrier_wait(&s.v_empty[stage], ring_.phase() ^ 1);
      copy(p.v_rows, s.v[stage], n, block_pages);
      cp_async_arrive_when_landed(&s.v_full[stage]);
      ring_.advance();
      block_pages = next_block_pages;
    }
  }

 private:
  // Claim c's block, or -1; the tile's last claim zeroes its counter for the next launch.
  __device__ static int resolve_claim(const HandedVisit& h, int c) {
    if (is_tiles_last_claim(h.tile, c)) atomicExch(h.counter, 0);
    return claimed_block(h.tile, c);
  }

  // The leader: K stage `stage` holds block n (the visit's last where `last`). Written atomically:
  // compute-sanitizer's racecheck does not follow mbarrier ordering for plain shared-memory accesses
  // (scheduler.cuh, publish_visit); the leader's own arrival (cp_async_full_arrivals counts it) orders
  // the entry before the consumers' wait.
  __device__ static void post_block(typename Traits::SharedStorage& s, int stage, int n, bool last) {
    atomicExch(&s.stage_block[stage], stage_entry(n, last));
    mbarrier_arrive(&s.k_full[stage]);
  }

  // Every producer thread: the leader's `next` (a sharing piece's next block, or -1), through one of two
  // shared slots used in turn (a slot is rewritten only after every thread has passed the next barrier).
  __device__ int hand_over_next_block(typename Traits::SharedStorage& s, bool leader, int next) {
    int* slot = &s.next_claimed_block[handover_slot_];
    handover_slot_ ^= 1;
    if (leader) *slot = next;
    named_barrier_sync(Traits::kProducerBarrier, kThreads);
    return *slot;
  }

  // Rows [row0, row0 + kBlockN) of one head of one batch entry into a swizzled tile; rows from row_end
  // (or past the entry) and columns past the head dim as zeros (their source is never read).
  __device__ void copy_block(const KvRowsView& view, std::uint8_t* tile, int row0, int row_end, int head,
                             int batch) const {
    const int thread = threadIdx.x % kThreads, chunk = thread % kChunksPerRow, first_row = thread / kChunksPerRow;
    const int row_limit = (chunk * 16 < view.row_bytes ? min(row_end, view.rows) : 0) - row0 - first_row;
    const std::uint8_t* src = view.data + batch * view.batch_stride + head * view.head_stride +
                              (row0 + first_row) * view.row_stride + chunk * 16;
    copy_rows(chunk_address(tile, chunk, first_row), src, kRowsPerPass * view.row_stride, row_limit, 0,
              Traits::kBlockN);
  }

  // This thread's rows first, first + kRowsPerPass, ... below first + rows of a block (counted from the
  // thread's first row of the block), from src on, pass_stride bytes apart; a row at or past row_limit
  // as zeros. Unrolled (first and rows are compile-time where it is inlined): the producer's 128
  // threads issue the copies at HBM's rate only with few instructions a copy (20 a copy streamed 3.1
  // TB/s where 14 streamed 4.5; H200, perf-notes v77), and unrolled a copy is its 64-bit source step,
  // its row test against an immediate and the copy, its shared-memory place an immediate offset.
  __device__ __forceinline__ static void copy_rows(std::uint32_t dst, const std::uint8_t* src, std::int64_t pass_stride,
                                                   int row_limit, int first, int rows) {
#pragma unroll
    for (int row = first; row < first + rows; row += kRowsPerPass) {
      cp_async_16_or_zero(dst + row * kSwizzleBytes, src, row < row_limit);
      src += pass_stride;
    }
  }

  // Lane i of the calling warp: the page id of the block's i-th page, the page holding keys from
  // n * kBlockN + i * page_size on (the host takes page sizes that are powers of two from 16, and blocks
  // whose width they divide or that fit in one page, so a block starts a page or lies inside one).
  // Lanes past the block's pages, or whose page starts at or past the sequence's keys, read nothing:
  // table entries past the keys in use may be garbage. The warp's every lane runs this.
  __device__ static int block_page_ids(const FwdParams& p, const int* table, int page_shift, int keys, int n) {
    const int lane = threadIdx.x % 32;
    const int block_key = n * Traits::kBlockN;
    if (lane > (Traits::kBlockN - 1) >> page_shift || block_key + (lane << page_shift) >= keys) return 0;
    return __ldg(table + ((block_key >> page_shift) + lane) * p.page_table_page_stride);
  }

  // Block n's rows of one head into a swizzled tile, each from its page (block_pages: block_page_ids of
  // n); rows at or past the sequence's keys and columns past the head dim as zeros (their source, on a
  // page whose id may be garbage, is never read). kPageRows: the block's rows in one page, min(page
  // size, kBlockN), taken from the smallest up until it is the block's: the pages and their passes are
  // compile-time, so a page costs its id from one lane and one multiply beside copy_rows' copies.
  template <int kPageRows = 16>
  __device__ void copy_paged_block(const FwdParams& p, const KvRowsView& view, std::uint8_t* tile, int n, int keys,
                                   int head, int block_pages) const {
    constexpr int kWiderPageRows =
        2 * kPageRows < Traits::kBlockN && Traits::kBlockN % (2 * kPageRows) == 0 ? 2 * kPageRows : Traits::kBlockN;
    if constexpr (kPageRows < Traits::kBlockN) {
      if (p.page_size > kPageRows) {
        copy_paged_block<kWiderPageRows>(p, view, tile, n, keys, head, block_pages);
        return;
      }
    }
    static_assert(kPageRows % kRowsPerPass == 0 && Traits::kBlockN % kPageRows == 0, "whole passes in a page");
    constexpr int kPages = Traits::kBlockN / kPageRows;
    const int thread = threadIdx.x % kThreads, chunk = thread % kChunksPerRow, first_row = thread / kChunksPerRow;
    // A copy whose row in the block (from this thread's first) reaches row_limit reads nothing: at or past
    // the keys, or every row where this thread's column is past the head dim.
    const int row_limit = (chunk * 16 < view.row_bytes ? keys : 0) - n * Traits::kBlockN - first_row;
    // This thread's first row in each of the block's pages: the block starts a page, or lies inside one.
    const std::uint32_t row_in_page = (n * Traits::kBlockN + first_row) & (p.page_size - 1);
    const std::uint8_t* page_src = view.data + head * view.head_stride + chunk * 16 + row_in_page * view.row_stride;
    const std::int64_t pass_stride = kRowsPerPass * view.row_stride;
    const std::uint32_t dst = chunk_address(tile, chunk, first_row);
    // Every lane runs every page, as __shfl_sync's full mask needs. Unsigned: ids are not negative (a
    // garbage id only where nothing is read). Pages of one pass a thread (d 64's pages of 16) loop: their
    // 8 or 12 ids and addresses unrolled spilled the producer's 40 registers (8 bytes at 128-key blocks),
    // and unrolled at 56 they ran 4% slower than this loop (v158b in perf-notes, H100).
#pragma unroll(kPageRows == kRowsPerPass ? 1 : kPages)
    for (int page = 0; page < kPages; ++page) {
      const std::uint32_t id = __shfl_sync(0xffffffffu, block_pages, page);
      copy_rows(dst, page_src + id * view.batch_stride, pass_stride, row_limit, page * kPageRows, kPageRows);
    }
  }

  // The page ids of a block's rows (pages of at most kRowsPerPass keys, or of any size: kAnySize), held
  // by the threads that copy them: the kChunksPerRow threads of a row are a segment of a warp, and the
  // thread of chunk c holds in id[r] the id of the segment's row in pass r * kChunksPerRow + c. A copy
  // then takes its id by a shuffle within the segment whose source lane and width are immediates (lanes
  // computed per pass took registers that spilled the producer's 40 at d 128). Page sizes that are no
  // power of two put rows at other places of their pages pass by pass, so the holder keeps each row's
  // place too (place[r]; a division or a running place a copy spilled the same 40 registers).
  template <bool kAnySize>
  struct RowPageIds {
    int id[kRowIdRegisters];
    int place[kAnySize ? kRowIdRegisters : 1];  // unused without kAnySize
  };

  // Block n's RowPageIds (0 for rows at or past the sequence's keys: table entries past the keys in use
  // may be garbage, and their rows are never read). kAnySize: a page size that is no power of two.
  template <bool kAnySize>
  __device__ static RowPageIds<kAnySize> row_page_ids(const FwdParams& p, const int* table, int page_shift, int keys,
                                                      int n) {
    const int thread = threadIdx.x % kThreads, chunk = thread % kChunksPerRow, first_row = thread / kChunksPerRow;
    RowPageIds<kAnySize> ids{};
#pragma unroll
    for (int r = 0; r < kRowIdRegisters; ++r) {
      const int pass = r * kChunksPerRow + chunk;
      const int key = n * Traits::kBlockN + first_row + pass * kRowsPerPass;
      const int page = kAnySize ? static_cast<int>(p.page_divisor.divide(key)) : key >> page_shift;
      ids.id[r] = pass < kPasses && key < keys ? __ldg(table + page * p.page_table_page_stride) : 0;
      if constexpr (kAnySize) ids.place[r] = key - page * p.page_size;
    }
    return ids;
  }

  // Block n's rows of one head into a swizzled tile, a page id a row (ids: row_page_ids of n); rows at or
  // past the sequence's keys and columns past the head dim as zeros. A power of two page size divides
  // kRowsPerPass and kBlockN, so a thread's rows all sit at its first row's place in a page; any other
  // (kAnySize) takes each row's place from its holder with its id.
  template <bool kAnySize>
  __device__ void copy_row_paged_block(const FwdParams& p, const KvRowsView& view, std::uint8_t* tile, int n, int keys,
                                       int head, const RowPageIds<kAnySize>& ids) const {
    const int thread = threadIdx.x % kThreads, chunk = thread % kChunksPerRow, first_row = thread / kChunksPerRow;
    const int row_limit = (chunk * 16 < view.row_bytes ? keys : 0) - n * Traits::kBlockN - first_row;
    const std::uint8_t* src = view.data + head * view.head_stride + chunk * 16;
    if constexpr (!kAnySize) src += (first_row & (p.page_size - 1)) * view.row_stride;
    const std::uint32_t dst = chunk_address(tile, chunk, first_row);
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      constexpr unsigned kAll = 0xffffffffu;
      const int held = pass / kChunksPerRow, holder = pass % kChunksPerRow;
      const std::uint32_t id = __shfl_sync(kAll, ids.id[held], holder, kChunksPerRow);
      const std::uint8_t* row_src = src + id * view.batch_stride;
      if constexpr (kAnySize) {
        const std::uint32_t place = __shfl_sync(kAll, ids.place[held], holder, kChunksPerRow);
        row_src += place * view.row_stride;
      }
      cp_async_16_or_zero(dst + pass * kRowsPerPass * kSwizzleBytes, row_src, pass * kRowsPerPass < row_limit);
    }
  }

  // Where chunk `chunk` (16 bytes) of row `row` lands in a tile: in column block chunk / 8, at 16-byte
  // slot chunk % 8 of the row's 128 bytes, XORed with row % 8 (the 128B swizzle).
  __device__ static std::uint32_t chunk_address(const std::uint8_t* tile, int chunk, int row) {
    return smem_address(tile) + chunk / 8 * KTile::kColumnBlockBytes + row * kSwizzleBytes +
           ((chunk % 8) ^ (row % 8)) * 16;
  }

  StageRing<Traits::kStages> ring_;
  int handover_slot_ = 0;
};

// The producer warpgroup of a kKvByCpAsync kernel, every thread: its leader claims, decodes and
// publishes each visit with its Q tile (TileLoader) and hands it, decoded, to the others through
// shared memory, and all of them copy the visit's K/V blocks from kSource.
//
// Decoded once: a decode is dependent integer arithmetic on one thread, ~0.6 us at a CTA's start; with
// the leader's two and the others' one, the first K block's copies went out 3.7 us after the CTA's entry
// at 1 x 32/8 x 64k (H100, session 58). (Publishing after the hand-off, so that the copies start before
// Q's issue, keeps the leader's decoded visit live across the barrier: the paged kernels spill.)
template <class Traits, KvCopySource kSource>
__device__ void run_cp_async_producer(typename Traits::SharedStorage& s, TensorMaps maps, const FwdParams& p) {
  const bool leader = threadIdx.x % Traits::kWarpgroupThreads == 0;
  TileLoader<Traits> publisher(s, maps);
  VisitSequence visits(p);
  CpAsyncKvLoader<Traits> loader;
  for (int slot = 0;; slot ^= 1) {
    if (leader) {
      HandedVisit& handed = s.producer_visit[slot];
      int id = visits.next();
      for (; id != kNoVisitLeft; id = visits.next()) {
        const VarlenVisit v = decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit,
                                                  Traits::kChunksAndSequsedQ, /*kSharingPieces=*/true>(p, id,
                                                                                                      &handed.tile);
        if (varlen_tile_is_empty(p, v)) continue;
        publisher.publish_varlen_visit(p, id, v);
        handed.kv = CpAsyncVisit{v.seq.rows.k_row0, v.seq.rows.k_batch, v.seq.bounds.seqlen_k,
                                 varlen_kv_head<Traits>(p, v.coord), v.visit.n_begin, v.visit.n_end};
        handed.counter = p.split_counters + (v.visit.tile - p.split.first_tile);
        break;
      }
      if (id == kNoVisitLeft) {
        publisher.publish_visit(p, kNoVisitLeft, TileVisit{});
        finish_schedule(p);
      }
      handed.id = id;
    }
    named_barrier_sync(Traits::kProducerBarrier, Traits::kWarpgroupThreads);
    const HandedVisit visit = s.producer_visit[slot];
    if (visit.id == kNoVisitLeft) return;
    if constexpr (kSource == KvCopySource::kRows) loader.load_visit(s, p, visit, leader);
    else loader.template load_paged_visit<kSource>(s, p, visit.kv, leader);
  }
}

}  // namespace hopattn::sm90
