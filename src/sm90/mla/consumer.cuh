// An MLA consumer warpgroup (of two; roles in mla/traits.cuh). Per K/V block the scorer (warpgroup
// 0) computes S = [Q QV] [K V]^T (all four from shared memory), its mask and online softmax, stores P
// and the rows' rescale factors for the accumulator (warpgroup 1), and accumulates O's first 256
// columns, O += P V (P from registers, V MN-major from the stage); the accumulator rescales its
// columns and accumulates them from the stored P. Thread 0 (a scorer thread) also loads K and V: the
// first two blocks up front, then block i + 1 into the stage of block i - 1 once both warpgroups
// released it (one arrive per warp), while block i's S GEMM runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/mla/params.hpp"
#include "sm90/mla/producer.cuh"
#include "sm90/mla/q_tile.cuh"
#include "sm90/mla/tile.cuh"
#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <class Traits>
class MlaConsumer {
  using Element = typename Traits::Element;
  static constexpr int kS = Traits::kSRegisters;
  static constexpr int kO = Traits::kORegisters;
  static constexpr int kPSteps = Traits::kPSteps;
  static constexpr int kCB = Traits::kColumnBlockBytes;

 public:
  __device__ MlaConsumer(typename Traits::SharedStorage& s, const MlaParams& p, const MlaTile& t, int warpgroup,
                         KvMaps maps)
      : s_(s), p_(p), t_(t), warpgroup_(warpgroup), thread_(threadIdx.x % Traits::kWarpgroupThreads), maps_(maps) {}

  // By thread 0 before the CTA's first __syncthreads.
  __device__ static void init_barriers(typename Traits::SharedStorage& s) {
    for (int i = 0; i < Traits::kStages; ++i) {
      mbarrier_init(&s.kv_full[i], 1);
      mbarrier_init(&s.kv_empty[i], Traits::kConsumerWarps);
    }
  }

  __device__ void run() {
    const int blocks = t_.block_end - t_.block_begin;
    if (threadIdx.x == 0) {
      for (int i = 0; i < min(blocks, Traits::kStages); ++i) load_kv_block<Traits>(s_, maps_.k, maps_.v, p_, t_, i);
    }
    __syncwarp();  // bar.sync is .aligned: warp 0 reconverges after thread 0's loads
    load_mla_q_tile<Traits>(s_.q, p_, t_, threadIdx.x);
    float o[kO];
#pragma unroll
    for (int i = 0; i < kO; ++i) o[i] = 0.0f;
    if (warpgroup_ == 0) {
      run_scorer(o, blocks);
    } else {
      run_accumulator(o, blocks);
    }
  }

