// Traits of the FP8 (e4m3) forward kernel for one head dim: tile shape, roles, register budgets,
// pipeline depth, shared-memory plan. Mirrors sm90/fwd/traits.cuh where the two agree.
#pragma once

#include <cstdint>

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// kBlockDescales_: the kernel reads per-block descales (q/k/v_block_descale, any of them); without
// them the per-K-block scale loads and the v-scale switch compile away (as run-time branches they
// cost the no-descale path 2-5%, H200 2026-11-29).
template <int kHeadDim_, bool kBlockDescales_ = false>
struct Fp8FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kBlockDescales = kBlockDescales_;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "fp8 head dims are 64, 128 and 256");
  static constexpr int kElementBytes = 1;

  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kRowsPerWarpgroup = 64;
  static constexpr int kBlockM = kConsumerWarpgroups * kRowsPerWarpgroup;
  // Keys per K/V tile: 128, or 64 at head dim 256 where O (128 registers) leaves no room for a
  // 128-wide S and P. A V^T row (keys contiguous: 8-bit B must be K-major) is one 128-byte swizzled
  // row either way; at 64 keys the P V GEMM reads its first half.
  static constexpr int kBlockN = kHeadDim == 256 ? 64 : 128;
  static constexpr int kStages = kHeadDim == 64 ? 4 : (kHeadDim == 128 ? 3 : 2);
  // Ping-pong pays where the softmax is long against the GEMMs (d 64, 128: d128 2k 707 vs 676
  // TFLOP/s without). At d 256 with 64-key blocks each turn is short and the barrier hand-over costs
  // more than the overlap brings: without it 1-2% faster from 4k on, equal at 2k (H200, 2026-11-29).
  static constexpr bool kPingPongPays = kHeadDim != 256;

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWarpgroups);
  static constexpr int kConsumerWarps = kConsumerWarpgroups * 4;
  // Producer warpgroup: warp 0 issues the TMA loads, warps 1..3 transpose V.
  static constexpr int kTransposeWarps = 3;
  // setmaxnreg budgets: the transposers need more than the 16-bit path's 24 (4 loaded + 4 transposed
  // words, swizzled addresses and the tile walk spill at 24); 232 still holds O, S and P of every head dim.
  static constexpr int kProducerRegisters = 32;
  static constexpr int kConsumerRegisters = 232;
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static_assert((kProducerRegisters + kConsumerWarpgroups * kConsumerRegisters) * kWarpgroupThreads <=
                    kLaunchRegisters * kThreads,
                "register budgets exceed what the CTA is launched with");

  // Q, K and V are loaded in 128-byte (128-element) column blocks. Head dim 64 fills half of one: the
  // TMA box stays 128 wide and zero-fills columns 64..127 (outside the tensor), so every tile keeps the
  // 128B swizzle; the Q K^T GEMM reads only the first kHeadDim columns.
  static constexpr int kTileCols = kHeadDim < 128 ? 128 : kHeadDim;
  using QTile = SwizzledTile<kBlockM, kTileCols, kElementBytes>;
  using KTile = SwizzledTile<kBlockN, kTileCols, kElementBytes>;
  using VTile = KTile;
  using VtTile = SwizzledTile<kHeadDim, 128, kElementBytes>;  // V^T: dims x keys, one column block
  static constexpr int kColsPerBlock = QTile::kColsPerBlock;  // TMA box width: 128 elements
  static_assert(kBlockN == 64 || kBlockN == 128, "V^T rows hold at most one 128-byte swizzled row of keys");

  static constexpr int kSRegisters = kBlockN / 2;
  static constexpr int kORegisters = kHeadDim / 2;
  static constexpr int kPSteps = kBlockN / 32;    // k32 steps of O += P V
  static constexpr int kQKSteps = kHeadDim / 32;  // k32 steps of S = Q K^T
  // Lean addressing at head dims 128 and 256, as in the 16-bit kernel (fwd/traits.cuh says why; FP8
  // d 64 lost 6% with it, d 128 gained 2.5-6.5%, d 256 neither gained nor lost).
  static constexpr bool kLeanAddressing = kHeadDim >= 128;
  // Q from registers for S = Q K^T, as in the 16-bit kernel (fwd/traits.cuh): kHeadDim / 8 registers,
  // where they fit beside O, S and P (kBlockN / 8) with 48 to spare: d 64 and 128; d 256 spills.
  static constexpr bool kQInRegisters =
      kHeadDim / 8 + kSRegisters + kBlockN / 8 + kORegisters <= kConsumerRegisters - 48;

  static constexpr int kPingPongBarrierBase = 1;
  static constexpr int kPingPongBarrierThreads = 2 * kWarpgroupThreads;

  struct alignas(kSwizzleAtomBytes) SharedStorage {
    alignas(kSwizzleAtomBytes) std::uint8_t q[QTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t k[kStages][KTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t v[kStages][VTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t vt[kStages][VtTile::kBytes];
    int tile;                         // TMA thread -> consumers, published with q_full: tile index
    int v_end[kStages];               // TMA thread -> transposers, with v_full: no V block follows
    std::uint64_t q_full;             // TMA -> consumers: Q tile landed (or no tile left)
    std::uint64_t q_empty;            // consumers -> TMA thread: last S GEMM of the tile done
    std::uint64_t k_full[kStages];    // TMA -> consumers: K stage landed
    std::uint64_t k_empty[kStages];   // consumers -> TMA thread: S GEMM done reading the K stage
    std::uint64_t v_full[kStages];    // TMA -> transposers: V stage landed (or v_end set)
    std::uint64_t v_empty[kStages];   // transposers -> TMA thread: V stage read
    std::uint64_t vt_full[kStages];   // transposers -> consumers: V^T stage written
    std::uint64_t vt_empty[kStages];  // consumers -> transposers: PV GEMM done reading the V^T stage
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage)) + kSwizzleAtomBytes;
  static_assert(kSharedBytes <= 227 * 1024, "shared-memory plan exceeds the 227 KB an sm_90 CTA can have");
};

}  // namespace hopattn::sm90
