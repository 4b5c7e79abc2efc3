// Which tile a CTA works on, and which K/V blocks that tile visits.
//
// Tile order: (batch, head) pairs are cut into equal groups of `heads_per_group` whose K/V fit in L2
// together; within a group, tiles go m-block by m-block across the group's heads, heaviest (last)
// causal rows first. So the CTAs in flight share K/V in L2, and the light causal tiles come last,
// where they fill the tail of the schedule.
//
// Hand-out: items are the whole tiles [0, split.first_tile), then the split units (split_plan.hpp).
// Each CTA starts with item blockIdx.x; a persistent CTA then takes the next unclaimed item from a
// global counter (atomicAdd), so CTAs that drew light tiles take more of them. The producer walks
// each item as visits (a whole tile, or a unit's pieces) and publishes each to the consumers beside
// its Q tile (q_full).
#pragma once

#include "sm90/fwd/attention_chunk.hpp"
#include "sm90/fwd/masked_blocks.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/sequence.cuh"

namespace hopattn::sm90 {

struct TileCoord {
  int m_block;
  int head;
  int batch;
};

__device__ __forceinline__ TileCoord decode_tile(const FwdParams& p, int tile) {
  const unsigned group = p.group_tiles_divisor.divide(unsigned(tile));
  const unsigned in_group = unsigned(tile) - group * p.group_tiles_divisor.divisor;
  const unsigned m = p.heads_per_group_divisor.divide(in_group);
  const unsigned head_batch = group * p.heads_per_group_divisor.divisor + in_group - m * p.heads_per_group_divisor.divisor;
  const unsigned batch = p.tile_heads_divisor.divide(head_batch);
  TileCoord c;
  c.m_block = p.causal ? p.num_m_blocks - 1 - int(m) : int(m);
  c.head = int(head_batch - batch * p.tile_heads_divisor.divisor);
  c.batch = int(batch);
  return c;
}

__device__ __forceinline__ int num_items(const FwdParams& p) { return p.split.first_tile + p.split.units; }

// The index of this CTA's next item; num_items or more means none is left. Called by the one thread
// that publishes visits (the producer), once per item after the first.
__device__ __forceinline__ int claim_next_item(const FwdParams& p) {
  if (p.tile_counter == nullptr) return num_items(p);  // one CTA per tile
  return static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1);
}

