// Layout math of the FP8 forward kernel (src/sm90/fwd_fp8/fp8_layout.hpp), checked on the CPU: the key
// permutation pi, the packing of S accumulators into the 8-bit A fragment, and the V transpose, run on a
// model of ldmatrix, prmt and stmatrix: its result, its bank conflicts and its per-task addressing.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <numeric>
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

// With V^T read in key order (kVtFromGlobal), K's rows are permuted instead: every byte of every
// thread's A fragment then takes the S accumulator whose column holds the key of that A column, and
// the permutation stays inside its 16-key group.
TEST(Fp8Layout, PermutedKeyRowsPutEachThreadsAccumulatorsInKeyOrder) {
  std::set<int> keys;
  for (int col = 0; col < 64; ++col) {
    const int key = fp8::key_of_s_column(col);
    EXPECT_EQ(key / 16, col / 16) << "column " << col << " leaves its 16-key group";
    keys.insert(key);
  }
  EXPECT_EQ(keys.size(), 64u);
  for (int thread = 0; thread < 128; ++thread) {
    for (int step = 0; step < 4; ++step) {
      for (int reg = 0; reg < 4; ++reg) {
        for (int byte = 0; byte < 4; ++byte) {
          const int i = fp8::p_accumulator_index(step, reg, byte);
          EXPECT_EQ(fp8::key_of_s_column(accumulator_col(thread, i)), 32 * step + fp8::a_fragment_col(thread, reg, byte))
              << "thread " << thread << " step " << step << " reg " << reg << " byte " << byte;
          EXPECT_EQ(fp8::key_of_accumulator(thread, i), fp8::key_of_s_column(accumulator_col(thread, i)));
        }
      }
    }
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

// A CPU model of the transposer's three instructions (PTX ISA, "Warp-level matrix load/store
// instructions" and prmt) over a shared-memory array whose cells hold "bytes". Every V cell holds its
// own offset, so a V^T cell names exactly which V byte landed there.
using Cells = std::vector<std::uint32_t>;
using Word = std::array<std::uint32_t, 4>;  // the 4 bytes of a 32-bit register, lowest first
using LaneAddresses = std::array<std::uint32_t, 32>;
using LaneWords = std::array<std::array<Word, 4>, 32>;  // [lane][register]

// ldmatrix .x4 .trans .b16: lanes 8i .. 8i+7 address the 16-byte rows of 8 x 8 matrix i; lane t gets in
// register i the 16-bit elements (row 2 (t % 4), column t / 4) low and (row 2 (t % 4) + 1, column t / 4) high.
LaneWords ldmatrix_x4_trans(const Cells& smem, const LaneAddresses& address) {
  LaneWords out{};
  for (int t = 0; t < 32; ++t) {
    for (int i = 0; i < 4; ++i) {
      const std::uint32_t low = address[8 * i + 2 * (t % 4)] + 2 * (t / 4);
      const std::uint32_t high = address[8 * i + 2 * (t % 4) + 1] + 2 * (t / 4);
      out[t][i] = {smem.at(low), smem.at(low + 1), smem.at(high), smem.at(high + 1)};
    }
  }
  return out;
}

// stmatrix .x4 .b16: lanes 8i .. 8i+7 address the rows of matrix i; lane t holds in register i the 16-bit
// elements (row t / 4, columns 2 (t % 4), 2 (t % 4) + 1), i.e. bytes 4 (t % 4) .. 4 (t % 4) + 3 of the row.
void stmatrix_x4(Cells& smem, std::vector<int>& writes, const LaneAddresses& address, const LaneWords& in) {
  for (int t = 0; t < 32; ++t) {
    for (int i = 0; i < 4; ++i) {
      for (int b = 0; b < 4; ++b) {
        const std::uint32_t at = address[8 * i + t / 4] + 4 * (t % 4) + b;
        smem.at(at) = in[t][i][b];
        ++writes.at(at);
      }
    }
  }
}

// prmt.b32 (__byte_perm): result byte k = byte (nibble k of the selector) of x (0..3) then y (4..7); the
// selectors here never set a nibble's sign-replicate bit.
Word byte_perm(const Word& x, const Word& y, std::uint32_t selector) {
  Word out{};
  for (int k = 0; k < 4; ++k) {
    const std::uint32_t pick = (selector >> (4 * k)) & 0xF;
    EXPECT_LT(pick, 8u);
    out[k] = pick < 4 ? x[pick] : y[pick - 4];
  }
  return out;
}

template <class VTile>
LaneAddresses load_addresses(int task, int keys) {
  LaneAddresses a{};
  for (int lane = 0; lane < 32; ++lane) a[lane] = fp8::transpose_load_offset<VTile>(task, keys, lane);
  return a;
}
template <class VtTile>
LaneAddresses store_addresses(int task, int keys) {
  LaneAddresses a{};
  for (int lane = 0; lane < 32; ++lane) a[lane] = fp8::transpose_store_offset<VtTile>(task, keys, lane);
  return a;
}

// The tiles of Fp8FwdTraits: V as TMA lands it (keys x at least 128 dims), V^T (dims x keys rounded up
// to whole 128-key column blocks).
template <int head_dim, int keys>
using VTileOf = SwizzledTile<keys, (head_dim < 128 ? 128 : head_dim), 1>;
template <int head_dim, int keys>
using VtTileOf = SwizzledTile<head_dim, (keys + 127) / 128 * 128, 1>;

// Runs every task of every transposer warp in the kernel's order (warp w: its run of the
// key-group-major order, fp8::transpose_first_position) as the kernel does (ldmatrix, PRMT with the
// lane's selectors, stmatrix) and checks V^T[d][a] = V[pi(a)][d] for every d < head_dim and a < keys,
// each written once, and nothing else written.
template <int head_dim, int keys>
void check_transpose(int warps) {
  using VTile = VTileOf<head_dim, keys>;
  using VtTile = VtTileOf<head_dim, keys>;
  Cells v(VTile::kBytes), vt(VtTile::kBytes, ~0u);
  std::iota(v.begin(), v.end(), 0u);
  std::vector<int> writes(VtTile::kBytes, 0);
  std::vector<int> tasks;
  for (int warp = 0; warp < warps; ++warp) {
    const int first = fp8::transpose_first_position(warp, warps, head_dim, keys);
    const int end = fp8::transpose_first_position(warp + 1, warps, head_dim, keys);
    for (int position = first; position < end; ++position) {
      tasks.push_back(fp8::transpose_task_at(position, head_dim, keys));
    }
  }
  for (int task : tasks) {
    const LaneWords in = ldmatrix_x4_trans(v, load_addresses<VTile>(task, keys));
    LaneWords out{};
    for (int lane = 0; lane < 32; ++lane) {
      for (int reg = 0; reg < 4; ++reg) {
        const int pair = 2 * (reg / 2);  // registers 0, 1 -> sources 0, 1; registers 2, 3 -> sources 2, 3
        out[lane][reg] = byte_perm(in[lane][pair], in[lane][pair + 1], fp8::transpose_selector(lane, reg));
      }
    }
    stmatrix_x4(vt, writes, store_addresses<VtTile>(task, keys), out);
  }
  for (int d = 0; d < head_dim; ++d) {
    for (int a = 0; a < keys; ++a) {
      const std::uint32_t o = VtTile::offset(d, a);
      ASSERT_EQ(writes[o], 1) << "d " << d << " column " << a;
      ASSERT_EQ(vt[o], VTile::offset(fp8::key_of_column(a), d)) << "d " << d << " column " << a;
    }
  }
  EXPECT_EQ(std::accumulate(writes.begin(), writes.end(), 0), head_dim * keys) << "writes outside d x keys";
}

TEST(Fp8Layout, TransposeWritesEveryVtElementOnceFromThePermutedKey) {
  check_transpose<64, 128>(3);
  check_transpose<128, 128>(3);
  check_transpose<256, 64>(3);
  check_transpose<128, 192>(3);  // V^T of two column blocks, the second partly used
  check_transpose<256, 128>(3);
  check_transpose<128, 128>(1);
  check_transpose<128, 128>(4);  // tests/gpu/test_arch_fp8_wgmma.cu's split
}

// The 8 rows of one matrix (one shared-memory wavefront of ldmatrix/stmatrix) are 16-byte aligned and
// lie in 8 distinct 16-byte bank groups: conflict free, for every task, matrix and tile shape.
void expect_conflict_free(const LaneAddresses& address, const char* what, int head_dim, int task) {
  for (int matrix = 0; matrix < 4; ++matrix) {
    std::set<std::uint32_t> groups;
    for (int row = 0; row < 8; ++row) {
      const std::uint32_t a = address[8 * matrix + row];
      EXPECT_EQ(a % 16, 0u) << what << " d " << head_dim << " task " << task << " matrix " << matrix;
      groups.insert(a / 16 % 8);
    }
    EXPECT_EQ(groups.size(), 8u) << what << " d " << head_dim << " task " << task << " matrix " << matrix;
  }
}

template <int head_dim, int keys>
void check_transpose_banks() {
  for (int task = 0; task < fp8::transpose_tasks(head_dim, keys); ++task) {
    expect_conflict_free(load_addresses<VTileOf<head_dim, keys>>(task, keys), "ldmatrix", head_dim, task);
    expect_conflict_free(store_addresses<VtTileOf<head_dim, keys>>(task, keys), "stmatrix", head_dim, task);
  }
}

TEST(Fp8Layout, TransposeLoadsAndStoresAreBankConflictFree) {
  check_transpose_banks<64, 128>();
  check_transpose_banks<128, 128>();
  check_transpose_banks<256, 64>();
  check_transpose_banks<128, 192>();
  check_transpose_banks<256, 128>();
}

// The transposer addresses every task as task 0's offset XOR a per-task constant, and computes that
// from task 0's address with the tile base added (transpose_task_address): both must hold for every
// lane and any 1024-byte aligned base, or the kernel reads and writes the wrong bytes.
template <int head_dim, int keys>
void check_transpose_xor() {
  using VTile = VTileOf<head_dim, keys>;
  using VtTile = VtTileOf<head_dim, keys>;
  for (int task = 0; task < fp8::transpose_tasks(head_dim, keys); ++task) {
    const std::uint32_t load_xor = fp8::transpose_load_xor<VTile>(task, keys);
    const std::uint32_t store_xor = fp8::transpose_store_xor<VtTile>(task, keys);
    for (int lane = 0; lane < 32; ++lane) {
      const std::uint32_t load = fp8::transpose_load_offset<VTile>(task, keys, lane);
      const std::uint32_t load0 = fp8::transpose_load_offset<VTile>(0, keys, lane);
      const std::uint32_t store = fp8::transpose_store_offset<VtTile>(task, keys, lane);
      const std::uint32_t store0 = fp8::transpose_store_offset<VtTile>(0, keys, lane);
      ASSERT_EQ(load, load0 ^ load_xor) << "d " << head_dim << " task " << task << " lane " << lane;
      ASSERT_EQ(store, store0 ^ store_xor) << "d " << head_dim << " task " << task << " lane " << lane;
      for (std::uint32_t base : {0u, 1024u, 3u * 1024u, 0x1c000u, 227u * 1024u}) {
        ASSERT_EQ(fp8::transpose_task_address(base + load0, load_xor), base + load)
            << "d " << head_dim << " task " << task << " lane " << lane << " base " << base;
        ASSERT_EQ(fp8::transpose_task_address(base + store0, store_xor), base + store)
            << "d " << head_dim << " task " << task << " lane " << lane << " base " << base;
      }
    }
  }
}

TEST(Fp8Layout, TransposeOffsetsAreTaskZeroXorAConstant) {
  check_transpose_xor<64, 128>();
  check_transpose_xor<128, 128>();
  check_transpose_xor<256, 64>();
  check_transpose_xor<128, 192>();
  check_transpose_xor<256, 128>();
}

}  // namespace
}  // namespace hopattn::sm90
