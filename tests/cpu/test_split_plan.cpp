// The tail split's plan (src/sm90/fwd/split_plan.hpp): which launches it splits, and that the units'
// pieces cover every key block of the split tiles exactly once, with the slots the merge reads back.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "sm90/fwd/split_plan.hpp"

namespace hopattn::sm90 {
namespace {

struct Piece {
  int n_begin, n_end, slot;
};

// Walks every unit of the plan and checks the pieces against the plan's own definitions.
void check_pieces(const SplitPlan& s, int num_tiles) {
  ASSERT_GT(s.units, 0);
  ASSERT_LE(s.units, kMaxSplitUnits);
  ASSERT_EQ(s.total_blocks, (num_tiles - s.first_tile) * s.tile_blocks);
  std::map<int, std::vector<Piece>> by_tile;
  std::set<int> slots;
  int shortest = s.total_blocks, longest = 0;
  for (int u = 0; u < s.units; ++u) {
    int blocks = 0;
    TileVisit v;
    for (int k = 0; k < kPiecesPerUnit && unit_piece(s, u, k, &v); ++k) {
      ASSERT_GE(v.tile, s.first_tile);
      ASSERT_LT(v.tile, num_tiles);
      ASSERT_LE(0, v.n_begin);
      ASSERT_LT(v.n_begin, v.n_end);
      ASSERT_LE(v.n_end, s.tile_blocks);
      const bool whole = v.n_begin == 0 && v.n_end == s.tile_blocks;
      ASSERT_EQ(whole, v.split_slot < 0);
      if (!whole) {
        ASSERT_TRUE(v.split_slot == 2 * u || v.split_slot == 2 * u + 1) << "unit " << u << " slot " << v.split_slot;
        ASSERT_TRUE(slots.insert(v.split_slot).second) << "slot " << v.split_slot << " used twice";
      }
      by_tile[v.tile].push_back({v.n_begin, v.n_end, v.split_slot});
      blocks += v.n_end - v.n_begin;
      TileVisit by_id{};  // the visit id the producer publishes names the same piece
      ASSERT_TRUE(piece_of_visit(s, s.first_tile + kPiecesPerUnit * u + k, &by_id));
      ASSERT_EQ(by_id.tile, v.tile);
      ASSERT_EQ(by_id.n_begin, v.n_begin);
    }
    ASSERT_EQ(blocks, unit_begin(s, u + 1) - unit_begin(s, u)) << "unit " << u << " has more than kPiecesPerUnit pieces";
    shortest = std::min(shortest, blocks);
    longest = std::max(longest, blocks);
  }
  // Equal shares of the run, to a block (units with no block exist only when there are fewer blocks).
  EXPECT_LE(longest - shortest, 1);
  ASSERT_EQ(static_cast<int>(by_tile.size()), num_tiles - s.first_tile);
  for (auto& [tile, pieces] : by_tile) {
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.n_begin < b.n_begin; });
    int next = 0;
    std::vector<int> piece_slots;
    for (const Piece& piece : pieces) {
      ASSERT_EQ(piece.n_begin, next) << "tile " << tile << ": blocks skipped or visited twice";
      next = piece.n_end;
      piece_slots.push_back(piece.slot);
    }
    ASSERT_EQ(next, s.tile_blocks) << "tile " << tile;
    if (pieces.size() == 1) continue;  // a whole tile: nothing to merge
    std::vector<int> merged;
    const TilePieces tile_pieces = TilePieces::of(s, tile - s.first_tile);
    for (int u = tile_pieces.first_unit; u <= tile_pieces.last_unit; ++u) {
      if (const int slot = tile_pieces.slot(s, u); slot >= 0) merged.push_back(slot);
    }
    EXPECT_EQ(tile_pieces.count(s), static_cast<int>(pieces.size()));
    EXPECT_EQ(merged, piece_slots) << "tile " << tile << ": the merge must read every piece, in block order";
  }
}

TEST(SplitPlan, PiecesCoverEveryBlockOnceOnRandomLaunches) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> tiles(1, 3000), blocks(1, 300), ctas(2, 264), splits(0, 9);
  int planned = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int num_tiles = tiles(rng), tile_blocks = blocks(rng), sms = ctas(rng);
    const int num_splits = splits(rng) < 6 ? 0 : splits(rng);  // mostly the heuristic
    const int region_rounds = 1 + trial % 2;
    const SplitPlan s = plan_split(num_tiles, tile_blocks, sms, num_splits, true, 2, region_rounds);
    SCOPED_TRACE(testing::Message() << "tiles " << num_tiles << " blocks " << tile_blocks << " ctas " << sms
                                    << " num_splits " << num_splits << " region_rounds " << region_rounds);
    if (s.units == 0) {
      ASSERT_EQ(s.first_tile, num_tiles);
      continue;
    }
    ++planned;
    ASSERT_LE(0, s.first_tile);
    ASSERT_LT(s.first_tile, num_tiles);
    ASSERT_LE((num_tiles - s.first_tile) * 2, kMaxSplitCounters);
    check_pieces(s, num_tiles);
  }
  EXPECT_GT(planned, 300);  // the draws must exercise splits, not only refusals
}

