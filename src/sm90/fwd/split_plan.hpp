// Splitting the last tiles of a launch along the keys (stream-K for the tail), so that every CTA
// finishes at about the same time.
//
// Without it, T equal tiles on P persistent CTAs take ceil(T / P) tile times: 2048 tiles on 132 SMs
// run 16 rounds where 15.5 would do (the last round leaves half the SMs idle), and 64 tiles use 64 of
// 132 SMs. With it, tiles [first_tile, num_tiles) (the "region": the partial round, with the last full
// round too where plan_split's region_rounds says so, or all tiles when there are fewer than P) are
// laid end to end as key blocks, and that run is cut into `units` runs of (almost) equal length,
// handed out after the whole tiles. A unit is walked as pieces: the part of one tile it covers. A
// piece that is not a whole tile is "split": its CTA stores a partial result in its slot. In the
// 16-bit kernel that is O unnormalized with its row max and row sum, and the last piece of a tile to
// finish merges them all and stores the tile (split_merge.cuh); in the FP8 kernel it is O normalized
// with its LSE, and a second kernel merges (fwd_fp8/split_combine.cuh).
//
// Plain C++ (host and device) so that tests/cpu/test_split_plan.cpp checks the cuts and slots.
#pragma once

#include <cstdint>

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// Upper bounds of a plan, for the launch's workspace and counters.
constexpr int kMaxSplitUnits = 1024;
constexpr int kMaxSplitCounters = 2048;  // split tiles x consumer warpgroups
// What a piece costs beyond its blocks, in key blocks, for the heuristic. H200, 2026-12-01, a build in
// which the FP8 kernels split too: FP8 d 128 at 2k keys (16-block tiles) ran 3.7% slower split while
// the plan without this cost predicted 3% faster; 16k (86-block tiles) and d 64 16k ran 2-3% faster.
constexpr double kPieceCostBlocks = 3.0;

struct SplitPlan {
  int first_tile;    // tiles from here on are in the region; num_tiles: no split
  int units;         // runs handed out after the whole tiles; 0: no split
  int tile_blocks;   // key blocks per tile (all tiles have the same: no causal mask, no window)
  int total_blocks;  // (num_tiles - first_tile) * tile_blocks
  // total_blocks = unit_blocks * units + unit_remainder: unit boundaries without 64-bit products or
  // divisions (a 64-bit division is a called subroutine, whose stack frame the kernels cannot afford).
  int unit_blocks;
  int unit_remainder;
  float units_per_block;  // units / total_blocks: unit_of_block's first guess
};

// What a consumer works on: key blocks [n_begin, n_end) of tile `tile`; split_slot >= 0 names the
// piece's partial-result slot (2 per unit: its first piece and its last), -1 for a whole tile.
// The producer publishes it as one int, the visit id (scheduler.cuh): whole tile t is id t
// (t < first_tile), piece k of unit u is first_tile + kPiecesPerUnit * u + k.
struct TileVisit {
  int tile;
  int n_begin;
  int n_end;
  int split_slot;
};

// A unit spans at most 3 tiles: plan_split keeps units within 2 tiles' worth of blocks.
constexpr int kPiecesPerUnit = 3;
constexpr int kNoVisitLeft = -1;

HOPATTN_HOST_DEVICE constexpr SplitPlan no_split_plan(int num_tiles) {
  return SplitPlan{num_tiles, 0, 0, 0, 0, 0, 0.0f};
}

HOPATTN_HOST_DEVICE constexpr SplitPlan make_split_plan(int first_tile, int units, int tile_blocks, int num_tiles) {
  const int total = (num_tiles - first_tile) * tile_blocks;
  return SplitPlan{first_tile, units, tile_blocks, total, total / units, total % units,
                   static_cast<float>(units) / static_cast<float>(total)};
}

// First key block (in the region's run) of unit u, floor(u * total_blocks / units) (u <= units, and
// u * unit_remainder < 2^20); unit u covers [unit_begin(u), unit_begin(u + 1)).
HOPATTN_HOST_DEVICE constexpr int unit_begin(const SplitPlan& s, int u) {
  return u * s.unit_blocks + static_cast<int>(static_cast<unsigned>(u * s.unit_remainder) / static_cast<unsigned>(s.units));
}

