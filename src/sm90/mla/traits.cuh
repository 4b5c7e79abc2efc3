// The MLA forward kernel's shape (mla/kernel.cuh): q and k of head dim 64, v, qv and out of 512.
// A CTA takes 64 packed query rows (a tile) against one K/V head: two consumer warpgroups, the first
// thread of which also issues K's and V's TMA boxes into a two-stage ring. O is 64 x 512 floats, 256
// registers a thread over one warpgroup, so each warpgroup keeps half of O's columns (128 registers).
// Warpgroup 0, the scorer, computes S = [Q QV] [K V]^T of each block, its softmax, and hands P and the
// rows' rescale factors to warpgroup 1 through shared memory; warpgroup 1 accumulates its half of O
// from them (perf-notes v139: computing S in both warpgroups cost a third more tensor work; a scorer
// without O beside two accumulators, three warpgroups, ran 7% slower).
// Why no producer warp: ptxas plans every thread for the registers of the busiest SM sub-partition
// (4 of them, 16384 registers each, warps dealt round-robin), whatever setmaxnreg gives back at run
// time: 168 with a ninth warp or a producer warpgroup, where O (128), S (32) and P (16) spilled; 255 at
// eight warps.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <typename Element_>
struct MlaTraits {
  using Element = Element_;
  static constexpr bool kIsBf16 = std::is_same_v<Element, __nv_bfloat16>;
  static_assert(kIsBf16 || std::is_same_v<Element, __half>, "16-bit element types only");

  static constexpr int kHeadDim = 64;    // q, k
  static constexpr int kHeadDimV = 512;  // v, qv, out
  static constexpr int kBlockM = 64;     // packed query rows per tile
  static constexpr int kBlockN = 64;     // keys per K/V block
  static constexpr int kStages = 2;  // MlaConsumer::run loads block i + 1 into block i - 1's stage

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
  static constexpr int kConsumerWarps = kConsumerThreads / 32;
  static constexpr int kThreads = kConsumerThreads;

  // [Q QV] and [K V] each as one tile of 9 column blocks (64 columns, 128 bytes wide): K's and Q's
  // block first, so that S = [Q QV] [K V]^T is one run of 36 k16 steps over both tiles, and V's eight
  // blocks are also the B operand (MN-major) of O += P V.
  using QTile = SwizzledTile<kBlockM, kHeadDim + kHeadDimV, 2>;
  using KvTile = SwizzledTile<kBlockN, kHeadDim + kHeadDimV, 2>;
  static constexpr int kColumnBlockBytes = KvTile::kColumnBlockBytes;
  static_assert(QTile::kColumnBlockBytes == kColumnBlockBytes, "Q and K/V column blocks of one size");
  static constexpr int kVFirstColumnBlock = kHeadDim / 64;
  static constexpr int kSSteps = (kHeadDim + kHeadDimV) / 16;

  static constexpr int kOColumns = kHeadDimV / kConsumerWarpgroups;  // per consumer warpgroup
  static constexpr int kORegisters = kOColumns / 2;
  static constexpr int kSRegisters = kBlockN / 2;
  static constexpr int kPSteps = kBlockN / 16;

  using PTile = SwizzledTile<kBlockM, kBlockN, 2>;  // P as the A operand of warpgroup 1's P V

  // Named barrier ids (0 is __syncthreads): the consumers' Q tile written; one per consumer
  // warpgroup for its V rows zeroed past the keys; P handed over and given back (both warpgroups
  // wait on both: MlaConsumer::hand_over_p says why).
  static constexpr int kQReadyBarrier = 1;
  static constexpr int kVTailBarrierBase = 2;
  static constexpr int kPFullBarrier = 4;
  static constexpr int kPEmptyBarrier = 5;

  struct alignas(kSwizzleAtomBytes) SharedStorage {
    alignas(kSwizzleAtomBytes) std::uint8_t q[QTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t kv[kStages][KvTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t p[PTile::kBytes];
    float row_scale[kBlockM];    // per row, with P: the factor O takes before this block's P V
    float row_inv_sum[kBlockM];  // per row, after the last block: 1 / row sum (0 for a row without keys)
    std::uint64_t kv_full[kStages];   // TMA -> consumers: the stage's K and V landed
    std::uint64_t kv_empty[kStages];  // consumers (one arrive a warp) -> the loading thread: stage read
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage));
  static_assert(kSharedBytes <= 227 * 1024, "shared-memory plan exceeds the 227 KB an sm_90 CTA can have");
};

}  // namespace hopattn::sm90
