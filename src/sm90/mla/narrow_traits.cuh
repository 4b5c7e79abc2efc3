// The MLA forward's narrow tiles (mla/narrow_consumer.cuh): a tile of at most kRows = 16 or 32 packed
// query rows, as a 16- or 32-head decoding step (DeepSeek's 128 heads over 8 or 4 GPUs) packs, computed
// transposed: the keys and v's columns are the wgmma's M, the query rows its N.
//   S^T = [K V] [Q QV]^T   (A = the K/V stage, B = the [Q QV] tile, both K-major): m64 x kRows;
//   O^T += V^T P^T         (A = the stage's V read MN-major, B = P^T stored by the warpgroup): 8 m64 tiles.
// A 64-row tile (mla/traits.cuh) spends its m64 wgmmas, exponentials and O on 16 live rows of 64: at
// the H200's 4.2 TB/s a 64-key block streams in about the time that tile's two GEMMs take at the tensor
// cores' peak, so the 16-head steps ran at 0.45-0.81 of its copy rate (session 51). On an H100
// both tile kinds are bound by DRAM and time level; the narrow one keeps the SMs 15% busy, not 36% (v146).
// The two warpgroups take alternate key blocks, each with its own ring stage, softmax state and O^T
// (kRows / 2 x 8 registers); they meet only at the end, where each leaves its O^T in its stage and both
// merge the two halves into out (or the split's partials).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "sm90/fwd/transposed_columns.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <typename Element_, int kRows_>
struct MlaNarrowTraits {
  using Element = Element_;
  static constexpr bool kIsBf16 = std::is_same_v<Element, __nv_bfloat16>;
  static_assert(kIsBf16 || std::is_same_v<Element, __half>, "16-bit element types only");
  static_assert(kRows_ == 16 || kRows_ == 32, "a narrow tile is 16 or 32 query rows (the wgmma N)");

  static constexpr int kHeadDim = 64;    // q, k
  static constexpr int kHeadDimV = 512;  // v, qv, out
  static constexpr int kBlockM = kRows_;  // packed query rows per tile: the wgmma N
  static constexpr int kBlockN = 64;      // keys per K/V block: the S^T wgmma's M
  static constexpr int kStages = 2;       // one per warpgroup: warpgroup w takes blocks w, w + 2, ...

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = kWarpgroupThreads * kConsumerWarpgroups;

  using QTile = SwizzledTile<kBlockM, kHeadDim + kHeadDimV, 2>;
  using KvTile = SwizzledTile<kBlockN, kHeadDim + kHeadDimV, 2>;
  using PTile = SwizzledTile<kBlockM, kBlockN, 2>;  // P^T as O^T's B operand: query rows x keys, K-major
  static constexpr int kColumnBlockBytes = KvTile::kColumnBlockBytes;
  static constexpr int kVFirstColumnBlock = kHeadDim / 64;
  static constexpr int kSSteps = (kHeadDim + kHeadDimV) / 16;
  static constexpr int kPSteps = kBlockN / 16;
  static constexpr int kDimTiles = kHeadDimV / 64;  // O^T's m64 tiles

  // At the end each warpgroup's O^T goes into its own (then idle) stage as rows of kHeadDimV floats,
  // padded by 4 so that a warp's transposing stores (8 dims x 4 query rows two apart) hit 32 banks.
  static constexpr int kMergeStride = kHeadDimV + 4;
  static_assert(kBlockM * kMergeStride * 4 <= KvTile::kBytes, "a warpgroup's O^T must fit in its stage");

  // Named barrier ids (0 is __syncthreads): the [Q QV] tile written (both warpgroups); one per
  // warpgroup for its column exchanges and P^T; both warpgroups' O^T and statistics left for the merge.
  static constexpr int kQReadyBarrier = 1;
  static constexpr int kWarpgroupBarrierBase = 2;
  static constexpr int kMergeBarrier = 4;

  struct alignas(kSwizzleAtomBytes) SharedStorage {
    alignas(kSwizzleAtomBytes) std::uint8_t q[QTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t kv[kStages][KvTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t p[kConsumerWarpgroups][PTile::kBytes];
    float exchange[kConsumerWarpgroups][TransposedColumns<kBlockM>::kSlotFloats];  // column reductions' slots
    float col_max[kConsumerWarpgroups][kBlockM];     // at the end: each warpgroup's raw-score max
    float col_sum[kConsumerWarpgroups][kBlockM];     // and its sum of 2^(s scale - max scale)
    std::uint64_t kv_full[kStages];                  // TMA -> the stage's warpgroup: its K and V landed
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage));
  static_assert(kSharedBytes <= 227 * 1024, "shared-memory plan exceeds the 227 KB an sm_90 CTA can have");
};

}  // namespace hopattn::sm90
