// An FP8 consumer warpgroup: 64 query rows of the CTA tile. Per K/V block: S = Q K^T (wgmma k32,
// e4m3, both K-major; Q in registers, loaded once per tile, when Traits::kQInRegisters), online
// softmax with P scaled into [0, 256], P rounded to e4m3 straight into the 8-bit A fragment (no
// shuffles but in the key-order block of a V^T-from-global kernel: p_fragments.cuh), O += P V^T (RS
// wgmma against the V^T stage the producer warpgroup transposed or loaded). The two schedules and
// ping-pong are those of the 16-bit consumer (sm90/fwd/consumer.cuh). A variable-length kernel
// (Traits::kVarlen) masks each tile by its own sequence's lengths (fwd/sequence.cuh).
//
// Scales: a score is acc * q_scale * k_scale * softmax_scale. The per-tile part (per-head descales,
// the q block scale of this warpgroup's rows) and log2(e) are one factor; a per-block k scale
// multiplies it per K block. With a softcap (Traits::kSoftcap) the descales and softmax_scale /
// softcap scale the tanh's input instead, and the capped logits enter the softmax times log2(e)
// alone. V's scale: O is kept in units of the v scale of the last block added (a change of block
// scale is folded into the O rescale before the next P V), and the per-head v descale and the last
// block scale are applied in the epilogue. Where a K block spans several descale groups
// (Traits::kDescaleGroups > 1: the grouped 192- and 96-key kernels, which take 128-row scales), each
// group has its k and v scale, from the descale plan (descale_plan.cuh):
// the softmax scales each group's scores by its own factor, and a block's v scale is its groups'
// largest, the others' ratios to it folded into their P (DescaleGroups, softmax.cuh).
#pragma once

#include <type_traits>

#include "sm90/arch/convert_fp8.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/arch/wgmma_fp8.cuh"
#include "sm90/fwd/mask.cuh"
#include "sm90/fwd/packed_gqa.cuh"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/sequence.cuh"
#include "sm90/fwd_fp8/descale_plan.cuh"
#include "sm90/fwd_fp8/epilogue.cuh"
#include "sm90/fwd_fp8/fp8_layout.hpp"
#include "sm90/fwd_fp8/p_fragments.cuh"
#include "sm90/fwd_fp8/params.hpp"
#include "sm90/fwd_fp8/softmax.cuh"
#include "sm90/fwd_fp8/transposed_decode.cuh"
#include "sm90/pipeline/stage_ring.cuh"
#include "sm90/pipeline/warpgroup_turns.cuh"
#include "sm90/tile/a_fragment.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <class Traits>
class Fp8Consumer {
  using QTile = typename Traits::QTile;
  using Turns =
      WarpgroupTurns<Traits::kPingPongBarrierBase, Traits::kPingPongBarrierThreads, Traits::kConsumerWarpgroups>;
  using KTile = typename Traits::KTile;
  static constexpr int kS = Traits::kSRegisters;
  static constexpr int kO = Traits::kORegisters;
  static constexpr int kPSteps = Traits::kPSteps;
  using Softmax = Fp8OnlineSoftmax<kS, Traits::kFmaExp2Every, Traits::kPackedRowSums>;
  static constexpr int kQSteps = Traits::kQInRegisters ? Traits::kQKSteps : 0;
  static constexpr int kGroups = Traits::kDescaleGroups;
  static_assert(kGroups == 1 || kGroups == 3, "a descale plan entry holds three groups (descale_plan.cuh)");
  // What the softmax scales a block's raw scores by (logit_scale): one factor, or one per descale group.
  using LogitScale = std::conditional_t<kGroups == 1, float, DescaleGroups<kGroups>>;
  using QFragments = std::uint32_t[kQSteps > 0 ? kQSteps : 1][4];

 public:
  __device__ Fp8Consumer(typename Traits::SharedStorage& s, const Fp8FwdParams& p, const CUtensorMap* tm_o,
                         int warpgroup)
      : s_(s),
        p_(p),
        b_(p.base),
        tm_o_(tm_o),
        warpgroup_(warpgroup),
        thread_(threadIdx.x % Traits::kWarpgroupThreads) {}