// Called once per CTA by the thread that claimed items, after its last claim: the last CTA to get
// here zeroes the counter pair for the next launch that draws it (host/tile_counters.hpp).
__device__ __forceinline__ void finish_schedule(const FwdParams& p) {
  if (p.tile_counter == nullptr) return;
  if (atomicAdd(p.tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
    p.tile_counter[0] = 0;
    p.tile_counter[1] = 0;
  }
}

// The visit id (split_plan.hpp) the producer publishes beside a Q tile (s.visit), which each consumer
// decodes itself (decode_visit). Written and read atomically: the q_full arrive and wait order them,
// but compute-sanitizer's racecheck does not follow mbarrier ordering for plain shared-memory accesses.
__device__ __forceinline__ void publish_visit(int* slot, int id) { atomicExch(slot, id); }
__device__ __forceinline__ int read_visit(int* slot) { return atomicOr(slot, 0); }

// kv_block_range_from_row (masked_blocks.hpp) of tile m_block's first row.
template <int kBlockM, int kBlockN, bool kChunks, class Bounds>
__device__ __forceinline__ void kv_block_range(const Bounds& p, const ChunkDivisor& chunk, int m_block, int* begin,
                                               int* end) {
  kv_block_range_from_row<kBlockM, kBlockN, kChunks>(p, chunk, m_block * kBlockM, begin, end);
}

// Visit id -> what to work on (id >= 0, and a piece that exists: VisitSequence hands out no other).
// kChunks: the kernel masks chunks (masked_blocks.hpp).
template <int kBlockM, int kBlockN, bool kChunks>
__device__ __forceinline__ TileVisit decode_visit(const FwdParams& p, int id) {
  TileVisit v{id, 0, 0, -1};
  if (id < p.split.first_tile) {
    const int m_block = decode_tile(p, id).m_block;
    kv_block_range<kBlockM, kBlockN, kChunks>(p, p.chunk_divisor, m_block, &v.n_begin, &v.n_end);
  } else {
    piece_of_visit(p.split, id, &v);
  }
  return v;
}

// A visit of a variable-length launch with its tile's sequence: a whole tile (visit id = tile index),
// or one of the equal-count pieces plan_varlen_split cuts every tile into, a share of that tile's own
// key blocks (varlen_piece_blocks). Tiles past the sequence's last row (the grid counts max_seqlen_q's
// tiles for every sequence) are empty: the producer skips them, so consumers never see one.
struct VarlenVisit {
  TileVisit visit;
  TileCoord coord;
  VarlenSequence seq;
};

// A copy kernel's split pieces share their tile's blocks (split_plan.hpp, SharedTileBlocks) where K/V
// come from rows; from a paged cache each warp reads a block's page ids a block ahead of its copies
// (kv_cp_async.cuh), which blocks claimed one at a time would not leave time for, so those pieces keep
// their fixed shares. (Claims run 9 blocks ahead at d 64 and handed over through the K ring were
// 2-4.5% slower there on the H100: perf-notes v160e, branch v160e.)
__device__ __forceinline__ bool pieces_share_blocks(const FwdParams& p) { return p.page_table == nullptr; }

// kSplit: the kernel takes split plans (FwdTraits::kVarlenSplit; else every visit is a whole tile).
// kChunksAndSequsedQ: the kernel takes chunks and seqused_q (FwdTraits::kChunksAndSequsedQ,
// Fp8FwdTraits::kChunksAndSequsedQ; without, its range ignores chunks and its rows seqused_q).
// kSharingPieces: the kernel copies K/V (FwdTraits::kKvByCpAsync), whose pieces may share their tile's
// blocks (pieces_share_blocks): such a piece's range is its own first block, and `tile`, where given,
// receives what its claims need (claims 0: none, as for every other visit).
template <int kBlockM, int kBlockN, bool kSplit, bool kChunksAndSequsedQ, bool kSharingPieces = false>
__device__ __forceinline__ VarlenVisit decode_varlen_visit(const FwdParams& p, int id,
                                                           SharedTileBlocks* tile = nullptr) {
  TileVisit piece{id, 0, 1, -1};
  if (kSplit && id >= p.split.first_tile) piece_of_visit(p.split, id, &piece);
  VarlenVisit v;
  v.coord = decode_tile(p, piece.tile);
  v.seq = varlen_sequence<kChunksAndSequsedQ>(p, v.coord.batch);
  int begin, end;
  const int m0 = v.coord.m_block * p.tile_q_rows;
  kv_block_range_from_row<kBlockM, kBlockN, kChunksAndSequsedQ>(v.seq.bounds, p.chunk_divisor, m0, &begin, &end);
  if (tile != nullptr) tile->claims = 0;
  if (kSplit && piece.split_slot >= 0) {
    if (kSharingPieces && pieces_share_blocks(p)) {
      if (tile != nullptr) *tile = shared_tile_blocks(p.split, begin, end);
      sharing_piece_first_block(piece, &begin, &end);
    } else {
      varlen_piece_blocks(p.split, piece, &begin, &end);
    }
  }
  v.visit = TileVisit{piece.tile, begin, end, piece.split_slot};
  return v;
}

__device__ __forceinline__ bool varlen_tile_is_empty(const FwdParams& p, const VarlenVisit& v) {
  return v.coord.m_block * p.tile_q_rows >= v.seq.bounds.seqlen_q;
}

// This CTA's visit ids in order, for the thread that publishes them: item blockIdx.x first, then
// claimed ones; a whole-tile item is one visit, a unit one per piece.
class VisitSequence {
 public:
  __device__ explicit VisitSequence(const FwdParams& p) : p_(p) {}

  // The next visit id, or kNoVisitLeft once the hand-out has none left for this CTA. Items are claimed only when the previous one is used up, so a CTA never holds
  // one it has not started.
  __device__ int next() {
    while (piece_ > 0 && piece_ < kPiecesPerUnit) {  // the rest of the current unit
      const int id = unit_id_ + piece_++;
      TileVisit unused;
      if (piece_of_visit(p_.split, id, &unused)) return id;
      piece_ = kPiecesPerUnit;  // pieces come in order: none after a missing one
    }
    const int item = started_ ? claim_next_item(p_) : static_cast<int>(blockIdx.x);
    started_ = true;
    if (item >= num_items(p_)) return kNoVisitLeft;
    if (item < p_.split.first_tile) return item;
    unit_id_ = p_.split.first_tile + kPiecesPerUnit * (item - p_.split.first_tile);
    piece_ = 1;
    return unit_id_;  // every unit has a first piece
  }

 private:
  const FwdParams& p_;
  bool started_ = false;
  int unit_id_ = 0;
  int piece_ = 0;  // the next piece of the current unit; 0: no unit under way
};

}  // namespace hopattn::sm90