// The unit that covers block x of the region's run: the largest u with unit_begin(u) <= x. The float
// guess is off by at most one either way (float's 24 bits against fewer than 2^10 units).
HOPATTN_HOST_DEVICE constexpr int unit_of_block(const SplitPlan& s, int x) {
  int u = static_cast<int>(static_cast<float>(x) * s.units_per_block);
  u = u < 0 ? 0 : (u >= s.units ? s.units - 1 : u);
  while (u > 0 && unit_begin(s, u) > x) --u;
  while (u + 1 < s.units && unit_begin(s, u + 1) <= x) ++u;
  return u;
}

// Piece k (0 .. kPiecesPerUnit - 1) of unit u: false where the unit has fewer pieces. The unit's
// first piece, when split, takes slot 2u; any later split piece is its last and takes 2u + 1.
HOPATTN_HOST_DEVICE constexpr bool unit_piece(const SplitPlan& s, int u, int k, TileVisit* v) {
  const int first = unit_begin(s, u), end = unit_begin(s, u + 1);
  const int tile = first / s.tile_blocks + k;  // in the region
  const int tile_start = tile * s.tile_blocks;
  const int begin = first > tile_start ? first : tile_start;
  const int stop = end < tile_start + s.tile_blocks ? end : tile_start + s.tile_blocks;
  if (begin >= stop) return false;
  v->tile = s.first_tile + tile;
  v->n_begin = begin - tile_start;
  v->n_end = stop - tile_start;
  const bool whole = v->n_begin == 0 && v->n_end == s.tile_blocks;
  v->split_slot = whole ? -1 : 2 * u + (k == 0 ? 0 : 1);
  return true;
}

// The piece a visit id at or past first_tile names (false: that unit has no such piece).
HOPATTN_HOST_DEVICE constexpr bool piece_of_visit(const SplitPlan& s, int id, TileVisit* v) {
  const int rel = id - s.first_tile;
  return unit_piece(s, rel / kPiecesPerUnit, rel % kPiecesPerUnit, v);
}

// The pieces of split tile region_tile (its index in the region, tile - first_tile), in block order:
// one per unit from first_unit to last_unit, each with slot(u), or -1 for a unit with no block (more
// units than blocks).
struct TilePieces {
  int first_unit, last_unit, start;  // start: the tile's first block in the region's run

  HOPATTN_HOST_DEVICE constexpr static TilePieces of(const SplitPlan& s, int region_tile) {
    const int start = region_tile * s.tile_blocks;
    return TilePieces{unit_of_block(s, start), unit_of_block(s, start + s.tile_blocks - 1), start};
  }
  HOPATTN_HOST_DEVICE constexpr int slot(const SplitPlan& s, int u) const {
    const int begin = unit_begin(s, u);
    if (begin == unit_begin(s, u + 1)) return -1;
    return 2 * u + (begin < start ? 1 : 0);  // a unit that began in an earlier tile ends here
  }
  HOPATTN_HOST_DEVICE constexpr int count(const SplitPlan& s) const {
    int n = 0;
    for (int u = first_unit; u <= last_unit; ++u) n += slot(s, u) >= 0;
    return n;
  }
};

// A split piece as a consumer keeps it through its mainloop: one int, its slot and its tile's index
// in the region (below kMaxSplitCounters / 2: every kernel has at least two consumer warpgroups);
// -1 for a whole tile.
struct SplitPiece {
  static constexpr int kTileBits = 11;
  int packed;
  HOPATTN_HOST_DEVICE static constexpr SplitPiece of(const SplitPlan& s, const TileVisit& v) {
    return SplitPiece{v.split_slot < 0 ? -1 : (v.split_slot << kTileBits) | (v.tile - s.first_tile)};
  }
  HOPATTN_HOST_DEVICE constexpr bool split() const { return packed >= 0; }
  HOPATTN_HOST_DEVICE constexpr int slot() const { return packed >> kTileBits; }
  HOPATTN_HOST_DEVICE constexpr int region_tile() const { return packed & ((1 << kTileBits) - 1); }
};
static_assert(kMaxSplitCounters / 2 <= (1 << SplitPiece::kTileBits), "SplitPiece's tile field");

