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

// The same packing where V^T comes from global memory in key order (v given keys-contiguous,
// Fp8FwdTraits::kVtFromGlobal): there is no transpose to permute V's keys, so K's rows are permuted
// instead. The producer loads each 16-key group's rows so that S column 8a + 2c + e (quad lane c,
// accumulator half a) holds key 4c + 2a + e (pi's inverse): a thread's own P values then pack into A
// columns 4c .. 4c+3 in key order, as V^T has them. Per group that is two TMA boxes of 8 rows (keys
// 4c + 2a + e for c = 0..3, e = 0..1, one box per a).
HOPATTN_HOST_DEVICE constexpr int key_of_s_column(int col) {
  const int x = col % 16;
  return col - x + 4 * ((x % 8) / 2) + 2 * (x / 8) + x % 2;
}
// key_of_s_column of accumulator `index` of `thread` (fragment.hpp: column 8 (index / 4) + 2 (thread % 4)
// + index % 2), in a form with one run-time term, as cheap for the mask as the column itself.
HOPATTN_HOST_DEVICE constexpr int key_of_accumulator(int thread, int index) {
  return 16 * (index / 8) + 4 * (thread % 4) + 2 * ((index / 4) % 2) + index % 2;
}
// Except in the K block that reaches the end of the keys: a group of 4 there may run past seqlen_k,
// which the permuted map cannot bound (host/tensor_map.hpp), so that block loads K in key order
// through the ordinary map (zero-filled past the end) and its consumers pack P with shuffles instead
// (p_fragments.cuh, pack_p_fragments_in_key_order). It is the first block of any visit that has it.
HOPATTN_HOST_DEVICE constexpr bool k_block_in_key_order(int n_block, int block_n, int seqlen_k) {
  return (n_block + 1) * block_n >= seqlen_k;
}

// Index into the S accumulator (fragment.hpp's m64nN map) of the value that goes to byte `byte` of
// A register `reg` of k32 step `step`: register pair (reg / 2) picks the 16-key half, reg % 2 the
// row half, and the bytes walk the two 8-column blocks of that half.
HOPATTN_HOST_DEVICE constexpr int p_accumulator_index(int step, int reg, int byte) {
  return 16 * step + 8 * (reg / 2) + 4 * (byte / 2) + 2 * (reg % 2) + (byte % 2);
}

// The V transpose, per warp task (512 bytes) one ldmatrix .trans, four PRMT and one stmatrix, both on
// 8 x 8 matrices of 16-bit elements whose 16-byte rows the lanes address (sm90/arch/shared_access.cuh).
// A task takes key group h, the 16 keys that pi puts on V^T columns 16h .. 16h+15, and dim pair p, the
// 16-byte dim chunks e = 2p and e + 1. With lane = 4j + q:
//   ldmatrix .trans, matrix i = keys 16h + 8 (i % 2) + 0..7 at dim chunk e + i / 2: register i gets
//     16-bit element j (dims 2j, 2j+1) of key 2q, then of key 2q+1 (keys +8 for odd i).
//   PRMT 0x6420 of registers (0, 1) = dim 2j of keys 2q, 2q+1, 2q+8, 2q+9, which pi wants in V^T
//     columns 16h + 4q .. 16h + 4q+3; 0x7531 takes dim 2j+1. Registers (2, 3) give chunk e + 1.
//   stmatrix writes register i of lane 4j + q to row j, bytes 4q .. 4q+3 of matrix i.
// Matrix 2c + s holds V^T rows 16 (e + c) + 2j + (s ^ j / 4): lanes j >= 4 swap the even and odd dim
// (a per-lane PRMT selector), so the 8 rows of a matrix cover row % 8 = 0..7 and, under the 128B
// swizzle, 8 distinct 16-byte chunks; all-even rows would be 2-way bank conflicted. The ldmatrix rows,
// 8 consecutive keys, are conflict free as they are. Tasks per tile: (head_dim / 32) x (keys / 16).
HOPATTN_HOST_DEVICE constexpr int transpose_tasks(int head_dim, int keys) { return (head_dim / 32) * (keys / 16); }
// Task (key group h, dim pair p): task = h + (keys / 16) p.
HOPATTN_HOST_DEVICE constexpr int transpose_task(int key_group, int dim_pair, int keys) {
  return key_group + (keys / 16) * dim_pair;
}
// How `warps` transposer warps share a stage's tasks: warp w takes positions [first, first of w + 1)
// of the key-group-major order (position i: key group i / pairs, dim pair i % pairs). Contiguous
// runs of that order touch few key groups, so each warp meets few distinct XOR constants (one per key
// group on the V^T side, up to four dim-pair ones on the V side): fewer address registers for the
// compiler to hold, which the producer warpgroup's 24 registers need at d 256.
HOPATTN_HOST_DEVICE constexpr int transpose_first_position(int warp, int warps, int head_dim, int keys) {
  return warp * transpose_tasks(head_dim, keys) / warps;
}
HOPATTN_HOST_DEVICE constexpr int transpose_task_at(int position, int head_dim, int keys) {
  return transpose_task(position / (head_dim / 32), position % (head_dim / 32), keys);
}
HOPATTN_HOST_DEVICE constexpr int transpose_key_group(int task, int keys) { return task % (keys / 16); }
HOPATTN_HOST_DEVICE constexpr int transpose_dim_chunk(int task, int keys, int matrix) {
  return 2 * (task / (keys / 16)) + matrix / 2;
}
// The V^T row, within its 16-row dim chunk, of row `row` of stmatrix matrix `matrix`.
HOPATTN_HOST_DEVICE constexpr int transpose_vt_row(int matrix, int row) { return 2 * row + ((matrix % 2) ^ (row / 4)); }

