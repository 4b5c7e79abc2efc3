// Shared-memory layout of attention tiles and the wgmma matrix descriptors that read them.
//
// Every tile is stored as "column blocks" of 64 16-bit elements (128 bytes) by `rows` rows; within a
// column block, row r occupies bytes [128 r, 128 r + 128) and its eight 16-byte chunks are permuted
// by the 128B swizzle (chunk ^= r % 8), which is exactly what TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B and what wgmma reads with swizzle mode 1. The swizzle spreads the 8 rows
// that one 16-byte column touches over all 32 banks. Column blocks are 1024-byte aligned so the
// address-based swizzle pattern of TMA and wgmma agree.
//
// constexpr and __host__ __device__ so the CPU tests can check the math (tests/cpu/test_sm90_layout).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HOPATTN_HOST_DEVICE __host__ __device__
#else
#define HOPATTN_HOST_DEVICE
#endif

namespace hopattn::sm90 {

constexpr int kSwizzleBytes = 128;   // one swizzled row of a column block
constexpr int kSwizzleRows = 8;      // rows after which the swizzle pattern repeats
constexpr int kSwizzleAtomBytes = kSwizzleBytes * kSwizzleRows;  // 1024

// Byte offset of logical (row, byte-in-row) of a column block after the 128B swizzle.
HOPATTN_HOST_DEVICE constexpr std::uint32_t swizzle_128b(std::uint32_t row, std::uint32_t byte_in_row) {
  std::uint32_t linear = row * kSwizzleBytes + byte_in_row;
  return linear ^ ((row % kSwizzleRows) << 4);
}

// Tile of `rows` x `cols` 16-bit or 8-bit elements, split into column blocks of 128 bytes.
template <int kRows, int kCols, int kElementBytes>
struct SwizzledTile {
  static constexpr int kColsPerBlock = kSwizzleBytes / kElementBytes;
  static_assert(kCols % kColsPerBlock == 0, "tile width must be a whole number of 128-byte column blocks");
  static_assert(kRows % kSwizzleRows == 0, "tile height must be a whole number of 8-row swizzle atoms");
  static constexpr int kColumnBlocks = kCols / kColsPerBlock;
  static constexpr int kColumnBlockBytes = kRows * kSwizzleBytes;
  static constexpr int kBytes = kColumnBlocks * kColumnBlockBytes;
  static_assert(kColumnBlockBytes % kSwizzleAtomBytes == 0, "column blocks must stay 1024-byte aligned");