 private:
  // Per block: S, its softmax, P handed over, then this warpgroup's P V (which runs beside the
  // accumulator's). Issuing the next block's S GEMM before this P V, FlashAttention-3's intra-warpgroup
  // overlap, ran 1.5x slower (perf-notes v139): the S GEMMs then shared the tensor cores and shared
  // memory with both P Vs, and P reached the accumulator later.
  __device__ void run_scorer(float (&o)[kO], int blocks) {
    // The first key each of this thread's rows may not see, and the first some row of the tile may not.
    int mask_from[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) mask_from[r] = mla_first_masked_key(p_, t_, mla_row(p_, t_, accumulator_row(thread_, 2 * r), Traits::kBlockM));
    const int tile_mask_from = mla_first_masked_key(p_, t_, mla_row(p_, t_, 0, Traits::kBlockM));
    OnlineSoftmax<kS> softmax(p_.scale_log2);
    for (int i = 0; i < blocks; ++i) {
      const int stage = i % Traits::kStages;
      mbarrier_wait(&s_.kv_full[stage], (i / Traits::kStages) & 1);
      float s[kS];
      issue_s(s, stage);
      if (threadIdx.x == 0 && i >= 1 && i + 1 < blocks) {
        const int next = i + 1;  // into the stage of block i - 1
        mbarrier_wait(&s_.kv_empty[next % Traits::kStages], ((next - Traits::kStages) / Traits::kStages) & 1);
        load_kv_block<Traits>(s_, maps_.k, maps_.v, p_, t_, next);
      }
      __syncwarp();
      wgmma_wait<0>();
      pin_registers(s);
      std::uint32_t p[kPSteps][4];
      float rescale[2];
      score(s, i, mask_from, tile_mask_from, softmax, p, rescale);
      if (i > 0) named_barrier_sync_unaligned(Traits::kPEmptyBarrier, Traits::kConsumerThreads);  // block i - 1's P read
      hand_over_p(p, rescale);
      const int n0 = (t_.block_begin + i) * Traits::kBlockN;
      if (n0 + Traits::kBlockN > t_.seqlen_k) zero_v_tail(stage, t_.seqlen_k - n0);
      rescale_rows(o, rescale);
      issue_pv_from_registers(o, p, stage);
      wgmma_wait<0>();
      pin_registers(o);
      release_stage(stage);
    }
    // The rows' 1 / sum for the accumulator (a slot of its own: the last block's factors may still be
    // read), and a last P_full for it to wait on.
    float inv_sum[2], lse[2];
    finish(softmax, inv_sum, lse);
    if (thread_ % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) s_.row_inv_sum[accumulator_row(thread_, 2 * r)] = inv_sum[r];
    }
    if (blocks > 0) named_barrier_sync_unaligned(Traits::kPEmptyBarrier, Traits::kConsumerThreads);
    named_barrier_sync_unaligned(Traits::kPFullBarrier, Traits::kConsumerThreads);
    store(o, inv_sum, lse);
  }

  __device__ void run_accumulator(float (&o)[kO], int blocks) {
    for (int i = 0; i < blocks; ++i) {
      const int stage = i % Traits::kStages;
      mbarrier_wait(&s_.kv_full[stage], (i / Traits::kStages) & 1);  // this warpgroup's view of the TMA writes
      named_barrier_sync_unaligned(Traits::kPFullBarrier, Traits::kConsumerThreads);
      const int n0 = (t_.block_begin + i) * Traits::kBlockN;
      if (n0 + Traits::kBlockN > t_.seqlen_k) zero_v_tail(stage, t_.seqlen_k - n0);
      float rescale[2];
      read_row_scales(rescale);
      rescale_rows(o, rescale);
      issue_pv_from_shared(o, stage);
      wgmma_wait<0>();
      pin_registers(o);
      release_stage(stage);
      named_barrier_sync_unaligned(Traits::kPEmptyBarrier, Traits::kConsumerThreads);
    }
    named_barrier_sync_unaligned(Traits::kPFullBarrier, Traits::kConsumerThreads);
    float inv_sum[2], lse[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) inv_sum[r] = s_.row_inv_sum[accumulator_row(thread_, 2 * r)];
    store(o, inv_sum, lse);
  }

  // Block i's raw scores -> its mask, online softmax and P (16-bit A fragments), and the rows' factors.
  __device__ void score(float (&s)[kS], int i, const int (&mask_from)[2], int tile_mask_from,
                        OnlineSoftmax<kS>& softmax, std::uint32_t (&p)[kPSteps][4], float (&rescale)[2]) const {
    const int n0 = (t_.block_begin + i) * Traits::kBlockN;
    if (n0 + Traits::kBlockN > tile_mask_from) {
#pragma unroll
      for (int j = 0; j < kS; ++j) {
        if (n0 + accumulator_col(thread_, j) >= mask_from[fragment_row_half(j)]) s[j] = -INFINITY;
      }
    }
    softmax.update(s, rescale);
    pack_probabilities<Traits::kIsBf16>(s, p);
  }

  // P into the shared P tile (the A operand's K-major swizzled layout: stmatrix writes each 8 x 8 block
  // of the fragment as one matrix) and the rows' rescale factors beside it; then tells the accumulator.
  // P_full and P_empty are full barriers on both sides, not arrive / sync pairs: racecheck does not take
  // an arrive as ordering the arriving side's accesses before the other's (it reported the factors'
  // hand-over), and the scorer finds the accumulator already waiting. Unaligned: the two roles reach
  // them at different instructions.
  __device__ void hand_over_p(const std::uint32_t (&p)[kPSteps][4], const float (&rescale)[2]) {
    const int lane = thread_ % 32, matrix = lane / 8;
    const int row = 16 * (thread_ / 32) + lane % 8 + 8 * (matrix % 2);
    const std::uint32_t base = smem_address(s_.p);
#pragma unroll
    for (int step = 0; step < kPSteps; ++step) {
      const int key = 16 * step + 8 * (matrix / 2);
      stmatrix_x4(base + Traits::PTile::offset(row, key), p[step]);
    }
    if (thread_ % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) s_.row_scale[accumulator_row(thread_, 2 * r)] = rescale[r];
    }
    fence_proxy_async_shared();  // P is read by the accumulator's wgmma
    named_barrier_sync_unaligned(Traits::kPFullBarrier, Traits::kConsumerThreads);
  }

  __device__ void read_row_scales(float (&scale)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) scale[r] = s_.row_scale[accumulator_row(thread_, 2 * r)];
  }

  __device__ void release_stage(int stage) {
    __syncwarp();
    if (thread_ % 32 == 0) mbarrier_arrive(&s_.kv_empty[stage]);
  }

  // 1 / row sum (0 for a row that saw no key) and LSE (natural log; -inf for such a row).
  __device__ void finish(const OnlineSoftmax<kS>& softmax, float (&inv_sum)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(softmax.row_sum[r]);
      const bool empty = sum == 0.0f;
      inv_sum[r] = empty ? 0.0f : __fdividef(1.0f, sum);
      lse[r] = empty ? -INFINITY : (softmax.row_max[r] * p_.scale_log2 + __log2f(sum)) * 0.69314718055994531f;
    }
  }

  // S = [Q QV] [K V]^T: 36 k16 steps, both operands K-major from shared memory, one commit group.
  __device__ void issue_s(float (&s)[kS], int stage) {
    const std::uint32_t a = smem_address(s_.q), b = smem_address(s_.kv[stage]);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Traits::kSSteps; ++step) {
      const std::uint32_t offset = (step / 4) * kCB + (step % 4) * 32;  // 16 columns = 32 bytes
      wgmma_ss<Traits::kBlockN, Traits::kIsBf16>(s, kmajor_descriptor(a + offset), kmajor_descriptor(b + offset),
                                                 step > 0);
    }
    wgmma_commit();
  }

  // This warpgroup's V columns (column blocks 4w .. 4w + 3 of V's eight) in stage `stage`.
  __device__ std::uint32_t v_columns(int stage) const {
    return smem_address(s_.kv[stage]) + (Traits::kVFirstColumnBlock + warpgroup_ * Traits::kOColumns / 64) * kCB;
  }

  // O (this warpgroup's 256 columns) += P V, 16 keys a step: the scorer's P from registers.
  __device__ void issue_pv_from_registers(float (&o)[kO], const std::uint32_t (&p)[kPSteps][4], int stage) {
    const std::uint32_t v = v_columns(stage);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kPSteps; ++step)
      wgmma_rs<Traits::kOColumns, Traits::kIsBf16>(o, p[step], mnmajor_descriptor(v + step * 16 * kSwizzleBytes, kCB), 1);
    wgmma_commit();
  }

  // The same for the accumulator, P from the shared P tile (K-major, 32 bytes a step).
  __device__ void issue_pv_from_shared(float (&o)[kO], int stage) {
    const std::uint32_t v = v_columns(stage), p = smem_address(s_.p);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kPSteps; ++step) {
      wgmma_ss<Traits::kOColumns, Traits::kIsBf16, /*kBMNMajor=*/true>(
          o, kmajor_descriptor(p + step * 32), mnmajor_descriptor(v + step * 16 * kSwizzleBytes, kCB), 1);
    }
    wgmma_commit();
  }

  // V rows past the sequence's keys zeroed (zero_v_rows_past_keys): this warpgroup's own V columns (the
  // other warpgroup's P V reads only its own) before its P V.
  __device__ void zero_v_tail(int stage, int live_keys) {
    constexpr int kBlocks = Traits::kOColumns / 64;
    zero_v_rows_past_keys<Traits>(smem_address(s_.kv[stage]) + (Traits::kVFirstColumnBlock + warpgroup_ * kBlocks) * kCB,
                                  live_keys, kBlocks, thread_, Traits::kWarpgroupThreads);
    fence_proxy_async_shared();
    named_barrier_sync(Traits::kVTailBarrierBase + warpgroup_, Traits::kWarpgroupThreads);
  }

  // Normalized O of this warpgroup's columns (and, from the scorer, LSE): into out, or with a split
  // into the partials. A row that saw no key stores 0 and LSE -inf.
  __device__ void store(const float (&o)[kO], const float (&inv_sum)[2], const float (&lse)[2]) {
    MlaRow rows[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) rows[r] = mla_row(p_, t_, accumulator_row(thread_, 2 * r), Traits::kBlockM);
    const int col0 = warpgroup_ * Traits::kOColumns;
    if (p_.splits > 1) {
      const std::int64_t first = mla_partial_index(p_, t_.index, t_.split, Traits::kBlockM, 0);
      float* partial = p_.partial_o + first * Traits::kHeadDimV;
      // Live rows only: the combine reads no other (a 16-head decoding tile has 16 of 64).
#pragma unroll
      for (int i = 0; i < kO; i += 2) {
        const int r = fragment_row_half(i);
        const int row = accumulator_row(thread_, i), col = col0 + accumulator_col(thread_, i);
        if (rows[r].live) {
          *reinterpret_cast<float2*>(partial + row * Traits::kHeadDimV + col) =
              make_float2(o[i] * inv_sum[r], o[i + 1] * inv_sum[r]);
        }
      }
      if (warpgroup_ == 0 && thread_ % 4 == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (rows[r].live) p_.partial_lse[first + accumulator_row(thread_, 2 * r)] = lse[r];
        }
      }
      return;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!rows[r].live) continue;
      Element* out = mla_out_row<Element>(p_, t_.batch, rows[r]);
#pragma unroll
      for (int i = 2 * r; i < kO; i += 4) {
        const int col = col0 + accumulator_col(thread_, i);
        *reinterpret_cast<std::uint32_t*>(out + col) =
            pack_pair<Traits::kIsBf16>(o[i] * inv_sum[r], o[i + 1] * inv_sum[r]);
      }
      if (warpgroup_ == 0 && thread_ % 4 == 0 && p_.lse != nullptr) {
        *mla_lse_entry(p_, t_.batch, rows[r]) = lse[r];
      }
    }
  }

  typename Traits::SharedStorage& s_;
  const MlaParams& p_;
  const MlaTile& t_;
  const int warpgroup_;
  const int thread_;
  const KvMaps maps_;
};

}  // namespace hopattn::sm90
