// Layout math of the FP8 forward kernel (src/sm90/fwd_fp8/fp8_layout.hpp), checked on the CPU: the key
// permutation pi, the packing of S accumulators into the 8-bit A fragment, and the V transpose's
// coverage of the V^T tile.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "sm90/fwd_fp8/fp8_layout.hpp"
#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {
namespace {

TEST(Fp8Layout, KeyOfColumnIsAPermutationWithinEachK32Step) {
  for (int keys : {64, 128}) {
    std::set<int> seen;
    for (int a = 0; a < keys; ++a) {
      const int key = fp8::key_of_column(a);
      EXPECT_EQ(key / 32, a / 32) << "column " << a << " leaves its k32 step";
      seen.insert(key);
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(keys));
    EXPECT_EQ(*seen.rbegin(), keys - 1);
  }
  // The documented shape: A columns 4c..4c+3 carry keys 2c, 2c+1, 8+2c, 9+2c; the second half is shifted by 16.
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(fp8::key_of_column(4 * c + 0), 2 * c);
    EXPECT_EQ(fp8::key_of_column(4 * c + 1), 2 * c + 1);
    EXPECT_EQ(fp8::key_of_column(4 * c + 2), 8 + 2 * c);
    EXPECT_EQ(fp8::key_of_column(4 * c + 3), 9 + 2 * c);
    EXPECT_EQ(fp8::key_of_column(16 + 4 * c + 1), 16 + 2 * c + 1);
  }
}

// Every byte of every thread's A fragment takes the S accumulator of the same row and of key
// pi(column): packing a thread's own accumulators needs no data from other threads.
TEST(Fp8Layout, PackedAccumulatorsSitWhereTheAFragmentWantsPermutedKeys) {
  for (int thread = 0; thread < 128; ++thread) {
    std::set<int> used;
    for (int step = 0; step < 4; ++step) {
      for (int reg = 0; reg < 4; ++reg) {
        for (int byte = 0; byte < 4; ++byte) {
          const int i = fp8::p_accumulator_index(step, reg, byte);
          ASSERT_GE(i, 0);
          ASSERT_LT(i, 64);
          used.insert(i);
          EXPECT_EQ(accumulator_row(thread, i), fp8::a_fragment_row(thread, reg, byte))
              << "thread " << thread << " step " << step << " reg " << reg << " byte " << byte;
          EXPECT_EQ(accumulator_col(thread, i), fp8::key_of_column(32 * step + fp8::a_fragment_col(thread, reg, byte)))
              << "thread " << thread << " step " << step << " reg " << reg << " byte " << byte;
        }
      }
    }
    EXPECT_EQ(used.size(), 64u) << "each of the thread's 64 accumulators is packed exactly once";
  }
}

// The A fragment map itself covers the 64 x 32 tile once over the warpgroup (a typo there would
// make the check above vacuous).
TEST(Fp8Layout, AFragmentMapCoversTheTileOnce) {
  std::set<int> seen;
  for (int thread = 0; thread < 128; ++thread)
    for (int reg = 0; reg < 4; ++reg)
      for (int byte = 0; byte < 4; ++byte)
        seen.insert(fp8::a_fragment_row(thread, reg, byte) * 32 + fp8::a_fragment_col(thread, reg, byte));
  EXPECT_EQ(seen.size(), 64u * 32u);
}

// The tiles of Fp8FwdTraits: V as TMA lands it (keys x at least 128 dims), V^T (dims x 128).
template <int head_dim, int keys>
using VTileOf = SwizzledTile<keys, (head_dim < 128 ? 128 : head_dim), 1>;
template <int head_dim>
using VtTileOf = SwizzledTile<head_dim, 128, 1>;

