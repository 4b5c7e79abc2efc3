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
// A warp-wide task covers 8 consecutive dim groups (lane % 8) x 4 column groups (lane / 8): the 32
// loads of one instruction then hit 8 distinct 16-byte chunks x 4 words (no bank conflict under the
// 128B swizzle); the 32 stores hit 2 chunks x 4 words, a 4-way conflict (the price of the
// conflict-free loads; the transpose runs on otherwise idle warps, off the consumers' path).
// Tasks per tile: (head_dim / 32 dim blocks) x (keys / 16 column blocks).
HOPATTN_HOST_DEVICE constexpr int transpose_tasks(int head_dim, int keys) { return (head_dim / 32) * (keys / 16); }
HOPATTN_HOST_DEVICE constexpr int transpose_dim_group(int task, int keys, int lane) {
  return 8 * (task / (keys / 16)) + lane % 8;
}
HOPATTN_HOST_DEVICE constexpr int transpose_column_group(int task, int keys, int lane) {
  return 4 * (task % (keys / 16)) + lane / 8;
}

}  // namespace hopattn::sm90::fp8
