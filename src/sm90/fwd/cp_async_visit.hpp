// What the K/V copies of one visit need (kv_cp_async.cuh), and how the producer warpgroup's leader
// hands a visit to the other copying threads through shared memory (FwdTraits::SharedStorage).
#pragma once

#include "sm90/fwd/split_plan.hpp"

namespace hopattn::sm90 {

// One visit's K/V copies: its sequence's first K/V row and batch entry, key count and K/V head, and
// the visit's blocks [n_begin, n_end) (a sharing piece's: its own first block; split_plan.hpp). From a
// paged cache k_row0 is 0 and k_batch the sequence (its row of the page table).
struct CpAsyncVisit {
  int k_row0, k_batch, keys, kv_head, n_begin, n_end;
};

// The leader's hand-off: the visit id (kNoVisitLeft: none left) and its copies, decoded once by the
// leader (each decode is ~0.6 us of one thread's dependent arithmetic at a CTA's start, H100 session 58),
// and for a piece that shares its tile's blocks (tile.claims > 0) its tile's counter.
struct HandedVisit {
  int id;
  CpAsyncVisit kv;
  SharedTileBlocks tile;
  int* counter;
};

// A K stage's entry (SharedStorage::stage_block, kKvByCpAsync): the block it holds, and whether it is
// the visit's last; the producer's leader writes it before its arrival on the stage's full barrier.
HOPATTN_HOST_DEVICE constexpr int stage_entry(int block, bool last) { return block << 1 | (last ? 1 : 0); }
HOPATTN_HOST_DEVICE constexpr int stage_entry_block(int entry) { return entry >> 1; }
HOPATTN_HOST_DEVICE constexpr bool stage_entry_is_last(int entry) { return (entry & 1) != 0; }

}  // namespace hopattn::sm90