  __device__ void run() {
    Turns::open_first_turn(b_.pingpong, warpgroup_);
    std::uint32_t q_phase = 0;
    while (true) {
      mbarrier_wait(&s_.q_full, q_phase);  // TMA thread -> us: visit id published, its Q tile landed
      q_phase ^= 1;
      const int visit_id = read_visit(&s_.visit);
      if (visit_id == kNoVisitLeft) {
        if (Traits::kOThroughSmem && thread_ == 0) tma_store_wait_all();  // O stores read shared memory
        return;
      }
      TileVisit visit;
      const TileCoord c = this_visit(visit_id, &visit);
      const int n_begin = visit.n_begin, n_end = visit.n_end;
      // m0: the tile's first query row (what block ranges and masked-block bounds take); row0: the
      // warpgroup's first row, a packed index in a packed GQA tile (fwd/packed_gqa.cuh).
      const int m0 = c.m_block * (Traits::kPacksGqa ? b_.tile_q_rows : Traits::kBlockM);
      const int row0 = (Traits::kPacksGqa ? c.m_block * b_.packed_rows : m0) + warpgroup_ * Traits::kRowsPerWarpgroup;
      const MaskedBlocks masked = masked_blocks<Traits::kBlockM, Traits::kBlockN, Traits::kChunksAndSequsedQ>(
          mask_bounds(c.batch), b_.chunk_divisor, m0);
      begin_tile(c, row0);

      float o[kO];
#pragma unroll
      for (int i = 0; i < kO; ++i) o[i] = 0.0f;
      Softmax softmax;
      // A variable-length tile's warpgroup without a live row computes nothing (mainloop_idle; the
      // decoding kernels, d <= 128 and the d 256 decoding-only one: in the other d 256 kernels the
      // loop's code spilled the 96-key kernel); a decoding
      // tile's first warpgroup computes transposed (mainloop_transposed), from Q in shared memory,
      // whose dead rows hold its scratch until it releases Q at the end.
      bool idle = false, transposed = false;
      if constexpr (Traits::kPacksGqa) {
        const int seqlen_q = varlen_sequence<Traits::kChunksAndSequsedQ>(b_, c.batch).bounds.seqlen_q;
        idle = !warpgroup_has_live_row(b_, c, seqlen_q, warpgroup_ * Traits::kRowsPerWarpgroup);
        if constexpr (Traits::kDecodingOnly) {
          transposed = warpgroup_ == 0;  // its launch takes only tiles of at most 8 live rows
        } else if constexpr (Traits::kTransposedDecode) {
          transposed = warpgroup_ == 0 && tile_live_rows(b_, c, seqlen_q) <= Fp8TransposedDecode<Traits>::kRows;
        }
      }
      QFragments q;
      if constexpr (Traits::kQInRegisters) {
        if (!idle && !transposed) {
          load_a_fragments<QTile>(smem_address(s_.q), warpgroup_ * Traits::kRowsPerWarpgroup, thread_, q);
        }
        if (!transposed) release_ldmatrix_reads_to_tma(&s_.q_empty, thread_);  // the next tile's Q may load now
      }

      if (n_end <= n_begin) {
        if (!Traits::kQInRegisters || transposed) release(&s_.q_empty);
      } else if (idle) {
        mainloop_idle(n_begin, n_end);
      } else if (transposed) {
        // Only the kernels that can take the branch instantiate the loop.
        if constexpr (Traits::kTransposedDecode) mainloop_transposed(masked, m0, row0, n_begin, n_end, o, softmax);
      } else if constexpr (!Traits::kDecodingOnly) {
        if (b_.intra_wg_overlap) {
          mainloop_overlapped(masked, m0, row0, n_begin, n_end, q, o, softmax);
        } else {
          mainloop_sequential(masked, m0, row0, n_begin, n_end, q, o, softmax);
        }
      }
      if constexpr (Traits::kVarlen) {
        store_fp8_varlen_output<Traits>(b_, s_, tm_o_, c, warpgroup_, row0, thread_, o, softmax, v_factor_ * v_block_,
                                        visit.split_slot);
      } else {
        store_fp8_output<Traits>(b_, s_, tm_o_, c, warpgroup_, row0, thread_, o, softmax, v_factor_ * v_block_,
                                 visit.split_slot);
      }
    }
  }