// Emulates the transposer (all warps, lanes and tasks) on random bytes through the swizzled tile
// offsets, and checks V^T[d][a] = V[pi(a)][d] for every element, each written exactly once.
template <int head_dim, int keys>
void check_transpose(int warps) {
  using VTile = VTileOf<head_dim, keys>;
  using VtTile = VtTileOf<head_dim>;
  std::mt19937 gen(std::random_device{}());
  std::vector<std::uint8_t> v(VTile::kBytes), vt(VtTile::kBytes, 0);
  for (auto& x : v) x = static_cast<std::uint8_t>(gen());
  std::vector<int> writes(VtTile::kBytes, 0);
  for (int warp = 0; warp < warps; ++warp) {
    for (int task = warp; task < fp8::transpose_tasks(head_dim, keys); task += warps) {
      for (int lane = 0; lane < 32; ++lane) {
        const int dims = 4 * fp8::transpose_dim_group(task, keys, lane);
        const int cols = 4 * fp8::transpose_column_group(task, keys, lane);
        ASSERT_LT(dims, head_dim);
        ASSERT_LT(cols, keys);
        for (int i = 0; i < 4; ++i) {      // source word i: key pi(cols + i)
          for (int b = 0; b < 4; ++b) {    // its byte b: dim dims + b -> V^T row dims + b, column cols + i
            const std::uint32_t dst = VtTile::offset(dims + b, cols + i);
            vt[dst] = v[VTile::offset(fp8::key_of_column(cols + i), dims + b)];
            ++writes[dst];
          }
        }
      }
    }
  }
  for (int d = 0; d < head_dim; ++d) {
    for (int a = 0; a < keys; ++a) {
      const std::uint32_t o = VtTile::offset(d, a);
      ASSERT_EQ(writes[o], 1) << "d " << d << " column " << a;
      ASSERT_EQ(vt[o], v[VTile::offset(fp8::key_of_column(a), d)]) << "d " << d << " column " << a;
    }
  }
}

TEST(Fp8Layout, TransposeWritesEveryVtElementOnceFromThePermutedKey) {
  check_transpose<64, 128>(3);
  check_transpose<128, 128>(3);
  check_transpose<256, 64>(3);
  check_transpose<128, 128>(1);
}

// One transposer instruction (fixed task and word i, all 32 lanes) touches 32 distinct banks, for
// the loads from V and for the stores to V^T, in every tile shape the kernel uses.
template <int head_dim, int keys>
void check_transpose_banks() {
  using VTile = VTileOf<head_dim, keys>;
  using VtTile = VtTileOf<head_dim>;
  for (int task = 0; task < fp8::transpose_tasks(head_dim, keys); ++task) {
    for (int i = 0; i < 4; ++i) {
      std::set<std::uint32_t> load_banks, store_banks;
      for (int lane = 0; lane < 32; ++lane) {
        load_banks.insert(fp8::transpose_load_offset<VTile>(task, keys, lane, i) / 4 % 32);
        store_banks.insert(fp8::transpose_store_offset<VtTile>(task, keys, lane, i) / 4 % 32);
      }
      EXPECT_EQ(load_banks.size(), 32u) << "d " << head_dim << " task " << task << " word " << i;
      EXPECT_EQ(store_banks.size(), 32u) << "d " << head_dim << " task " << task << " word " << i;
    }
  }
}

TEST(Fp8Layout, TransposeLoadsAndStoresAreBankConflictFree) {
  check_transpose_banks<64, 128>();
  check_transpose_banks<128, 128>();
  check_transpose_banks<256, 64>();
}

// The transposer addresses every task as task 0's offset XOR a per-task constant: that must hold for
// every lane and word, or the kernel reads and writes the wrong bytes.
template <int head_dim, int keys>
void check_transpose_xor() {
  using VTile = VTileOf<head_dim, keys>;
  using VtTile = VtTileOf<head_dim>;
  for (int task = 0; task < fp8::transpose_tasks(head_dim, keys); ++task) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(fp8::transpose_load_offset<VTile>(task, keys, lane, i),
                  fp8::transpose_load_offset<VTile>(0, keys, lane, i) ^ fp8::transpose_load_xor<VTile>(task, keys))
            << "d " << head_dim << " task " << task << " lane " << lane << " word " << i;
        ASSERT_EQ(fp8::transpose_store_offset<VtTile>(task, keys, lane, i),
                  fp8::transpose_store_offset<VtTile>(0, keys, lane, i) ^ fp8::transpose_store_xor<VtTile>(task, keys))
            << "d " << head_dim << " task " << task << " lane " << lane << " word " << i;
      }
    }
  }
}

TEST(Fp8Layout, TransposeOffsetsAreTaskZeroXorAConstant) {
  check_transpose_xor<64, 128>();
  check_transpose_xor<128, 128>();
  check_transpose_xor<256, 64>();
}

}  // namespace
}  // namespace hopattn::sm90
