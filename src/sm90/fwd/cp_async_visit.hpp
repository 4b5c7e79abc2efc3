// What the K/V copies of one visit need (kv_cp_async.cuh), and how the producer warpgroup's leader
// hands a visit to the other copying threads through shared memory (FwdTraits::SharedStorage).
#pragma once

namespace hopattn::sm90 {

// One visit's K/V copies: its sequence's first K/V row and batch entry, key count and K/V head, and
// the visit's blocks [n_begin, n_end). From a paged cache k_row0 is 0 and k_batch the sequence (its row
// of the page table).
struct CpAsyncVisit {
  int k_row0, k_batch, keys, kv_head, n_begin, n_end;
};

// The leader's hand-off: the visit id (kNoVisitLeft: none left) and its copies, decoded once by the
// leader (each decode is ~0.6 us of one thread's dependent arithmetic at a CTA's start, H100 session 58).
struct HandedVisit {
  int id;
  CpAsyncVisit kv;
};

}  // namespace hopattn::sm90
