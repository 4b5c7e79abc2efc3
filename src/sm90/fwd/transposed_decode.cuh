// A decoding tile computed transposed in the 16-bit consumer (where FwdTraits::kTransposedDecode: d 64, and
// every tile of the d 256 decoding-only variant).
// A tile with at most 8 live query rows (a GQA-packed decoding step, an MHA step's single row) would
// spend m64 wgmmas, 64 rows of exponentials and a 64-row O on those few rows: at d 64 a 192-key block's
// m64 work takes about as long as its 48 KB take to stream from HBM. Here warpgroup 0 computes with the
// keys as the wgmma's M and the query rows as its N = 8 (transposed_tile.cuh: the register layout, the
// column reductions, the scratch in the Q stage and the tile's end):
//   S^T = K Q^T      (A = the K stage, K-major; B = Q's first 8 rows, K-major): kBlockN / 64 m64n8 tiles;
//   O^T += V^T P^T   (A = the V stage read MN-major; B = P^T stored by this warpgroup, K-major): d / 64 tiles;
// an eighth of the tensor work and of the exponentials.
#pragma once

#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/fwd/transposed_columns.cuh"
#include "sm90/fwd/transposed_tile.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <class Traits>
class TransposedDecode
    : public TransposedTile<Traits, SwizzledTile<8, Traits::kBlockN, Traits::kElementBytes>> {
  using Base = TransposedTile<Traits, SwizzledTile<8, Traits::kBlockN, Traits::kElementBytes>>;
  using typename Base::PTile;
  using VTile = typename Traits::VTile;

 public:
  using Base::kDimTiles;
  using Base::kKeyTiles;
  using Base::kRows;

  __device__ TransposedDecode(std::uint32_t q_stage, int thread, int barrier, float scale_log2)
      : Base(q_stage, thread, barrier), scale_log2_(scale_log2) {}

  // S^T = K Q^T for the K stage at k_stage: kHeadDim / 16 k-steps per 64-key tile, one commit group.
  __device__ void issue_scores(std::uint32_t k_stage) {
    this->issue_scores_with(k_stage, [](float(&st)[4], std::uint64_t desc_k, std::uint64_t desc_q, int accumulate) {
      wgmma_ss<kRows, Traits::kIsBf16>(st, desc_k, desc_q, accumulate);
    });
  }

  // O^T += V^T P^T for the V stage at v_stage, with the P^T that update_and_store_probabilities left:
  // one commit group.
  __device__ void issue_output(std::uint32_t v_stage) {
    const std::uint32_t p_tile = this->p_tile();
    wgmma_fence();
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int step = 0; step < Traits::kPSteps; ++step) {
        // 16 keys: 16 rows of 128 bytes down column block d of V, 32 bytes along P^T's rows.
        const std::uint64_t desc_v = mnmajor_descriptor(
            v_stage + d * VTile::kColumnBlockBytes + step * 16 * kSwizzleBytes, VTile::kColumnBlockBytes);
        const std::uint64_t desc_p =
            kmajor_descriptor(p_tile + (step / 4) * PTile::kColumnBlockBytes + (step % 4) * 32);
        wgmma_ss<kRows, Traits::kIsBf16, /*kBMNMajor=*/false, /*kAMNMajor=*/true>(this->ot_[d], desc_v, desc_p, 1);
      }
    }
    wgmma_commit();
  }

  // One block of the online softmax (raw-score max, as OnlineSoftmax): the columns' new max (over the
  // warpgroup), the scores turned into probabilities, O^T rescaled, and P^T stored for issue_output.
  __device__ void update_and_store_probabilities() {
    float(&st)[kKeyTiles][4] = this->st_;
    float block_max[2];
    this->reduce_scores(block_max, MaxOp{});
    float factor[2], bias[2];
    step_column_softmax(this->col_max_, this->col_sum_, block_max, scale_log2_, factor, bias);
    this->exponentiate_and_rescale(scale_log2_, bias, factor);
    // A warp's 16 keys of tile j are two 8 x 8 matrices (keys x columns), stored transposed: lanes 0-7
    // address query rows 0-7 of the first 8 keys, lanes 8-15 those of the next 8.
    const int lane = this->thread_ % 32;
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      const std::uint32_t in[2] = {pack_pair<Traits::kIsBf16>(st[j][0], st[j][1]),
                                   pack_pair<Traits::kIsBf16>(st[j][2], st[j][3])};
      const int key = 64 * j + 16 * (this->thread_ / 32) + 8 * ((lane / 8) % 2);
      stmatrix_x2_trans(this->p_tile() + PTile::offset(lane % 8, key), in);
    }
    this->publish_probabilities();
  }

 private:
  const float scale_log2_;
};

}  // namespace hopattn::sm90
