// Tile counters for persistent launches (src/sm90/fwd/scheduler.cuh), without a memset per launch:
// each device has a pool of zeroed {next tile, CTAs finished} pairs; launch k takes pair
// k % kTileCounterSlots and the last CTA of the launch zeroes it again. Two launches in flight at
// the same time share a pair only if kTileCounterSlots other launches were started between them.
#pragma once

#include "hopattn/hopattn.hpp"

namespace hopattn::sm90 {

constexpr int kTileCounterSlots = 1024;

// A pair of zeroed ints on `device` (the current device) for one launch.
Status acquire_tile_counter(int device, int** counter);

}  // namespace hopattn::sm90
