// Counters for persistent launches (src/sm90/fwd/scheduler.cuh), without a memset per launch: each
// device has a pool of zeroed slots, {next item, CTAs finished} and then the split counters of
// split_merge.cuh; launch k takes slot k % kTileCounterSlots, and the kernel leaves it zero (the last
// CTA zeroes the pair, the last piece of each split tile its counter). Two launches in flight at the
// same time share a slot only if kTileCounterSlots other launches were started between them.
#pragma once

#include "hopattn/hopattn.hpp"
#include "sm90/fwd/split_plan.hpp"

namespace hopattn::sm90 {

constexpr int kTileCounterSlots = 256;
constexpr int kTilePairInts = 2;  // {next item, CTAs finished}; the split counters follow
constexpr int kTileCounterInts = kTilePairInts + kMaxSplitCounters;

// A slot of kTileCounterInts zeroed ints on `device` (the current device) for one launch.
Status acquire_tile_counter(int device, int** counter);

}  // namespace hopattn::sm90