// The plan for num_tiles tiles of tile_blocks key blocks on `ctas` persistent CTAs. num_splits: the
// API's (0: split the tail where that shortens the launch by 2% or more, counting kPieceCostBlocks per
// piece; 1: never; n >= 2: every tile in n pieces). uniform: every tile visits all tile_blocks blocks
// (no causal mask, no window), which the equal cuts rely on. region_rounds (1 or 2): the heuristic's
// region is the partial round alone (with the last full round where the partial one is small), or
// the last full round too (Traits::kSplitRegionRounds says which kernel takes which). An explicit
// count takes at most kMaxSplitUnits / num_tiles pieces a tile; a plan that would still exceed
// kMaxSplitUnits or kMaxSplitCounters (over `warpgroups` consumer warpgroups) is not made: no split.
HOPATTN_HOST_DEVICE constexpr SplitPlan plan_split(int num_tiles, int tile_blocks, int ctas, int num_splits,
                                                  bool uniform, int warpgroups, int region_rounds) {
  const SplitPlan none = no_split_plan(num_tiles);
  if (!uniform || num_splits == 1 || tile_blocks < 2 || ctas < 2 || num_tiles < 1) return none;
  int first = 0;
  int units = 0;
  if (num_splits >= 2) {
    // At most a block a piece, and at most kMaxSplitUnits pieces in all: a larger count is cut to what
    // fits (falling back to no split would run 1 x 32/8 x 64k on 8 CTAs, 5.4x slower; session 57).
    int pieces = num_splits < tile_blocks ? num_splits : tile_blocks;
    if (pieces > kMaxSplitUnits / num_tiles) pieces = kMaxSplitUnits / num_tiles;
    if (pieces < 2) return none;
    units = num_tiles * pieces;
  } else {
    if (num_tiles % ctas == 0) return none;
    // The whole rounds stay whole but the last region_rounds - 1; those and the partial one are split.
    // A partial round of under a quarter of the CTAs would cut each of its tiles into more than 4
    // pieces: the last full round joins it.
    int whole_rounds = num_tiles / ctas - (region_rounds - 1);
    if (region_rounds == 1 && 4 * (num_tiles % ctas) < ctas) --whole_rounds;
    first = whole_rounds > 0 ? whole_rounds * ctas : 0;
    units = ctas;
    const std::int64_t region_blocks = static_cast<std::int64_t>(num_tiles - first) * tile_blocks;
    if (region_blocks < units) units = static_cast<int>(region_blocks);
    // Launch length in key blocks: ceil(T / P) tiles unsplit; split, the whole rounds, a unit, and
    // kPieceCostBlocks for each piece a unit may span (a Q load and pipeline fill, the partial's
    // store and the merge).
    const double unit = static_cast<double>(region_blocks) / units;
    const double pieces = static_cast<int>(unit / tile_blocks) + 2;
    const double unsplit = static_cast<double>((num_tiles + ctas - 1) / ctas) * tile_blocks;
    const double split = static_cast<double>(first / ctas) * tile_blocks + unit + pieces * kPieceCostBlocks;
    if (split > 0.98 * unsplit) return none;
  }
  if (units > kMaxSplitUnits || static_cast<std::int64_t>(num_tiles - first) * warpgroups > kMaxSplitCounters)
    return none;
  // At most kPiecesPerUnit pieces per unit: a unit of at most 2 tiles' blocks spans at most 3 tiles.
  const std::int64_t longest_unit = (static_cast<std::int64_t>(num_tiles - first) * tile_blocks + units - 1) / units;
  if (longest_unit > 2 * static_cast<std::int64_t>(tile_blocks)) return none;
  return make_split_plan(first, units, tile_blocks, num_tiles);
}

// Variable-length launches: tiles differ in their key blocks (and the host knows only the longest),
// so the cut above does not apply. Instead every tile is cut into the same number of pieces, piece k
// of n taking blocks [b + (e - b) k / n, b + (e - b) (k + 1) / n) of the tile's own range [b, e) (a
// short sequence's pieces may be empty). It is the plan above over n virtual blocks per tile: unit u
// is piece u % n of tile u / n, and that plan's visit ids and slots carry over unchanged (the pieces
// are merged by fwd/varlen_combine.cuh).
// num_splits: as plan_split's; the heuristic (0) splits only launches of at most half as many tiles
// as CTAs (a few tiles per sequence, each over the whole cache), into as many pieces as fill the CTAs
// once, of at least kMinVarlenPieceBlocks blocks of the longest sequence. A decoding step (`decoding`:
// at most half of each tile's rows live) is latency more than FLOPs: where pieces on half the CTAs
// would still be short (at most kStreamingPieceBlocks blocks), it takes those, down to a block a piece.
// H200, session 23's split-count table (perf-notes): at batch 1 the best counts were 8 pieces of 1
// block at 32/8 1k (14% under 2 pieces of 4), 16 at 28/4 4k and 16k (6% under 8 and 32); from 8 blocks
// a piece at half the CTAs (32/8 16k, d 64 64k) filling all of them was 7-50% faster.
constexpr int kMinVarlenPieceBlocks = 4;
constexpr int kStreamingPieceBlocks = 8;