 private:
  // What visit `id` (>= 0) works on: a whole tile, or where Traits::kTailSplit a split piece too; and
  // the coordinates of its tile. A variable-length visit is a whole tile of its sequence's key blocks,
  // or where Traits::kVarlenSplit one of its pieces (the producer skips the tiles past a sequence's
  // last row).
  __device__ TileCoord this_visit(int id, TileVisit* v) const {
    if constexpr (Traits::kVarlen) {
      const VarlenVisit varlen =
          decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit, Traits::kChunksAndSequsedQ>(b_,
                                                                                                                  id);
      *v = varlen.visit;
      return varlen.coord;
    } else if constexpr (Traits::kTailSplit) {
      *v = decode_visit<Traits::kBlockM, Traits::kBlockN, Traits::kChunksAndSequsedQ>(b_, id);
      return decode_tile(b_, v->tile);
    } else {
      const TileCoord c = decode_tile(b_, id);
      *v = TileVisit{id, 0, 0, -1};
      kv_block_range<Traits::kBlockM, Traits::kBlockN, Traits::kChunksAndSequsedQ>(b_, b_.chunk_divisor, c.m_block,
                                                                                   &v->n_begin, &v->n_end);
      return c;
    }
  }

  // What the masks of a tile of sequence `batch` see: FwdParams for a dense batch; for a variable-length
  // one its sequence's SequenceBounds, read again wherever a block is masked rather than kept in
  // registers through the mainloop (that spilled at head dim 256; the reads hit L1).
  __device__ decltype(auto) mask_bounds(int batch) const {
    if constexpr (Traits::kVarlen)
      return varlen_sequence<Traits::kChunksAndSequsedQ>(b_, batch).bounds;
    else
      return b_;
  }

  __device__ void begin_gemm_turn() { Turns::begin(b_.pingpong, warpgroup_); }
  __device__ void end_gemm_turn() { Turns::end(b_.pingpong, warpgroup_); }
  __device__ void release(std::uint64_t* empty) { release_from_warp(empty, thread_); }

  // Per-tile scale factors; see the header comment.
  __device__ void begin_tile(const TileCoord& c, int row0) {
    batch_ = c.batch;
    kv_head_ = Traits::kPacksGqa && b_.pack_gqa ? c.head : c.head / b_.head_ratio;  // packed: c.head is the K/V head
    // A warpgroup past seqlen_q stores nothing; clamp its q block index into the descale's extent.
    const int q_row = row0 < b_.seqlen_q ? row0 : b_.seqlen_q - 1;
    const DescaleView& qb = p_.q_block_descale;
    const float q_block = qb.data == nullptr ? 1.0f : qb.at(c.batch, c.head, q_row / qb.rows_per_block);
    const float descales = p_.q_descale.at(c.batch, kv_head_) * p_.k_descale.at(c.batch, kv_head_) * q_block;
    if constexpr (Traits::kSoftcap) {
      cap_input_scale_ = b_.softcap_input_scale * descales;
      score_scale_ = b_.scale_log2;  // log2(e): make_fwd_params sets logit_scale 1 under a softcap
    } else {
      score_scale_ = b_.scale_log2 * descales;
    }
    v_factor_ = p_.v_descale.at(c.batch, kv_head_);
    v_block_ = 1.0f;
    if constexpr (kGroups > 1) {  // the tile's row of the descale plan, read per block
      plan_row_ = p_.descale_plan + (static_cast<long long>(c.batch) * b_.heads_kv + kv_head_) * p_.descale_plan_blocks;
    }
  }
  // Block n's k and v scales (1 without block descales), or its descale plan where it has groups.
  // Loaded when block n's K lands, before the GEMM turn, so the global loads are in flight during the
  // turn and the S wait instead of on the softmax's path.
  struct OneGroupScales {
    float k[1], v[1];
  };
  using BlockScales = std::conditional_t<kGroups == 1, OneGroupScales, DescaleGroupPlan>;
  __device__ BlockScales block_scales(int n) const {
    if constexpr (!Traits::kBlockDescales) return {{1.0f}, {1.0f}};  // kGroups is 1
    BlockScales scales;
    if constexpr (kGroups == 1) {
      const int entry = static_cast<int>(p_.kv_groups_per_descale.divide(static_cast<std::uint32_t>(n)));
      scales.k[0] = p_.k_block_descale.at(batch_, kv_head_, entry);  // 1 where absent
      scales.v[0] = p_.v_block_descale.at(batch_, kv_head_, entry);
    } else {
      const float4* entry = reinterpret_cast<const float4*>(plan_row_ + n);
      const float4 k = __ldg(entry), p_log2 = __ldg(entry + 1), sum_weight = __ldg(entry + 2);
      scales.k[0] = k.x, scales.k[1] = k.y, scales.k[2] = k.z, scales.v_scale = k.w;
      scales.p_log2[0] = p_log2.x, scales.p_log2[1] = p_log2.y, scales.p_log2[2] = p_log2.z;
      scales.sum_weight[0] = sum_weight.x, scales.sum_weight[1] = sum_weight.y, scales.sum_weight[2] = sum_weight.z;
    }
    return scales;
  }
  // The v scale a block's P V adds O in (with groups, their largest).
  __device__ static float block_v_scale(const BlockScales& scales) {
    if constexpr (kGroups == 1) return scales.v[0];
    else return scales.v_scale;
  }
  // O is about to receive the P V of a block with scales `next_scales`: fold the change of v block
  // scale into the rescale factors (an approximate division: the ratio only rescales O).
  __device__ void switch_v_block(const BlockScales& next_scales, float (&factor)[2]) {
    if (!Traits::kBlockDescales || p_.v_block_descale.data == nullptr) return;
    const float next = block_v_scale(next_scales);
    const float ratio = __fdividef(v_block_, next);
    factor[0] *= ratio;
    factor[1] *= ratio;
    v_block_ = next;
  }