// The row addresses `lane` gives ldmatrix (V tile, keys x dims) and stmatrix (V^T tile, dims x columns).
template <class VTile>
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_load_offset(int task, int keys, int lane) {
  const int matrix = lane / 8, row = lane % 8;
  return VTile::offset(16 * transpose_key_group(task, keys) + 8 * (matrix % 2) + row,
                       16 * transpose_dim_chunk(task, keys, matrix));
}
template <class VtTile>
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_store_offset(int task, int keys, int lane) {
  const int matrix = lane / 8, row = lane % 8;
  return VtTile::offset(16 * transpose_dim_chunk(task, keys, matrix) + transpose_vt_row(matrix, row),
                        16 * transpose_key_group(task, keys));
}
// The PRMT selector of stmatrix register `reg` of `lane`: bytes 0, 2 of both sources (even dim) or 1, 3.
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_selector(int lane, int reg) {
  return ((reg % 2) ^ (lane / 16)) ? 0x7531 : 0x6420;
}

// A task moves every lane by whole 16-row steps (keys, dims) and XORs the same bits into the 16-byte
// chunk index, and the swizzle is an XOR of row bits 0-2 into the chunk: so each of its offsets is
// task 0's offset XOR one constant per task (tests/cpu/test_fp8_layout.cpp checks it for every lane).
template <class VTile>
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_load_xor(int task, int keys) {
  return transpose_load_offset<VTile>(task, keys, 0) ^ transpose_load_offset<VTile>(0, keys, 0);
}
template <class VtTile>
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_store_xor(int task, int keys) {
  return transpose_store_offset<VtTile>(task, keys, 0) ^ transpose_store_offset<VtTile>(0, keys, 0);
}
// The address of a task from a lane's task-0 address, tile base included. Task 0's offsets lie below a
// task's smallest row step (16 keys: 2048 bytes of V; 32 dims: 4096 bytes of V^T), so the constant's
// bits from 1024 up are clear in them and XOR there is addition; a tile base is a multiple of 1024, so
// the XOR below 1024 commutes with adding it. The base is added once per stage, and a task costs one
// LOP3 per address (none when only rows move) while the added part becomes the LDSM/STSM immediate.
HOPATTN_HOST_DEVICE constexpr std::uint32_t transpose_task_address(std::uint32_t task0_address,
                                                                   std::uint32_t task_xor) {
  constexpr std::uint32_t kBelowAtom = kSwizzleAtomBytes - 1;
  return (task0_address ^ (task_xor & kBelowAtom)) + (task_xor & ~kBelowAtom);
}

}  // namespace hopattn::sm90::fp8