HOPATTN_HOST_DEVICE constexpr SplitPlan plan_varlen_split(int num_tiles, int longest_tile_blocks, int ctas,
                                                          int num_splits, int warpgroups, bool decoding) {
  if (num_tiles < 1 || num_splits == 1) return no_split_plan(num_tiles);
  int pieces = num_splits;
  if (num_splits == 0) {
    if (2 * num_tiles > ctas) return no_split_plan(num_tiles);
    pieces = ctas / num_tiles;
    if (decoding) {
      const int half = ctas / 2 / num_tiles > 2 ? ctas / 2 / num_tiles : 2;
      if (longest_tile_blocks <= kStreamingPieceBlocks * half) pieces = half;
      pieces = pieces < longest_tile_blocks ? pieces : longest_tile_blocks;
    } else {
      const int longest = longest_tile_blocks / kMinVarlenPieceBlocks;
      pieces = pieces < longest ? pieces : longest;
    }
  }
  // At most kMaxSplitUnits pieces in all, cut here rather than by plan_split: its cut would keep n
  // virtual blocks a tile under fewer units, pieces of one or two of them, and a sharing piece
  // (SharedTileBlocks below) is one.
  if (pieces > kMaxSplitUnits / num_tiles) pieces = kMaxSplitUnits / num_tiles;
  if (pieces < 2) return no_split_plan(num_tiles);
  return plan_split(num_tiles, pieces, ctas, pieces, /*uniform=*/true, warpgroups, /*region_rounds=*/1);
}

// The key blocks of a variable-length piece (v: a piece of plan_varlen_split's plan, its blocks the
// virtual [k, k + 1)) within its tile's range [*begin, *end), in place.
HOPATTN_HOST_DEVICE constexpr void varlen_piece_blocks(const SplitPlan& s, const TileVisit& v, int* begin, int* end) {
  const int blocks = *end > *begin ? *end - *begin : 0;
  const int first = *begin;
  *begin = first + blocks * v.n_begin / s.tile_blocks;
  *end = first + blocks * v.n_end / s.tile_blocks;
}

// The copy kernels' pieces from rows (kv_cp_async.cuh: FwdTraits::kKvByCpAsync, K/V not paged) share
// their tile's blocks [b, e) at run time instead of taking fixed shares: piece k of n loads block
// e - 1 - k first (none where k >= e - b), and then claims blocks from a counter of the tile's, claim c
// being block e - 1 - n - c while that is at least b. So the CTAs that stream faster take more of the
// tile: with fixed shares, CTAs of equal work ended 6-17 us apart at 1 x 32/8 x 64k, those on some GPCs
// always first (H100, perf-notes session 58). Every piece claims until a claim finds no block, so a
// tile's claims number max(0, e - b - n) + n: the claim that draws the last count zeroes the counter
// for the next launch. Tiles of at most n blocks make no claims.
struct SharedTileBlocks {
  int lowest;     // b: claims below it find no block
  int claim_top;  // the block of the tile's first claim, e - 1 - n
  int claims;     // the tile's claims in all; 0: no claims (at most one block a piece)
};

HOPATTN_HOST_DEVICE constexpr SharedTileBlocks shared_tile_blocks(const SplitPlan& s, int begin, int end) {
  const int blocks = end - begin, pieces = s.tile_blocks;
  return SharedTileBlocks{begin, end - 1 - pieces, blocks > pieces ? blocks : 0};
}

// Claim c's block (c: the counter's value before the claim), or -1 where none is left.
HOPATTN_HOST_DEVICE constexpr int claimed_block(const SharedTileBlocks& t, int c) {
  return t.claim_top - c >= t.lowest ? t.claim_top - c : -1;
}

HOPATTN_HOST_DEVICE constexpr bool is_tiles_last_claim(const SharedTileBlocks& t, int c) { return c == t.claims - 1; }

// A sharing piece's own first block (v: a piece of plan_varlen_split's plan) as [*begin, *end) in place of
// its tile's range; empty where the tile has no block for it.
HOPATTN_HOST_DEVICE constexpr void sharing_piece_first_block(const TileVisit& v, int* begin, int* end) {
  const int first = *end - 1 - v.n_begin;
  *begin = first >= *begin ? first : first + 1;
  *end = first + 1;
}

}  // namespace hopattn::sm90
