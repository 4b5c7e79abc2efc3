// A decoding tile computed transposed in the FP8 consumer (where Fp8FwdTraits::kTransposedDecode): the
// FP8 form of fwd/transposed_decode.cuh. FP8 halves a block's bytes and its m64 MAC time, so the
// decoding step's consumer work per streamed byte is what the 16-bit d 64 step's was, and a tile of
// at most 8 live rows spends m64 wgmmas, 64 rows of exponentials and 64 rows of P conversion on them.
// Warpgroup 0 computes with the keys and the head dim as the wgmma's M and the query rows as N = 8
// (transposed_tile.cuh: the register layout, the column reductions, the scratch in the Q stage and the
// tile's end). 8-bit wgmmas take both operands K-major, which both GEMMs have here:
//   S^T = K Q^T      (A = the K stage, B = Q's first 8 rows: both along the head dim): m64n8k32;
//   O^T += V^T P^T   (A = the transposers' V^T stage, keys along its rows; B = P^T in e4m3, stored by
//                     this warpgroup as query rows x keys, in V^T's key order): m64n8k32.
// The softmax is Fp8OnlineSoftmax's (fwd_fp8/softmax.cuh): the running max in log2 units under the
// block's score scale, P = 2^(t - max + 8) in [0, 256] rounded to e4m3, the v block scale's change
// folded into O^T's rescale; so the max and sums move into the consumer's softmax as they are.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert_fp8.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/arch/wgmma_fp8.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/fwd/transposed_tile.cuh"
#include "sm90/fwd_fp8/softmax.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// P^T in e4m3: 8 query rows x the block's keys, in whole 128-key column blocks (a 192-key block reads
// the first half of its second).
template <class Traits>
using Fp8TransposedPTile = SwizzledTile<8, (Traits::kBlockN + 127) / 128 * 128, 1>;

template <class Traits>
class Fp8TransposedDecode : public TransposedTile<Traits, Fp8TransposedPTile<Traits>> {
  using Base = TransposedTile<Traits, Fp8TransposedPTile<Traits>>;
  using typename Base::PTile;
  using VtTile = typename Traits::VtTile;
  static_assert(!Traits::kVtSwizzle64, "the V^T stage in 128-byte column blocks");

 public:
  using Base::kDimTiles;
  using Base::kKeyTiles;
  using Base::kRows;

  __device__ Fp8TransposedDecode(std::uint32_t q_stage, int thread, int barrier) : Base(q_stage, thread, barrier) {}

  // S^T = K Q^T for the K stage at k_stage: kHeadDim / 32 k-steps per 64-key tile, one commit group.
  __device__ void issue_scores(std::uint32_t k_stage) {
    this->issue_scores_with(k_stage, [](float(&st)[4], std::uint64_t desc_k, std::uint64_t desc_q, int accumulate) {
      wgmma_ss_e4m3<kRows>(st, desc_k, desc_q, accumulate);
    });
  }

  // O^T += V^T P^T for the V^T stage at vt_stage, with the P^T that update_and_store_probabilities
  // left: one commit group.
  __device__ void issue_output(std::uint32_t vt_stage) {
    wgmma_fence();
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int step = 0; step < Traits::kPSteps; ++step) {
        // 32 keys = 32 bytes along the rows of both: head-dim rows 64 d .. of V^T, query rows of P^T.
        const std::uint32_t along = (step % 4) * 32;
        const std::uint64_t desc_vt =
            kmajor_descriptor(vt_stage + (step / 4) * VtTile::kColumnBlockBytes + d * 64 * kSwizzleBytes + along);
        const std::uint64_t desc_p = kmajor_descriptor(this->p_tile() + (step / 4) * PTile::kColumnBlockBytes + along);
        wgmma_ss_e4m3<kRows>(this->ot_[d], desc_vt, desc_p, 1);
      }
    }
    wgmma_commit();
  }

  // One block of the online softmax with this block's score scale (raw scores -> log2 units; > 0) and
  // v_ratio (the change of v block scale, 1 without): the columns' new max (over the warpgroup), the
  // scores turned into P, O^T rescaled, and P^T stored in e4m3 for issue_output.
  __device__ void update_and_store_probabilities(float scale, float v_ratio) {
    float(&st)[kKeyTiles][4] = this->st_;
    float block_max[2];
    this->reduce_scores(block_max, MaxOp{});
    float factor[2], bias[2], o_factor[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float new_max = fmaxf(this->col_max_[c], block_max[c] * scale);
      // A column that has seen no key keeps max -inf; exponentiate against 0 (no -inf - -inf).
      const float reference = new_max == -INFINITY ? 0.0f : new_max;
      factor[c] = fast_exp2(this->col_max_[c] - reference);
      bias[c] = kFp8POffsetLog2 - reference;
      o_factor[c] = factor[c] * v_ratio;
      this->col_max_[c] = new_max;
      this->col_sum_[c] *= factor[c];
    }
    this->exponentiate_and_rescale(scale, bias, o_factor);
    // P^T (query rows x key columns) in V^T's key order: the transposers write key pi(a) to V^T column a
    // (fp8_layout.hpp), so P^T's column a must hold key pi(a) too, and pi puts keys y, y + 1, y + 8,
    // y + 9 (y even, within a 16-key group) on the four columns from 2 y. The thread of key row y and
    // its neighbour (lane ^ 4, key row y + 1) hold those four keys for two query columns; one shuffle
    // gives the even row's thread the first column's four and the odd row's thread the second's, each
    // one 32-bit store.
    const int lane = this->thread_ % 32, key_row = lane / 4;
    const bool even = key_row % 2 == 0;
    const int column = this->query_column(even ? 0 : 1);
    std::uint32_t* p_t = static_cast<std::uint32_t*>(__cvta_shared_to_generic(this->p_tile()));
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      const std::uint32_t first = pack_e4m3x2(st[j][0], st[j][2]);   // column 2 (l % 4): keys y, y + 8
      const std::uint32_t second = pack_e4m3x2(st[j][1], st[j][3]);  // the next column's
      const std::uint32_t received = __shfl_xor_sync(0xffffffffu, even ? second : first, 4);
      // bytes: this row's key y, the odd row's y + 1, this row's y + 8, the odd row's y + 9
      const std::uint32_t word = __byte_perm(even ? first : received, even ? received : second, 0x5140);
      const int key_column = 64 * j + 16 * (this->thread_ / 32) + 2 * (key_row - key_row % 2);
      p_t[PTile::offset(column, key_column) / 4] = word;
    }
    this->publish_probabilities();
  }
};

}  // namespace hopattn::sm90