  __device__ void issue_qk(float (&s)[kS], const QFragments& q, int stage) {
    const std::uint32_t q_base = smem_address(s_.q) + warpgroup_ * Traits::kRowsPerWarpgroup * kSwizzleBytes;
    const std::uint32_t k_base = smem_address(s_.k[stage]);
    const std::uint64_t q_desc = kmajor_descriptor(q_base), k_desc = kmajor_descriptor(k_base);
    constexpr bool kAdvance = Traits::kLeanAddressing;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Traits::kQKSteps; ++step) {
      // 32 e4m3 columns = 32 bytes; four steps per 128-byte column block.
      const int block = step / 4;
      const std::uint32_t in_row = (step % 4) * 32;
      const std::uint64_t desc_k =
          kmajor_descriptor_at<kAdvance>(k_desc, k_base, block * KTile::kColumnBlockBytes + in_row);
      if constexpr (Traits::kQInRegisters) {
        wgmma_rs_e4m3<Traits::kBlockN>(s, q[step], desc_k, step > 0);
      } else {
        const std::uint64_t desc_q =
            kmajor_descriptor_at<kAdvance>(q_desc, q_base, block * QTile::kColumnBlockBytes + in_row);
        wgmma_ss_e4m3<Traits::kBlockN>(s, desc_q, desc_k, step > 0);
      }
    }
    wgmma_commit();
  }

  // O += P V: B is the V^T stage (head-dim rows, keys along the row), stepped 32 keys = 32 bytes.
  __device__ void issue_pv(float (&o)[kO], const std::uint32_t (&p)[kPSteps][4], int stage) {
    using VtTile = typename Traits::VtTile;
    const std::uint32_t vt_base = smem_address(s_.vt[stage]);
    const std::uint64_t vt_desc = Traits::kVtSwizzle64 ? kmajor_descriptor_64b(vt_base) : kmajor_descriptor(vt_base);
    constexpr int kStepsPerBlock = VtTile::kColsPerBlock / fp8::kKeysPerStep;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kPSteps; ++step) {
      // Four (two under the 64B swizzle) k32 steps per column block of V^T.
      const std::uint32_t offset =
          (step / kStepsPerBlock) * VtTile::kColumnBlockBytes + (step % kStepsPerBlock) * fp8::kKeysPerStep;
      const std::uint64_t desc_vt =
          Traits::kVtSwizzle64 ? advance_descriptor(vt_desc, offset)
                               : kmajor_descriptor_at<Traits::kLeanAddressing>(vt_desc, vt_base, offset);
      wgmma_rs_e4m3<Traits::kHeadDimV>(o, p[step], desc_vt, 1);
    }
    wgmma_commit();
  }

  // The factor from raw scores (after the softcap, when on) to log2-unit logits for block scales
  // `scales`; per descale group where a block has several, with P's offsets (DescaleGroups).
  __device__ LogitScale logit_scale(const BlockScales& scales) const {
    if constexpr (kGroups == 1) {
      return Traits::kSoftcap ? score_scale_ : score_scale_ * scales.k[0];
    } else {
      DescaleGroups<kGroups> groups;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        groups.logit[g] = score_scale_ * scales.k[g];
        groups.p_log2[g] = scales.p_log2[g];
        groups.sum_weight[g] = scales.sum_weight[g];
      }
      return groups;
    }
  }

  // Whether block n's K rows are permuted (fp8_layout.hpp, key_of_s_column): where V^T comes from
  // global memory, in every block but the one that reaches the end of the keys (producer.cuh).
  __device__ bool k_rows_permuted(int n_block) const {
    return Traits::kVtFromGlobal && !fp8::k_block_in_key_order(n_block, Traits::kBlockN, b_.seqlen_k);
  }
  struct PermutedKeyColumns {
    __device__ int operator()(int thread, int index) const { return fp8::key_of_accumulator(thread, index); }
  };

  // Raw scores -> what the softmax sees: softcap (when on), then the mask; kPermutedK: block n_block's
  // K rows are permuted (the caller knows, at compile time inside the mainloop, at run time outside).
  template <bool kPermutedK>
  __device__ void prepare_scores(float (&s)[kS], const BlockScales& scales, const MaskedBlocks& masked, int m0,
                                 int row0, int n_block) {
    if constexpr (Traits::kSoftcap) {
      const float input_scale = cap_input_scale_ * scales.k[0];
#pragma unroll
      for (int i = 0; i < kS; ++i) s[i] = b_.softcap * fast_tanh(s[i] * input_scale);
    }
    const int n0 = n_block * Traits::kBlockN;
    // A variable-length kernel takes the tile's two bounds (masked_blocks.hpp) at every head dim: the
    // definition per block would read its sequence's bounds again for every block (d 64 ran 13%
    // slower than dense so).
    constexpr bool kPerTileBounds = Traits::kLeanAddressing || Traits::kVarlen;
    if (block_needs_mask<Traits::kBlockM, Traits::kBlockN, kPerTileBounds>(masked, b_, m0, n_block)) {
      if constexpr (kPermutedK) {
        apply_mask_permuted<Traits::kChunksAndSequsedQ>(s, thread_, row0, n0, b_, b_.chunk_divisor,
                                                        PermutedKeyColumns{});
      } else {
        if (Traits::kPacksGqa && b_.pack_gqa)
          apply_mask_packed<Traits::kChunksAndSequsedQ>(s, thread_, row0, n0, mask_bounds(batch_), b_);
        else
          apply_mask<Traits::kChunksAndSequsedQ>(s, thread_, row0, n0, mask_bounds(batch_), b_.chunk_divisor);
      }
    }
  }
  // prepare_scores for a block whose K rows may or may not be permuted (outside the mainloop's loop).
  __device__ void prepare_scores_of_block(float (&s)[kS], const BlockScales& scales, const MaskedBlocks& masked,
                                          int m0, int row0, int n_block) {
    if constexpr (Traits::kVtFromGlobal) {
      if (k_rows_permuted(n_block)) return prepare_scores<true>(s, scales, masked, m0, row0, n_block);
    }
    prepare_scores<false>(s, scales, masked, m0, row0, n_block);
  }

  __device__ void softmax_update(float (&s)[kS], const BlockScales& scales, Softmax& softmax,
                                 float (&factor)[2], std::uint32_t (&p16)[kS / 2]) {
    softmax.update(s, logit_scale(scales), factor, p16);
  }

  // rescale without a branch (a branch would split the code that interleaves it with the
  // exponentials): the multiplies are predicated off where no row of the warp moved its max, so they
  // issue but leave alone the FMA pipe, whose every instruction costs the other warpgroup's GEMMs a
  // tensor cycle (hopattn-pipe-overlap). +1-1.5% at d 128 against multiplying always (H200,
  // 2026-11-29).
  __device__ static void rescale_predicated(float (&o)[kO], const float (&factor)[2]) {
    const int moved = warp_rescales(factor);
#pragma unroll
    for (int i = 0; i < kO; i += 4) {
      const float f0 = factor[fragment_row_half(i)], f1 = factor[fragment_row_half(i + 2)];
      asm("{\n .reg .pred p;\n setp.ne.s32 p, %6, 0;\n"
          " @p mul.f32 %0, %0, %4;\n @p mul.f32 %1, %1, %4;\n @p mul.f32 %2, %2, %5;\n @p mul.f32 %3, %3, %5;\n}\n"
          : "+f"(o[i]), "+f"(o[i + 1]), "+f"(o[i + 2]), "+f"(o[i + 3])
          : "f"(f0), "f"(f1), "r"(moved));
    }
  }

  // P -> e4m3 A fragments (p_fragments.cuh), in key order where block n_block's K rows were.
  __device__ static void convert_p(const float (&s)[kS], const std::uint32_t (&p16)[kS / 2],
                                   std::uint32_t (&p)[kPSteps][4]) {
    pack_p_fragments<Traits::kPackedRowSums>(s, p16, p);
  }
  __device__ void convert_p_of_block(const float (&s)[kS], const std::uint32_t (&p16)[kS / 2],
                                     std::uint32_t (&p)[kPSteps][4], int n_block) const {
    if constexpr (Traits::kVtFromGlobal) {
      if (!k_rows_permuted(n_block)) return pack_p_fragments_in_key_order<Traits::kPackedRowSums>(s, p16, p);
    }
    convert_p(s, p16, p);
  }

  __device__ void mainloop_sequential(const MaskedBlocks& masked, int m0, int row0, int n_begin, int n_end,
                                      const QFragments& q, float (&o)[kO], Softmax& softmax) {
    float s[kS];
    std::uint32_t p[kPSteps][4];
    for (int n = n_end - 1; n >= n_begin; --n) {
      const int stage = ring_.index();
      mbarrier_wait(&s_.k_full[stage], ring_.phase());
      const BlockScales scales = block_scales(n);
      begin_gemm_turn();
      issue_qk(s, q, stage);
      end_gemm_turn();
      wgmma_wait<0>();
      pin_registers(s);
      release(&s_.k_empty[stage]);
      if (!Traits::kQInRegisters && n == n_begin) release(&s_.q_empty);
      prepare_scores_of_block(s, scales, masked, m0, row0, n);
      float factor[2];
      std::uint32_t p16[kS / 2];
      softmax_update(s, scales, softmax, factor, p16);
      switch_v_block(scales, factor);
      rescale_rows(o, factor);
      convert_p_of_block(s, p16, p, n);
      mbarrier_wait(&s_.vt_full[stage], ring_.phase());  // transposers -> us: V^T written
      issue_pv(o, p, stage);
      wgmma_wait<0>();
      pin_registers(o);
      release(&s_.vt_empty[stage]);
      ring_.advance();
    }
  }

  // The P V GEMM of the last turn is done: O, p and its V^T stage are free.
  __device__ void wait_for_pv(float (&o)[kO], std::uint32_t (&p)[kPSteps][4], int pv_stage) {
    wgmma_wait<0>();
    pin_registers(o);
    pin_registers(p);
    release(&s_.vt_empty[pv_stage]);
  }

  // Block n's iteration: one turn issues S_n and O += P_{n+1} V_{n+1}, then the softmax of S_n runs
  // while that P V does. Where Traits::kPvWaitInSoftmax, the softmax waits for the P V after its max
  // reduction (it ran right behind S_n, so it is done or nearly), which frees O and p: O's rescale
  // for block n and P_n's conversion then interleave with the exponentials instead of following them
  // on the warpgroup's critical path. Where Traits::kPvWaitAfterMax (192-key blocks) that wait is
  // pinned there and the turn lasts until it (see below).
  __device__ void mainloop_overlapped(const MaskedBlocks& masked, int m0, int row0, int n_begin, int n_end,
                                      const QFragments& q, float (&o)[kO], Softmax& softmax) {
    float s[kS];
    std::uint32_t p16[kS / 2];
    std::uint32_t p[kPSteps][4];
    float factor[2];
    int n = n_end - 1;
    int pv_stage = ring_.index();
    mbarrier_wait(&s_.k_full[pv_stage], ring_.phase());
    BlockScales scales = block_scales(n);
    begin_gemm_turn();
    issue_qk(s, q, pv_stage);
    end_gemm_turn();
    wgmma_wait<0>();
    pin_registers(s);
    release(&s_.k_empty[pv_stage]);
    if (!Traits::kQInRegisters && n == n_begin) release(&s_.q_empty);
    prepare_scores_of_block(s, scales, masked, m0, row0, n);
    softmax_update(s, scales, softmax, factor, p16);
    switch_v_block(scales, factor);  // O is still zero: only its v scale is set
    convert_p_of_block(s, p16, p, n);
    std::uint32_t pv_phase = ring_.phase();
    ring_.advance();

    for (n = n_end - 2; n >= n_begin; --n) {
      const int stage = ring_.index();
      mbarrier_wait(&s_.k_full[stage], ring_.phase());
      scales = block_scales(n);
      begin_gemm_turn();
      issue_qk(s, q, stage);  // S_n, in flight during the softmax below
      if constexpr (!Traits::kPvWaitInSoftmax) rescale_rows(o, factor);
      mbarrier_wait(&s_.vt_full[pv_stage], pv_phase);
      issue_pv(o, p, pv_stage);  // O += P_{n+1} V_{n+1}
      if constexpr (!Traits::kPvWaitAfterMax) end_gemm_turn();
      wgmma_wait<1>();
      pin_registers(s);
      release(&s_.k_empty[stage]);
      if (!Traits::kQInRegisters && n == n_begin) release(&s_.q_empty);
      // Never the block that reaches the end of the keys (the first one, above): permuted K rows
      // where V^T comes from global memory.
      prepare_scores<Traits::kVtFromGlobal>(s, scales, masked, m0, row0, n);
      const LogitScale scale = logit_scale(scales);
      softmax.update_max(s, scale, factor);
      if constexpr (Traits::kPvWaitInSoftmax) {
        if constexpr (Traits::kPvWaitAfterMax) {
          // The P V wait stays after the max reduction (keep_next_wait_after), and the turn passes to
          // the other warpgroup only now: its GEMMs then run beside this warpgroup's exponentials
          // (ptxas puts the bar.arrive among the first of them) rather than beside the max
          // reduction, whose FMNMX chains the tensor pipe slows (they yield to wgmma:
          // hopattn-pipe-overlap). 192-key d 128: +2-3% at 8k, +1-2% at 16k (H200, 2026-12-01).
          keep_next_wait_after(factor[0] + factor[1], &s_.pv_fence[warpgroup_ * Traits::kWarpgroupThreads + thread_]);
          end_gemm_turn();
        }
        wait_for_pv(o, p, pv_stage);
        switch_v_block(scales, factor);
        rescale_predicated(o, factor);
      }
      softmax.exponentiate(s, scale, p16);
      if constexpr (!Traits::kPvWaitInSoftmax) {
        wait_for_pv(o, p, pv_stage);
        switch_v_block(scales, factor);
      }
      convert_p(s, p16, p);
      pv_stage = stage;
      pv_phase = ring_.phase();
      ring_.advance();
    }
    if constexpr (!Traits::kPvWaitInSoftmax) rescale_rows(o, factor);
    mbarrier_wait(&s_.vt_full[pv_stage], pv_phase);
    issue_pv(o, p, pv_stage);
    wgmma_wait<0>();
    pin_registers(o);
    release(&s_.vt_empty[pv_stage]);
  }

  // The mainloop of a decoding kernel's (Traits::kPacksGqa) warpgroup none of whose rows is live
  // (warpgroup 1 of a packed decoding tile, the rows past a short sequence): no GEMMs and no softmax,
  // only the barrier traffic of a mainloop, so the other warpgroup and the producer warpgroup see what
  // they would: one GEMM turn per block (either mainloop takes one a block), and its K, Q and V^T
  // releases, each after the block's stage has landed (so that it counts in the stage's current
  // phase). Its O stays 0 and its rows store nothing. In a decoding step the dead warpgroup's GEMMs
  // and exponentials were half the kernel's work, and the FP8 decoding kernels did not reach HBM's
  // rate (perf-notes v85, v87).
  __device__ void mainloop_idle(int n_begin, int n_end) {
    for (int n = n_end - 1; n >= n_begin; --n) {
      const int stage = ring_.index();
      mbarrier_wait(&s_.k_full[stage], ring_.phase());
      begin_gemm_turn();
      end_gemm_turn();
      release(&s_.k_empty[stage]);
      if (!Traits::kQInRegisters && n == n_begin) release(&s_.q_empty);
      mbarrier_wait(&s_.vt_full[stage], ring_.phase());
      release(&s_.vt_empty[stage]);
      ring_.advance();
    }
  }

  // A decoding tile's first warpgroup (transposed_decode.cuh), while the second runs mainloop_idle:
  // the same barrier traffic in the same order (one GEMM turn per block, its K and V^T releases), and
  // Q released at the end, since its dead rows hold the scratch.
  __device__ void mainloop_transposed(const MaskedBlocks& masked, int m0, int row0, int n_begin, int n_end,
                                      float (&o)[kO], Softmax& softmax) {
    // Warpgroup 0's epilogue barrier: idle until the tile's epilogue.
    Fp8TransposedDecode<Traits> decode(smem_address(s_.q), thread_, Traits::kEpilogueBarrierBase);
    for (int n = n_end - 1; n >= n_begin; --n) {
      const int stage = ring_.index();
      mbarrier_wait(&s_.k_full[stage], ring_.phase());
      const BlockScales scales = block_scales(n);
      begin_gemm_turn();
      decode.issue_scores(smem_address(s_.k[stage]));
      end_gemm_turn();
      wgmma_wait<0>();
      decode.pin_scores();
      release(&s_.k_empty[stage]);
      if constexpr (Traits::kSoftcap) decode.apply_softcap(b_.softcap, cap_input_scale_ * scales.k[0]);
      if (block_needs_mask<Traits::kBlockM, Traits::kBlockN, true>(masked, b_, m0, n)) {
        decode.template apply_mask<Traits::kChunksAndSequsedQ>(mask_bounds(batch_), b_, b_.pack_gqa, row0,
                                                               n * Traits::kBlockN);
      }
      float v_ratio[2] = {1.0f, 1.0f};
      switch_v_block(scales, v_ratio);
      decode.update_and_store_probabilities(logit_scale(scales), v_ratio[0]);
      mbarrier_wait(&s_.vt_full[stage], ring_.phase());  // transposers -> us: V^T written
      decode.issue_output(smem_address(s_.vt[stage]));
      wgmma_wait<0>();
      decode.pin_output();
      release(&s_.vt_empty[stage]);
      ring_.advance();
    }
    decode.finish(o, softmax.row_max, softmax.row_sum);
    release_ldmatrix_reads_to_tma(&s_.q_empty, thread_);  // the scratch's generic stores -> the next TMA
  }

  typename Traits::SharedStorage& s_;
  const Fp8FwdParams& p_;
  const FwdParams& b_;
  const CUtensorMap* tm_o_;  // O's tensor map, used where Traits::kOThroughSmem and b_.store_o_by_tma
  const int warpgroup_;
  const int thread_;
  StageRing<Traits::kStages> ring_;
  int batch_ = 0, kv_head_ = 0;
  float score_scale_ = 0.0f;      // scale_log2 * per-head q, k descales * q block scale (softcap: scale_log2)
  float cap_input_scale_ = 0.0f;  // softcap only: softmax_scale / softcap * per-head descales * q block scale
  float v_factor_ = 1.0f;         // per-head v descale
  float v_block_ = 1.0f;          // v block scale O is currently expressed in
  const DescaleGroupPlan* plan_row_ = nullptr;  // where kGroups > 1: the tile's (batch, kv head) plan
};

}  // namespace hopattn::sm90