TEST(SplitPlan, HeuristicSplitsTheLastRoundsOnly) {
  // 16 heads of 16k queries in 128-row tiles on 132 SMs: 2048 tiles, 15.5 rounds.
  const SplitPlan s = plan_split(2048, 86, 132, 0, true, 2, 2);
  EXPECT_EQ(s.first_tile, 14 * 132);  // 14 whole rounds, then 200 tiles over 132 units
  EXPECT_EQ(s.units, 132);
  EXPECT_EQ(s.tile_blocks, 86);
  check_pieces(s, 2048);
  // Fewer tiles than SMs: every tile is split, over at most one unit per block.
  const SplitPlan few = plan_split(16, 43, 132, 0, true, 2, 2);
  EXPECT_EQ(few.first_tile, 0);
  EXPECT_EQ(few.units, 132);
  check_pieces(few, 16);
  EXPECT_EQ(plan_split(100, 86, 132, 0, true, 2, 2).units, 132);  // 100 tiles take 0.76 of a tile time each
  // Fewer blocks than SMs: a unit per block.
  const SplitPlan short_keys = plan_split(2, 40, 132, 0, true, 2, 2);
  EXPECT_EQ(short_keys.units, 80);
  check_pieces(short_keys, 2);
}

TEST(SplitPlan, OneRegionRoundSplitsThePartialRoundOnly) {
  // The FP8 kernels' region (Fp8FwdTraits::kSplitRegionRounds): 15 whole rounds, then 68 tiles over
  // 132 units, each under a tile.
  const SplitPlan s = plan_split(2048, 86, 132, 0, true, 2, 1);
  EXPECT_EQ(s.first_tile, 15 * 132);
  EXPECT_EQ(s.units, 132);
  check_pieces(s, 2048);
  // 43-block tiles: 15 rounds + 22 blocks against 16 rounds is 2.2% shorter even with 2 pieces' cost,
  // where the two-round region (3 pieces of cost on 65 blocks) is not 2% shorter.
  EXPECT_EQ(plan_split(2048, 43, 132, 0, true, 2, 1).units, 132);
  EXPECT_EQ(plan_split(2048, 43, 132, 0, true, 2, 2).units, 0);
  // Under one round the two regions are the same: every tile.
  EXPECT_EQ(plan_split(100, 86, 132, 0, true, 2, 1).first_tile, 0);
  // 4096 tiles: a partial round of 4 tiles would cut each in 33 pieces; the last full round joins it.
  EXPECT_EQ(plan_split(4096, 128, 132, 0, true, 2, 1).first_tile, 30 * 132);
}

TEST(SplitPlan, NoSplitWhereItCannotPayOrIsNotAllowed) {
  EXPECT_EQ(plan_split(2 * 132, 86, 132, 0, true, 2, 2).units, 0);   // whole rounds
  EXPECT_EQ(plan_split(130, 86, 132, 0, true, 2, 2).units, 0);       // 2% or less to win
  EXPECT_EQ(plan_split(2048, 86, 132, 0, false, 2, 2).units, 0);     // causal or windowed tiles
  EXPECT_EQ(plan_split(2048, 86, 132, 1, true, 2, 2).units, 0);      // num_splits 1: never
  EXPECT_EQ(plan_split(2048, 1, 132, 0, true, 2, 2).units, 0);       // one key block: nothing to cut
  EXPECT_EQ(plan_split(1024, 16, 132, 0, true, 2, 2).units, 0);      // 7.8 rounds of short tiles: pieces cost more
  EXPECT_EQ(plan_split(3, 2, 132, 0, true, 2, 2).units, 0);          // 2-block tiles: likewise
  EXPECT_EQ(plan_split(2048, 86, 132, 4, true, 2, 2).units, 0);      // not 2 pieces a tile in kMaxSplitUnits
}