  // Byte offset of element (row, col).
  HOPATTN_HOST_DEVICE static constexpr std::uint32_t offset(int row, int col) {
    return static_cast<std::uint32_t>((col / kColsPerBlock) * kColumnBlockBytes) +
           swizzle_128b(static_cast<std::uint32_t>(row),
                        static_cast<std::uint32_t>((col % kColsPerBlock) * kElementBytes));
  }
};

// An 8-bit tile in column blocks of 64 bytes under the 64B swizzle (chunk ^= (r / 2) % 4 over 512-byte
// atoms: what TMA writes with CU_TENSOR_MAP_SWIZZLE_64B and wgmma reads with swizzle mode 2), for a
// K-major operand whose width is a multiple of 64 but not of 128 (the FP8 kernel's 192-key V^T).
template <int kRows, int kCols>
struct Swizzled64Tile {
  static constexpr int kSwizzleBytes64 = 64;
  static constexpr int kColsPerBlock = kSwizzleBytes64;
  static_assert(kCols % kColsPerBlock == 0, "tile width must be a whole number of 64-byte column blocks");
  static_assert(kRows % kSwizzleRows == 0, "tile height must be a whole number of 8-row swizzle atoms");
  static constexpr int kColumnBlocks = kCols / kColsPerBlock;
  static constexpr int kColumnBlockBytes = kRows * kSwizzleBytes64;
  static constexpr int kBytes = kColumnBlocks * kColumnBlockBytes;
};

// wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"):
//   bits  0-13 start address >> 4, bits 16-29 leading-dimension byte offset >> 4,
//   bits 32-45 stride-dimension byte offset >> 4, bits 62-63 swizzle mode (1 = 128B).
HOPATTN_HOST_DEVICE constexpr std::uint64_t make_smem_descriptor(std::uint32_t smem_address,
                                                                 std::uint32_t leading_byte_offset,
                                                                 std::uint32_t stride_byte_offset,
                                                                 std::uint32_t swizzle_mode = 1) {
  return (static_cast<std::uint64_t>((smem_address & 0x3FFFF) >> 4)) |
         (static_cast<std::uint64_t>((leading_byte_offset & 0x3FFFF) >> 4) << 16) |
         (static_cast<std::uint64_t>((stride_byte_offset & 0x3FFFF) >> 4) << 32) |
         (static_cast<std::uint64_t>(swizzle_mode) << 62);
}

// K-major operand (Q and K for S = Q K^T): the 16 reduction elements of one wgmma lie inside one
// 128-byte row, so only the 8-row stride (1024 bytes) matters; the leading offset is unused for
// swizzled K-major layouts (set to 1 by convention).
HOPATTN_HOST_DEVICE constexpr std::uint64_t kmajor_descriptor(std::uint32_t smem_address) {
  return make_smem_descriptor(smem_address, 16, kSwizzleAtomBytes);
}

// The same for a Swizzled64Tile: 64-byte rows, so the 8-row stride is 512 bytes; swizzle mode 2.
HOPATTN_HOST_DEVICE constexpr std::uint64_t kmajor_descriptor_64b(std::uint32_t smem_address) {
  return make_smem_descriptor(smem_address, 16, 8 * 64, 2);
}

// MN-major operand (V for O = P V, read as B with its N = head-dim axis contiguous): 64 N-elements
// per 128-byte row; the leading offset jumps to the next 64-wide column block, the stride offset to
// the next 8 rows of the reduction (key) axis.
HOPATTN_HOST_DEVICE constexpr std::uint64_t mnmajor_descriptor(std::uint32_t smem_address,
                                                               std::uint32_t column_block_bytes) {
  return make_smem_descriptor(smem_address, column_block_bytes, kSwizzleAtomBytes);
}

// The descriptor of the operand `bytes` further on (a multiple of 16): the start-address field holds
// address >> 4 in the low 14 bits and shared-window addresses stay below 2^18, so the field never
// carries and only the low word changes: one integer add per wgmma instead of rebuilding the
// descriptor from the address.
HOPATTN_HOST_DEVICE constexpr std::uint64_t advance_descriptor(std::uint64_t descriptor, std::uint32_t bytes) {
  const std::uint32_t low = static_cast<std::uint32_t>(descriptor) + (bytes >> 4);
  return (descriptor & 0xFFFFFFFF00000000ull) | low;
}

// The descriptor `offset` bytes into a tile at shared address `tile` whose own descriptor is
// `tile_descriptor`: advanced by one add (kAdvance, the kernels' Traits::kLeanAddressing) or rebuilt.
template <bool kAdvance>
HOPATTN_HOST_DEVICE constexpr std::uint64_t kmajor_descriptor_at(std::uint64_t tile_descriptor, std::uint32_t tile,
                                                                 std::uint32_t offset) {
  return kAdvance ? advance_descriptor(tile_descriptor, offset) : kmajor_descriptor(tile + offset);
}
template <bool kAdvance>
HOPATTN_HOST_DEVICE constexpr std::uint64_t mnmajor_descriptor_at(std::uint64_t tile_descriptor, std::uint32_t tile,
                                                                  std::uint32_t offset,
                                                                  std::uint32_t column_block_bytes) {
  return kAdvance ? advance_descriptor(tile_descriptor, offset) : mnmajor_descriptor(tile + offset, column_block_bytes);
}

}  // namespace hopattn::sm90
