// Register and shared-memory maps of the FP8 forward kernel, constexpr and __host__ __device__ so the
// CPU tests can check them (tests/cpu/test_fp8_layout.cpp).
//
// P to the 8-bit A fragment without shuffles. The A fragment of wgmma m64k32 with 8-bit inputs holds,
// for thread t = 32 w + l of the warpgroup (c = l % 4, r = 16 w + l / 4), four 32-bit registers:
//   a0: row r,     columns 4c .. 4c+3        a1: row r + 8, columns 4c .. 4c+3
//   a2: row r,     columns 16+4c .. 16+4c+3  a3: row r + 8, columns 16+4c .. 16+4c+3
// (lowest column in the lowest byte; CUTLASS's ALayout_64x32 says the same). The f32 S accumulator of
// the same 32 keys gives the thread keys {2c, 2c+1, 8+2c, 9+2c, 16+2c, 17+2c, 24+2c, 25+2c} of rows r
// and r + 8: half the columns a0/a2 want belong to neighbouring threads. Rather than exchanging
// bytes across the quad (shuffles on the softmax's critical path), each thread packs its own values
// in key order, so A column 4c + t of a k32 step carries key pi(4c + t) = {2c, 2c+1, 8+2c, 9+2c}[t]
// and pi(16 + x) = 16 + pi(x). O = sum over keys of P[:, key] V[key, :] does not care in which order
// the reduction visits the keys, as long as B = V^T visits them in the same order: the V transpose
// (which the kernel needs anyway, since 8-bit B must be K-major) writes V^T[d][a] = V[pi(a)][d] at no
// extra cost.
#pragma once

#include <cstdint>

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90::fp8 {

constexpr int kKeysPerStep = 32;  // k of one 8-bit wgmma

// The PTX 8-bit A fragment (m64 x k32): row and column of byte `byte` of register `reg` of `thread`.
HOPATTN_HOST_DEVICE constexpr int a_fragment_row(int thread, int reg, int /*byte*/) {
  return 16 * (thread / 32) + (thread % 32) / 4 + 8 * (reg % 2);
}
HOPATTN_HOST_DEVICE constexpr int a_fragment_col(int thread, int reg, int byte) {
  return 4 * (thread % 4) + byte + 16 * (reg / 2);
}

// pi: the key (within a block of keys that is a multiple of 32) that P V reduction column `a` carries.
HOPATTN_HOST_DEVICE constexpr int key_of_column(int a) {
  const int step = a / kKeysPerStep, x = a % kKeysPerStep;
  const int half = x / 16, quad = (x % 16) / 4, t = x % 4;
  return kKeysPerStep * step + 16 * half + 2 * quad + (t % 2) + 8 * (t / 2);
}

// Index into the S accumulator (fragment.hpp's m64nN map) of the value that goes to byte `byte` of
// A register `reg` of k32 step `step`: register pair (reg / 2) picks the 16-key half, reg % 2 the
// row half, and the bytes walk the two 8-column blocks of that half.
HOPATTN_HOST_DEVICE constexpr int p_accumulator_index(int step, int reg, int byte) {
  return 16 * step + 8 * (reg / 2) + 4 * (byte / 2) + 2 * (reg % 2) + (byte % 2);
}

// The V transpose. The V^T tile (head-dim rows x keys, keys contiguous) is cut into units of 4 dims x
// 4 reduction columns; a unit reads one 32-bit word (4 dims) from each of its 4 source key rows,
// transposes the 4 x 4 bytes in registers and writes one word (4 columns) to each of its 4 V^T rows.
// A warp-wide task is 32 units: 8 dim groups (32 dims, one per "dim block") x 4 column groups, with
// the lane bits spread so that both the 32 loads and the 32 stores of one instruction hit 32
// distinct banks under the 128B swizzle (bank = 4 x (chunk ^ row % 8) + word):
//   dim group    D = b0 + 2 b1 + 4 b4 + 8 dim_block        (lane bits b0..b4)
//   column group C = b2 + 2 b3 + 4 chunk,  chunk = ((b1 + 2 b4) ^ (variant % 4)) + 4 (variant / 4)
// Loads: word b0 b1, chunk b4 (+ dim_block) ^ key % 8 = 2 b2 + 4 b3 + i % 2. Stores: word b2 b3,
// chunk (b1, b4 ^ variant) ^ row % 8 = 4 b0 + i. Tasks per tile: (head_dim / 32) x (keys / 16).
HOPATTN_HOST_DEVICE constexpr int transpose_tasks(int head_dim, int keys) { return (head_dim / 32) * (keys / 16); }
HOPATTN_HOST_DEVICE constexpr int transpose_dim_group(int task, int keys, int lane) {
  const int dim_block = task / (keys / 16);
  return (lane & 1) + 2 * ((lane >> 1) & 1) + 4 * ((lane >> 4) & 1) + 8 * dim_block;
}
HOPATTN_HOST_DEVICE constexpr int transpose_column_group(int task, int keys, int lane) {
  const int variant = task % (keys / 16);
  const int chunk = ((((lane >> 1) & 1) + 2 * ((lane >> 4) & 1)) ^ (variant % 4)) + 4 * (variant / 4);
  return ((lane >> 2) & 3) + 4 * chunk;
}

// Byte offsets in the V tile (keys x dims) and the V^T tile (dims x columns) of word i of a lane's unit.
template <class VTile>
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_load_offset(int task, int keys, int lane, int i) {
  return VTile::offset(key_of_column(4 * transpose_column_group(task, keys, lane) + i),
                       4 * transpose_dim_group(task, keys, lane));
}
template <class VtTile>
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_store_offset(int task, int keys, int lane, int i) {
  return VtTile::offset(4 * transpose_dim_group(task, keys, lane) + i, 4 * transpose_column_group(task, keys, lane));
}

// A task moves every lane by the same whole 16-row steps (keys, dims) and XORs the same bits into the
// 16-byte chunk index, and the swizzle is an XOR of row bits 0-2 into the chunk: so each of its offsets is
// task 0's offset XOR one constant per task (tests/cpu/test_fp8_layout.cpp checks it for every lane).
// The transposer keeps task 0's 8 offsets in registers and needs one LOP3 per access.
template <class VTile>
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_load_xor(int task, int keys) {
  return transpose_load_offset<VTile>(task, keys, 0, 0) ^ transpose_load_offset<VTile>(0, keys, 0, 0);
}
template <class VtTile>
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_store_xor(int task, int keys) {
  return transpose_store_offset<VtTile>(task, keys, 0, 0) ^ transpose_store_offset<VtTile>(0, keys, 0, 0);
}

}  // namespace hopattn::sm90::fp8