TEST(SplitPlan, ExplicitSplitsCutEveryTileEvenly) {
  const SplitPlan s = plan_split(10, 43, 132, 3, true, 2, 2);
  EXPECT_EQ(s.first_tile, 0);
  EXPECT_EQ(s.units, 30);
  check_pieces(s, 10);
  for (int u = 0; u < s.units; ++u) {  // no unit crosses a tile
    TileVisit v;
    ASSERT_TRUE(unit_piece(s, u, 0, &v));
    EXPECT_FALSE(unit_piece(s, u, 1, &v));
  }
  // More splits than blocks: one piece per block.
  EXPECT_EQ(plan_split(10, 2, 132, 5, true, 2, 2).units, 20);
  // More pieces than kMaxSplitUnits: as many a tile as fit, still even.
  const SplitPlan capped = plan_split(100, 86, 132, 16, true, 2, 2);
  EXPECT_EQ(capped.units, 100 * 10);
  check_pieces(capped, 100);
}

// plan_varlen_split: every tile in the same number of pieces, each a share of that tile's own blocks;
// together a tile's pieces cover its range [b, e) exactly once, in order, at any length (empty pieces
// where the tile has fewer blocks than pieces), and each piece has its own slot.
TEST(VarlenSplitPlan, PiecesCoverEachTilesOwnBlocksOnce) {
  std::mt19937_64 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 200; ++trial) {
    const int tiles = pick(1, 100), pieces = pick(2, 9);
    const SplitPlan s = plan_varlen_split(tiles, pick(1, 500), 132, pieces, 2, trial % 2 == 0);
    ASSERT_EQ(s.units, tiles * pieces);
    ASSERT_EQ(s.first_tile, 0);
    std::set<int> slots;
    for (int t = 0; t < tiles; ++t) {
      const int b = pick(0, 50), e = b + pick(0, 60);
      int next = b;
      for (int k = 0; k < pieces; ++k) {
        TileVisit v;
        // Unit t * pieces + k is piece k of tile t, its only piece (visit id: split_plan.hpp).
        ASSERT_TRUE(piece_of_visit(s, s.first_tile + kPiecesPerUnit * (t * pieces + k), &v));
        ASSERT_EQ(v.tile, t);
        ASSERT_GE(v.split_slot, 0);
        EXPECT_TRUE(slots.insert(v.split_slot).second) << "slot " << v.split_slot << " twice";
        int begin = b, end = e;
        varlen_piece_blocks(s, v, &begin, &end);
        ASSERT_EQ(begin, next) << "tile " << t << " piece " << k;
        ASSERT_LE(begin, end);
        next = end;
      }
      EXPECT_EQ(next, e) << "tile " << t;
      const TilePieces tp = TilePieces::of(s, t);
      EXPECT_EQ(tp.count(s), pieces);  // the merge waits for every piece, empty ones included
    }
  }
}

// The copy kernels' sharing pieces (SharedTileBlocks): each piece's own first block, then claims on the
// tile's counter in any order the CTAs make them, each piece until its first claim that finds no
// block. Every block of the tile is loaded exactly once, the claims number the tile's count, and the
// one that zeroes the counter is the last made. Counts past kMaxSplitUnits in all are cut to what fits
// (the pieces of a 1 x 32/8 x 40001 step asked 200 a tile are 128), and a piece is still one virtual block
// of its tile: the first form of v156 read 200 pieces there and lost blocks (H200, session 59).
TEST(VarlenSplitPlan, SharingPiecesTakeEveryBlockOnceInAnyClaimOrder) {
  std::mt19937_64 rng(11);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 500; ++trial) {
    const int tiles = trial % 2 == 0 ? pick(1, 20) : pick(1, 600), asked = trial % 2 == 0 ? pick(2, 40) : pick(2, 300);
    const SplitPlan s = plan_varlen_split(tiles, pick(1, 400), 132, asked, 2, true);
    if (s.units == 0) {
      ASSERT_LT(kMaxSplitUnits / tiles, 2) << tiles << " tiles, " << asked << " pieces asked";
      continue;
    }
    const int pieces = s.tile_blocks;
    ASSERT_EQ(pieces, std::min(asked, kMaxSplitUnits / tiles));
    ASSERT_EQ(s.units, tiles * pieces);
    const int t = pick(0, tiles - 1);
    const int b = pick(0, 30), e = b + pick(0, 120);
    const SharedTileBlocks tile = shared_tile_blocks(s, b, e);
    std::vector<int> taken(e + 1, 0);
    std::vector<int> claiming;  // pieces still claiming
    for (int k = 0; k < pieces; ++k) {
      TileVisit v;
      ASSERT_TRUE(piece_of_visit(s, s.first_tile + kPiecesPerUnit * (t * pieces + k), &v));
      ASSERT_EQ(v.tile, t);
      ASSERT_EQ(v.n_begin, k);
      ASSERT_EQ(v.n_end, k + 1);
      int begin = b, end = e;
      sharing_piece_first_block(v, &begin, &end);
      ASSERT_LE(begin, end);
      ASSERT_LE(end - begin, 1);
      if (end > begin) {
        ASSERT_GE(begin, b);
        ++taken[begin];
        if (tile.claims > 0) claiming.push_back(k);
      }
    }
    int counter = 0;
    bool zeroed = false;
    while (!claiming.empty()) {
      ASSERT_FALSE(zeroed) << "a claim after the counter was zeroed";
      const int i = pick(0, static_cast<int>(claiming.size()) - 1);
      const int c = counter++;
      zeroed = is_tiles_last_claim(tile, c);
      const int n = claimed_block(tile, c);
      if (n < 0) {
        claiming.erase(claiming.begin() + i);
      } else {
        ASSERT_GE(n, b);
        ASSERT_LT(n, e);
        ++taken[n];
      }
    }
    EXPECT_EQ(counter, tile.claims) << "blocks " << e - b << ", pieces " << pieces;
    EXPECT_EQ(zeroed, tile.claims > 0);
    for (int n = b; n < e; ++n) ASSERT_EQ(taken[n], 1) << "block " << n << " of [" << b << ", " << e << ")";
  }
}

TEST(VarlenSplitPlan, HeuristicFillsTheSmsOnceForFewTiles) {
  for (const bool decoding : {false, true}) {
    SCOPED_TRACE(decoding ? "decoding" : "prefill");
    // 8 sequences x 8 K/V heads (packed) = 64 tiles of 8k keys (64 blocks) on 132 SMs.
    EXPECT_EQ(plan_varlen_split(64, 64, 132, 0, 2, decoding).units, 128);
    // One sequence, 8 heads, 64k keys: 16 pieces fill 128 SMs.
    EXPECT_EQ(plan_varlen_split(8, 512, 132, 0, 2, decoding).units, 128);
    // More than half as many tiles as SMs, or too short to cut, or num_splits 1: no split.
    EXPECT_EQ(plan_varlen_split(67, 512, 132, 0, 2, decoding).units, 0);
    EXPECT_EQ(plan_varlen_split(8, 1, 132, 0, 2, decoding).units, 0);
    EXPECT_EQ(plan_varlen_split(8, 512, 132, 1, 2, decoding).units, 0);
    // An explicit count is taken as given, up to kMaxSplitUnits pieces in all; past that, as many
    // pieces a tile as fit (1 x 32/8 x 64k at d 64, 8 tiles of 342 blocks: 132 pieces asked, 128 cut),
    // and no split where not 2 a tile fit.
    EXPECT_EQ(plan_varlen_split(500, 3, 132, 2, 2, decoding).units, 1000);
    EXPECT_EQ(plan_varlen_split(8, 342, 132, 132, 2, decoding).units, 8 * 128);
    EXPECT_EQ(plan_varlen_split(3, 400, 132, 1000, 2, decoding).units, 3 * 341);
    EXPECT_EQ(plan_varlen_split(600, 3, 132, 2, 2, decoding).units, 0);
  }
  // Short caches: pieces of at least kMinVarlenPieceBlocks blocks of the longest...
  EXPECT_EQ(plan_varlen_split(8, 8, 132, 0, 2, false).units, 8 * (8 / kMinVarlenPieceBlocks));
  EXPECT_EQ(plan_varlen_split(8, 7, 132, 0, 2, false).units, 0);
  // ... but a decoding step's short pieces go to half the SMs, down to a block a piece: 1 x 32/8 x 1k
  // (8 tiles of 8 blocks) in 8 pieces, 1 x 28/4 x 4k and 16k (4 tiles of 32 and 128 blocks) in 16.
  EXPECT_EQ(plan_varlen_split(8, 8, 132, 0, 2, true).units, 8 * 8);
  EXPECT_EQ(plan_varlen_split(8, 7, 132, 0, 2, true).units, 8 * 7);
  EXPECT_EQ(plan_varlen_split(4, 32, 132, 0, 2, true).units, 4 * 16);
  EXPECT_EQ(plan_varlen_split(4, 128, 132, 0, 2, true).units, 4 * 16);
  // Longer pieces fill every SM (1 x 32/8 x 16k: 8 tiles of 128 blocks, 16 pieces), and at least 2
  // pieces a tile are kept where half the SMs give fewer (8 x 32/8 x 1k: 64 tiles of 8 blocks).
  EXPECT_EQ(plan_varlen_split(8, 128, 132, 0, 2, true).units, 8 * 16);
  EXPECT_EQ(plan_varlen_split(4, 129, 132, 0, 2, true).units, 4 * 33);
  EXPECT_EQ(plan_varlen_split(64, 8, 132, 0, 2, true).units, 64 * 2);
}

}  // namespace
}  // namespace hopattn::sm90
