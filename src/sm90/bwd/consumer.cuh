// A consumer warpgroup of the backward: 64 keys of the CTA's key block (at d 192 and 256 both
// consumers take the same 64 keys and split the steps below by role: run_role_step,
// Traits::kSplitsRoles). For each q block (64 rows of one q head) the producer stages, it
//   1. issues S^T = K Q^T and dP^T = V dO^T (SS-wgmma, keys as M: both are 64 keys x 64 q rows);
//   2. recomputes P^T = exp2(S^T * scale - lse) from the forward's LSE (no running max: the row sums
//      are already known), and dS^T = P^T (dP^T - D) (times 1 - tanh^2 under the softcap);
//   3. issues dV += P^T dO and dK += dS^T Q with P^T and dS^T as register A fragments (RS-wgmma; the
//      accumulator of S^T columns [16k, 16k + 16) is, in order, the A fragment of step k) and dO, Q read
//      MN-major: no transposes;
//   4. stores dS^T transposed (stmatrix.trans) into the step's dS buffer (q rows x keys); once both
//      warpgroups have stored their halves (ds_ready), the next step (PendingDq) issues this
//      warpgroup's half of dQ's columns, dQ = dS K (SS-wgmma, dS K-major, K MN-major), beside its own
//      S^T, and stores it to shared memory, from where one of its threads adds it into the float32 dq
//      workspace with a bulk reduction (at d 64 and 256 every thread adds its own accumulators
//      instead: Traits::kDqFromRegisters).
// The two warpgroups issue their GEMMs in turns (ping-pong), as the forward's consumers do. Before the
// first, each zeroes its share of the K and V rows past the sequence's keys, if the block has any
// (key_tail.cuh); before a step's first, with seqused_q, its share of the Q and dO rows past the
// sequence's q rows in use, if the step's q block has any (query_tail.cuh).
// dK and dV (at d 192 and 256 one of them per consumer) stay in registers for the whole CTA and are
// stored at the end (dK times softmax_scale), through shared memory by TMA (store_gradient_tiles).
// Where v is narrower (Traits::kHeadDimV: q/k 192, v 128), dP^T = V dO^T and dV += P^T dO run over v's
// columns only (issue_role_scores, value_gradient).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "sm90/arch/convert.cuh"
#include "sm90/arch/global_reduce.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/bwd/block_range.hpp"
#include "sm90/bwd/key_tail.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/producer.cuh"
#include "sm90/bwd/query_tail.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/pipeline/stage_ring.cuh"
#include "sm90/pipeline/warpgroup_turns.cuh"
#include "sm90/tile/a_fragment.cuh"
#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <class Traits>
class BwdConsumer {
  using QTile = typename Traits::QTile;
  using KTile = typename Traits::KTile;
  using VTile = typename Traits::VTile;
  using DsTile = typename Traits::DsTile;
  static constexpr int kS = Traits::kSRegisters;
  static constexpr int kG = Traits::kGradRegisters;
  static constexpr int kGv = Traits::kHeadDimV / 2;  // dV's registers: v's columns
  static constexpr int kDq = Traits::kDqRegisters;
  static constexpr int kQSteps = Traits::kQSteps;
  using Fragments = std::uint32_t[kQSteps][4];

 public:
  __device__ BwdConsumer(typename Traits::SharedStorage& s, const BwdParams& p, const KeyBlock& block,
                         const BwdSequence& seq, int warpgroup)
      : s_(s),
        p_(p),
        block_(block),
        seq_(seq),
        warpgroup_(warpgroup),
        thread_(threadIdx.x % Traits::kWarpgroupThreads),
        key0_(block.n_block * Traits::kBlockN + first_key_in_tile()) {}

  // maps: dk's and dv's (store_gradient_tiles).
  __device__ void run(const GradientMaps& maps) {
    if constexpr (Traits::kSplitsRoles) {
      float grad[kG];  // dV (consumer 0) or dK (consumer 1)
#pragma unroll
      for (int i = 0; i < kG; ++i) grad[i] = 0.0f;
      walk_steps([&](int head, int m0, const StageRing<Traits::kStages>& ring, PendingDq& pending) {
        run_role_step(head, m0, ring, pending, grad);
      });
      if (stores_gradient_tiles()) {
        store_role_gradient_tile(grad, maps);
      } else {
        store_role_gradient(grad);
      }
    } else {
      float dk[kG], dv[kG];
#pragma unroll
      for (int i = 0; i < kG; ++i) dk[i] = dv[i] = 0.0f;
      walk_steps([&](int head, int m0, const StageRing<Traits::kStages>& ring, PendingDq& pending) {
        run_step(head, m0, ring, pending, dk, dv);
      });
      if (stores_gradient_tiles()) {
        store_gradient_tiles(dk, dv, maps);
      } else {
        store_gradients(dk, dv);
      }
    }
    if (issues_dq_reductions()) tma_store_wait_all();  // the reductions read shared memory until they finish
  }

 private:
  using Turns = WarpgroupTurns<Traits::kTurnBarrierBase, Traits::kConsumerThreads, Traits::kConsumerWarpgroups>;

  // The step whose dS is in shared memory and whose dQ GEMM the next step issues (head -1: none): a
  // step carries its dS, as the forward carries P into the next block's turn, so that nothing stays in
  // flight across steps and neither consumer waits for the other's dS inside a step. `uses` counts the
  // steps, for the phase of ds_ready.
  struct PendingDq {
    int head = -1, m0 = 0, uses = -1;
    __device__ int buffer() const { return uses % Traits::kDsBuffers; }
    __device__ int buffer_of_dq() const { return uses % Traits::kDqBuffers; }
    __device__ std::uint32_t phase() const { return (uses / Traits::kDsBuffers) % 2; }
  };

  // Waits for K and V, clears the key tail, runs step(head, m0, ring, pending) for every step of the
  // CTA, then issues and adds the last step's dQ.
  template <class Step>
  __device__ void walk_steps(Step&& step) {
    const StepList<Traits> steps(p_, block_, bounds());
    mbarrier_wait(&s_.kv_full, 0);  // producer (TMA) -> us: K and V landed
    Turns::open_first_turn(true, warpgroup_);
    clear_key_tail();  // after opening the first turn, which is no wait (the clear's barrier orders what needs it)
    StageRing<Traits::kStages> ring;
    PendingDq pending;
    for (int head = steps.first_head; head < steps.first_head + p_.head_ratio; ++head) {
      for (int m = steps.m_begin; m < steps.m_begin + steps.m_blocks; ++m) {
        step(head, m * Traits::kBlockM, ring, pending);
        ring.advance();
      }
    }
    if (pending.head >= 0) {
      float dq[kDq];
      wait_dq_share_free(pending);
      Turns::begin(true, warpgroup_);
      issue_pending_dq(dq, pending);
      Turns::end(true, warpgroup_);
      wgmma_wait<0>();
      pin_registers(dq);
      emit_dq_part(dq, pending, 0);
      issue_and_emit_later_dq_parts(dq, pending);
      if constexpr (!Traits::kDqFromRegisters) {
        if constexpr (Traits::kDqShareFencedWithDs) fence_proxy_async_shared();  // no dS stores follow
        sync_dq_share();
        reduce_dq_share(pending);
      }
    }
  }

  // Waits until both consumers have stored their halves of the pending dS, then issues the first part
  // of this consumer's columns of its dQ.
  __device__ void issue_pending_dq(float (&dq)[kDq], const PendingDq& pending) {
#pragma unroll
    for (int w = 0; w < Traits::kConsumerWarpgroups; ++w) mbarrier_wait(&s_.ds_ready[w][pending.buffer()], pending.phase());
    issue_dq(dq, smem_address(s_.ds[pending.buffer()]), 0);
  }

  // The first part of the pending dQ has left dq's registers: the later parts (d 192, 256) through the
  // same registers, one after the other (their waits also wait for this step's scores).
  __device__ void issue_and_emit_later_dq_parts(float (&dq)[kDq], const PendingDq& pending) {
#pragma unroll
    for (int part = 1; part < Traits::kDqPiecesMost; ++part) {
      if (part >= dq_pieces()) break;
      issue_dq(dq, smem_address(s_.ds[pending.buffer()]), part);
      wgmma_wait<0>();
      pin_registers(dq);
      emit_dq_part(dq, pending, part);
    }
  }

  // A finished part of dQ out of the registers: into the workspace (Traits::kDqFromRegisters) or into
  // this consumer's share, which reduce_dq_share adds into the workspace once every part is in.
  __device__ void emit_dq_part(const float (&dq)[kDq], const PendingDq& pending, int part) {
    if constexpr (Traits::kDqFromRegisters) {
      add_dq_from_registers(dq, pending, part);
    } else {
      stage_dq_share(dq, pending, part);
    }
  }

  // One step. Its GEMMs are issued in two turns (ping-pong with the other consumer, as in the forward:
  // one consumer's exponentials and dS run while the other's GEMMs occupy the tensor cores): the
  // previous step's dQ with this step's S^T and dP^T, then dV and dK.
  __device__ void run_step(int head, int m0, const StageRing<Traits::kStages>& ring, PendingDq& pending,
                           float (&dk)[kG], float (&dv)[kG]) {
    const int stage = ring.index();
    mbarrier_wait(&s_.q_full[stage], ring.phase());  // producer -> us: Q, dO and the row statistics landed
    clear_query_tail(stage, m0);
    float s[kS], dp[kS];
    if (pending.head >= 0) {
      float dq_own[kDq];
      // Without dP^T beside it, the dQ GEMM accumulates in dP^T's registers, which are free until dQ has
      // been staged (ptxas gives separate arrays separate registers).
      float (&dq)[kDq] = Traits::kDpBesideDq ? dq_own : *reinterpret_cast<float (*)[kDq]>(dp);
      wait_dq_share_free(pending);
      Turns::begin(true, warpgroup_);
      issue_pending_dq(dq, pending);
      issue_scores(s, smem_address(s_.k), smem_address(s_.q[stage]));
      if constexpr (Traits::kDpBesideDq) issue_scores(dp, smem_address(s_.v), smem_address(s_.dout[stage]));
      Turns::end(true, warpgroup_);
      wgmma_wait<Traits::kDpBesideDq ? 2 : 1>();  // the previous step's dQ done; S^T (and dP^T) may still run
      pin_registers(dq);
      emit_dq_part(dq, pending, 0);  // frees dq's registers for dP^T at once
      issue_and_emit_later_dq_parts(dq, pending);
      reduce_dq_share_at_once(pending);
      if constexpr (!Traits::kDpBesideDq) issue_scores(dp, smem_address(s_.v), smem_address(s_.dout[stage]));
    } else {
      Turns::begin(true, warpgroup_);
      issue_scores(s, smem_address(s_.k), smem_address(s_.q[stage]));
      issue_scores(dp, smem_address(s_.v), smem_address(s_.dout[stage]));
      Turns::end(true, warpgroup_);
    }
    const SequenceBounds& b = bounds();
    const bool masked = block_pair_needs_mask<Traits::kBlockM, Traits::kBlockN>(
        m0, block_.n_block * Traits::kBlockN, b.seqlen_q, b.seqlen_k, b.window_left, b.window_right,
        kernel_chunk<Traits>(b));
    if (p_.softcap > 0.0f) {
      wgmma_wait<1>();
      pin_registers(s);
      // The tanh in place while dP^T runs (one pass over the scores, their tanh and dP^T spilled).
#pragma unroll
      for (int i = 0; i < kS; ++i) s[i] = fast_tanh(s[i] * p_.softcap_input_scale);
      wgmma_wait<0>();
      pin_registers(dp);
      softcapped_gradients(s, dp, stage, m0, masked);
    } else {
      // The row statistics into registers: before each wait (their shared-memory latency under the
      // GEMM's) or after it (Traits::kRowStatsBeforeWaits).
      RowValues lse_log2, dout_dot_out;
      if constexpr (Traits::kRowStatsBeforeWaits) load_row_values(s_.row_stats[stage][0], lse_log2);
      wgmma_wait<1>();  // S^T done; dP^T may still run under the exponentials
      pin_registers(s);
      if constexpr (!Traits::kRowStatsBeforeWaits) load_row_values(s_.row_stats[stage][0], lse_log2);
      probabilities(s, lse_log2, m0, masked);
      if constexpr (Traits::kRowStatsBeforeWaits) load_row_values(s_.row_stats[stage][1], dout_dot_out);
      wgmma_wait<0>();
      pin_registers(dp);
      if constexpr (!Traits::kRowStatsBeforeWaits) load_row_values(s_.row_stats[stage][1], dout_dot_out);
      score_gradients(s, dp, dout_dot_out);
    }
    Fragments p_frag, ds_frag;
    to_a_fragments(s, p_frag);
    to_a_fragments(dp, ds_frag);
    // This consumer's half of dS into the step's buffer, for both consumers' dQ GEMMs of the next step,
    // before the turn: the stores are under way while we wait for it and issue, so the other consumer's
    // next turn, which waits for them (ds_ready), starts sooner. A buffer is written again two steps
    // later: by then the other consumer has issued and waited for its dQ GEMM reading it (it did so
    // before storing its own dS of the step in between, which this consumer's next step waits for).
    const PendingDq this_step{head, m0, pending.uses + 1};
    store_ds_transposed(ds_frag, smem_address(s_.ds[this_step.buffer()]));
    Turns::begin(true, warpgroup_);
    wgmma_fence();
    issue_key_gradient(dv, p_frag, smem_address(s_.dout[stage]));
    issue_key_gradient(dk, ds_frag, smem_address(s_.q[stage]));
    wgmma_commit();
    Turns::end(true, warpgroup_);
    // The turn's barrier synchronized this warpgroup: every thread's share of the previous step's dQ is
    // in shared memory (stage_dq_share). Issued after the GEMMs, which wait for all four warps.
    if constexpr (!Traits::kDqFromRegisters && !Traits::kDqReducedAtOnce && !Traits::kDqShareFencedWithDs) {
      if (pending.head >= 0) reduce_dq_share(pending);
    }

    const PendingDq handed_over = pending;
    pending = this_step;
    // Generic-proxy stores -> the async proxy: the dS for the wgmma reads of the next step (and the
    // writer's bulk reduction of the dQ share, kDqShareFencedWithDs).
    fence_proxy_async_shared();
    release_from_warp(&s_.ds_ready[warpgroup_][pending.buffer()], thread_);
    if constexpr (Traits::kDqShareFencedWithDs) {
      if (handed_over.head >= 0) reduce_dq_share(handed_over);
    }
    wgmma_wait<0>();
    pin_registers(dk);
    pin_registers(dv);
    pin_registers(p_frag);
    pin_registers(ds_frag);
    // Every GEMM reading Q and dO is done; the row statistics were read by generic loads, which the
    // producer's next TMA load (async proxy) must not overtake: proxy fence, then release.
    release_ldmatrix_reads_to_tma(&s_.q_empty[stage], thread_);
  }

  // One step at d 192 and 256 (Traits::kSplitsRoles), in run_step's two turns: consumer 0 issues S^T,
  // turns it into P^T and issues dV += P^T dO; consumer 1 issues dP^T, makes dS^T with consumer 0's P^T
  // (through p_exchange), stores dS and issues dK += dS^T Q. Each issues its pieces of the previous
  // step's dQ columns in its first turn. p_exchange needs one buffer: consumer 0 writes the next step's P^T only after its
  // next first turn, which follows consumer 1's second turn of this step, issued once its P^T reads
  // were done.
  __device__ void run_role_step(int head, int m0, const StageRing<Traits::kStages>& ring, PendingDq& pending,
                                float (&grad)[kG]) {
    const int stage = ring.index();
    const bool scores = warpgroup_ == 0;
    mbarrier_wait(&s_.q_full[stage], ring.phase());  // producer -> us: Q, dO and the row statistics landed
    clear_query_tail(stage, m0);
    const std::uint32_t keys_tile = smem_address(scores ? s_.k : s_.v);
    const std::uint32_t rows_tile = smem_address(scores ? s_.q[stage] : s_.dout[stage]);
    float acc[kS];  // S^T (consumer 0) or dP^T (consumer 1)
    if (pending.head >= 0) {
      float dq[kDq];
      wait_dq_share_free(pending);
      Turns::begin(true, warpgroup_);
      issue_pending_dq(dq, pending);
      issue_role_scores(acc, keys_tile, rows_tile, scores);
      Turns::end(true, warpgroup_);
      wgmma_wait<1>();  // the previous step's first dQ part done; acc may still run
      pin_registers(dq);
      emit_dq_part(dq, pending, 0);
      issue_and_emit_later_dq_parts(dq, pending);
      reduce_dq_share_at_once(pending);
    } else {
      Turns::begin(true, warpgroup_);
      issue_role_scores(acc, keys_tile, rows_tile, scores);
      Turns::end(true, warpgroup_);
    }
    const SequenceBounds& b = bounds();
    const bool masked = block_pair_needs_mask<Traits::kBlockM, Traits::kBlockN>(
        m0, block_.n_block * Traits::kBlockN, b.seqlen_q, b.seqlen_k, b.window_left, b.window_right,
        kernel_chunk<Traits>(b));
    Fragments frag;
    const PendingDq this_step{head, m0, pending.uses + 1};
    if (scores) {
      share_probabilities(acc, stage, m0, masked);
      to_a_fragments(acc, frag);
    } else {
      score_gradients_from_shared(acc, stage);
      to_a_fragments(acc, frag);
      store_ds_transposed(frag, smem_address(s_.ds[this_step.buffer()]));
    }
    Turns::begin(true, warpgroup_);
    // A fence and a commit in each branch: one pair around a runtime choice of the wgmma's N made ptxas
    // inject warpgroup.arrives (C7519; perf-notes v137).
    if constexpr (Traits::kHeadDimV == Traits::kHeadDim) {
      wgmma_fence();
      issue_key_gradient(grad, frag, smem_address(scores ? s_.dout[stage] : s_.q[stage]));
      wgmma_commit();
    } else if (scores) {
      wgmma_fence();
      issue_key_gradient(value_gradient(grad), frag, smem_address(s_.dout[stage]));
      wgmma_commit();
    } else {
      wgmma_fence();
      issue_key_gradient(grad, frag, smem_address(s_.q[stage]));
      wgmma_commit();
    }
    Turns::end(true, warpgroup_);
    if (!Traits::kDqFromRegisters && !Traits::kDqReducedAtOnce && pending.head >= 0) reduce_dq_share(pending);

    pending = this_step;
    fence_proxy_async_shared();  // consumer 1's dS stores -> the wgmma (async proxy) reads of the next step
    release_from_warp(&s_.ds_ready[warpgroup_][pending.buffer()], thread_);  // consumer 0's: nothing stored
    wgmma_wait<0>();
    pin_registers(grad);
    pin_registers(frag);
    release_ldmatrix_reads_to_tma(&s_.q_empty[stage], thread_);
  }

  // Consumer 0: s (raw scores S^T) -> P^T, and into p_exchange the factor consumer 1 multiplies
  // dP^T - D by: P^T, or under the softcap P^T (1 - tanh^2) (softcapped_gradients' slope); then hands
  // it over (kPReadyBarrier; the named barrier orders the shared-memory stores before consumer 1's loads).
  __device__ void share_probabilities(float (&s)[kS], int stage, int m0, bool masked) {
    float4* exchange = reinterpret_cast<float4*>(s_.p_exchange) + thread_;
    if (p_.softcap > 0.0f) {
      const float* lse_log2 = s_.row_stats[stage][0];
      wgmma_wait<0>();
      pin_registers(s);
      by_mask(masked, [&](auto kMasked) {
#pragma unroll
        for (int j = 0; j < kS / 4; ++j) {
          float factor[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = 4 * j + e;
            const float t = fast_tanh(s[i] * p_.softcap_input_scale);
            float p = fast_exp2(fmaf(t, p_.score_scale_log2, -lse_log2[accumulator_col(thread_, i)]));
            if (kMasked && !visible(i, m0)) p = 0.0f;
            s[i] = p;
            factor[e] = p * (1.0f - t * t);
          }
          exchange[j * Traits::kWarpgroupThreads] = make_float4(factor[0], factor[1], factor[2], factor[3]);
        }
      });
    } else {
      RowValues lse_log2;
      load_row_values(s_.row_stats[stage][0], lse_log2);
      wgmma_wait<0>();
      pin_registers(s);
      probabilities(s, lse_log2, m0, masked);
#pragma unroll
      for (int j = 0; j < kS / 4; ++j) exchange[j * Traits::kWarpgroupThreads] = make_float4(s[4 * j], s[4 * j + 1], s[4 * j + 2], s[4 * j + 3]);
    }
    named_barrier_arrive(Traits::kPReadyBarrier, Traits::kConsumerThreads);
  }

  // Consumer 1: dp (dP^T) -> dS^T = factor (dP^T - D), with consumer 0's factor of the step (the same
  // accumulator element of the same thread: both consumers' S^T and dP^T cover the same keys and rows).
  __device__ void score_gradients_from_shared(float (&dp)[kS], int stage) {
    RowValues dout_dot_out;
    load_row_values(s_.row_stats[stage][1], dout_dot_out);
    wgmma_wait<0>();
    pin_registers(dp);
    named_barrier_sync(Traits::kPReadyBarrier, Traits::kConsumerThreads);
    const float4* exchange = reinterpret_cast<const float4*>(s_.p_exchange) + thread_;
#pragma unroll
    for (int j = 0; j < kS / 4; ++j) {
      const float4 f = exchange[j * Traits::kWarpgroupThreads];
      const float factor[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 4 * j + e;
        dp[i] = factor[e] * (dp[i] - row_value(dout_dot_out, i));
      }
    }
  }

  // S^T (consumer 0: keys_tile K, rows_tile Q) or dP^T (consumer 1: V, dO), over q/k's or v's head dim.
  __device__ void issue_role_scores(float (&acc)[kS], std::uint32_t keys_tile, std::uint32_t rows_tile, bool scores) {
    if (Traits::kHeadDimV == Traits::kHeadDim || scores) {
      issue_scores(acc, keys_tile, rows_tile);
    } else {
      issue_scores<Traits::kDStepsV>(acc, keys_tile, rows_tile);
    }
  }

  // D(64 keys x 64 q rows) = A(64 keys of K or V, K-major) B(Q or dO, K-major) over kSteps k16 steps of
  // the head dim (K and V, Q and dO have column blocks of the same bytes), committed as one group.
  template <int kSteps = Traits::kDSteps>
  __device__ void issue_scores(float (&d)[kS], std::uint32_t keys_tile, std::uint32_t rows_tile) {
    const std::uint32_t a_base = keys_tile + first_key_in_tile() * kSwizzleBytes;
    const std::uint64_t a_desc = kmajor_descriptor(a_base), b_desc = kmajor_descriptor(rows_tile);
    constexpr bool kAdvance = Traits::kLeanAddressing;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      // 16 columns = 32 bytes; four steps per 128-byte column block.
      const int block = step / 4;
      const std::uint32_t in_row = (step % 4) * 32;
      const std::uint64_t desc_a = kmajor_descriptor_at<kAdvance>(a_desc, a_base, block * KTile::kColumnBlockBytes + in_row);
      const std::uint64_t desc_b =
          kmajor_descriptor_at<kAdvance>(b_desc, rows_tile, block * QTile::kColumnBlockBytes + in_row);
      wgmma_ss<Traits::kBlockM, Traits::kIsBf16>(d, desc_a, desc_b, step > 0);
    }
    wgmma_commit();
  }

  // This warpgroup's K and V rows past the keys its sequence uses, zeroed before any GEMM reads them
  // (key_tail.cuh); no stores in a block that lies within the keys. The barrier runs in every CTA:
  // inside the branch it made ptxas spill at head dim 128.
  __device__ void clear_key_tail() {
    const int first_row = bounds().seqlen_k - key0_;
    if (first_row < Traits::kKeysPerWarpgroup) clear_key_rows<Traits>(s_, first_row, warpgroup_, thread_);
    wait_key_rows_cleared<Traits>(warpgroup_);
  }

  // With seqused_q (the kernels for it: Traits::kChunksAndSequsedQ), the stage's Q and dO rows past the
  // sequence's q rows in use, zeroed before any GEMM reads them (query_tail.cuh); the test is uniform
  // over both consumers, which take the same steps, so both reach the clear's barrier. No stores in a
  // step whose q block lies within the rows.
  __device__ void clear_query_tail(int stage, int m0) {
    if constexpr (Traits::kChunksAndSequsedQ) {
      const int first_row = bounds().seqlen_q - m0;
      if (p_.seqused_q != nullptr && first_row < Traits::kBlockM) {
        clear_query_rows<Traits>(s_, stage, first_row, warpgroup_, thread_);
      }
    }
  }

  // This consumer's first key row in the K and V tiles.
  __device__ int first_key_in_tile() const {
    return Traits::kSplitsRoles ? 0 : warpgroup_ * Traits::kKeysPerWarpgroup;
  }

  // What the step list and masks see. Through this accessor rather than seq_.bounds at each use: ptxas
  // then keeps the masks' bounds out of the per-element code (v58: 64 more constant loads and byte
  // permutes per step written the other way, and 3% slower at d 64).
  __device__ const SequenceBounds& bounds() const { return seq_.bounds; }

  // Key of accumulator i of this thread (its q row within the block is accumulator_col(thread_, i)).
  __device__ int key_of(int i) const { return key0_ + accumulator_row(thread_, i); }

  // Keys past seqlen_k (the sequence's keys in use), outside the window or outside the row's chunk are
  // hidden; q rows past its seqlen_q need no mask (their P is 0 through the row statistics, their
  // scores finite: query_tail.cuh). The tests are combined bitwise, not by early returns: ptxas compiled
  // those into branches around every element of a masked step (perf-notes v96).
  __device__ bool visible(int i, int m0) const {
    const SequenceBounds& b = bounds();
    // A window side that is off: no key is further than this from the diagonal (|key - diagonal| <
    // 2^31 - 1 for any int32 lengths).
    constexpr int kUnbounded = std::numeric_limits<int>::max();
    const int right = b.window_right >= 0 ? b.window_right : kUnbounded;
    const int left = b.window_left >= 0 ? b.window_left : kUnbounded;
    const int key = key_of(i);
    const int diagonal = m0 + accumulator_col(thread_, i) + b.seqlen_k - b.seqlen_q;
    const int past_diagonal = key - diagonal;
    bool in_chunk = true;
    if (const int chunk = kernel_chunk<Traits>(b); chunk > 0) {
      const int first = chunk_first_key(diagonal, chunk);
      in_chunk = (key >= first) & (key < first + chunk);
    }
    return (key < b.seqlen_k) & (past_diagonal <= right) & (past_diagonal >= -left) & in_chunk;
  }

  // A row statistic of each q row (accumulator column) this thread holds: accumulator i's is
  // value[i / 4 * 2 + i % 2] (columns 8 (i / 4) + 2 (thread % 4) + i % 2).
  static constexpr int kRowValues = kS / 2;
  using RowValues = float[kRowValues];
  __device__ void load_row_values(const float* stats, RowValues& value) const {
#pragma unroll
    for (int j = 0; j < kRowValues / 2; ++j) {
      const float2 pair = *reinterpret_cast<const float2*>(stats + accumulator_col(thread_, 4 * j));
      value[2 * j] = pair.x;
      value[2 * j + 1] = pair.y;
    }
  }
  __device__ static float row_value(const RowValues& value, int i) { return value[i / 4 * 2 + i % 2]; }

  // s: raw scores -> P^T. Rows past seqlen_q and rows that saw no key have lse_log2 = +inf (P = 0).
  __device__ void probabilities(float (&s)[kS], const RowValues& lse_log2, int m0, bool masked) {
    by_mask(masked, [&](auto kMasked) {
#pragma unroll
      for (int i = 0; i < kS; ++i) {
        const float p = fast_exp2(fmaf(s[i], p_.score_scale_log2, -row_value(lse_log2, i)));
        s[i] = kMasked && !visible(i, m0) ? 0.0f : p;
      }
    });
  }

  // f(std::true_type) in a step whose block pair needs the mask, f(std::false_type) otherwise: one
  // branch on the step's (uniform) `masked` instead of a test per element, which ptxas compiled into
  // a branch around each element's exponential and mask, so that no two exponentials interleaved
  // (perf-notes v94).
  template <class F>
  __device__ static void by_mask(bool masked, F&& f) {
    if (masked) {
      f(std::true_type{});
    } else {
      f(std::false_type{});
    }
  }

  // dp: dP^T -> dS^T = P^T (dP^T - D).
  __device__ void score_gradients(const float (&p)[kS], float (&dp)[kS], const RowValues& dout_dot_out) {
#pragma unroll
    for (int i = 0; i < kS; ++i) dp[i] = p[i] * (dp[i] - row_value(dout_dot_out, i));
  }

  // Both at once under the softcap, where s holds the scores t = tanh(raw * softmax_scale / softcap) and
  // the gradient of the raw score carries the tanh's slope 1 - t^2 (the factor softmax_scale comes later).
  __device__ void softcapped_gradients(float (&s)[kS], float (&dp)[kS], int stage, int m0, bool masked) {
    const float* lse_log2 = s_.row_stats[stage][0];
    const float* dout_dot_out = s_.row_stats[stage][1];
    const auto gradients = [&](auto kMasked) {
#pragma unroll
      for (int i = 0; i < kS; ++i) {
        const int column = accumulator_col(thread_, i);
        const float t = s[i];
        float p = fast_exp2(fmaf(t, p_.score_scale_log2, -lse_log2[column]));
        if (kMasked && !visible(i, m0)) p = 0.0f;
        s[i] = p;
        dp[i] = p * (dp[i] - dout_dot_out[column]) * (1.0f - t * t);
      }
    };
    by_mask(masked, gradients);
  }

  // Consumer 0's dV (Traits::kSplitsRoles): the first kGv registers of its gradient, v's columns; the
  // rest stay 0 (dK of consumer 1 takes all kG).
  __device__ static float (&value_gradient(float (&grad)[kG]))[kGv] { return *reinterpret_cast<float(*)[kGv]>(grad); }
  __device__ static const float (&value_gradient(const float (&grad)[kG]))[kGv] {
    return *reinterpret_cast<const float(*)[kGv]>(grad);
  }

  __device__ static void to_a_fragments(const float (&acc)[kS], Fragments& frag) {
#pragma unroll
    for (int step = 0; step < kQSteps; ++step) {
#pragma unroll
      for (int j = 0; j < 4; ++j) frag[step][j] = pack_pair<Traits::kIsBf16>(acc[8 * step + 2 * j], acc[8 * step + 2 * j + 1]);
    }
  }

  // grad(64 keys x its columns) += A(64 keys x 64 q rows, registers) B(dO or Q: q rows x those columns,
  // MN-major; Q and dO have column blocks of the same bytes).
  template <int kRegisters>
  __device__ void issue_key_gradient(float (&grad)[kRegisters], const Fragments& a, std::uint32_t rows_tile) {
    const std::uint32_t b_base = rows_tile;
    const std::uint64_t b_desc = mnmajor_descriptor(b_base, QTile::kColumnBlockBytes);
#pragma unroll
    for (int step = 0; step < kQSteps; ++step) {
      // 16 q rows = 16 rows of 128 bytes down every column block.
      const std::uint64_t desc_b = mnmajor_descriptor_at<Traits::kLeanAddressing>(
          b_desc, b_base, step * 16 * kSwizzleBytes, QTile::kColumnBlockBytes);
      wgmma_rs<2 * kRegisters, Traits::kIsBf16>(grad, a[step], desc_b, 1);
    }
  }

  // ds (A fragments of dS^T: keys x q rows) -> the dS tile (q rows x keys). Matrix i of step k is keys
  // 8 (i % 2) .. + 7 of the warp's 16 by q rows 16 k + 8 (i / 2) .. + 7; stored transposed, each lane
  // addresses one q row's 16 bytes of those keys.
  __device__ void store_ds_transposed(const Fragments& ds, std::uint32_t ds_tile) const {
    const int lane = thread_ % 32, matrix = lane / 8;
    const int key = first_key_in_tile() + 16 * (thread_ / 32) + 8 * (matrix % 2);
#pragma unroll
    for (int step = 0; step < kQSteps; ++step) {
      const int row = 16 * step + 8 * (matrix / 2) + lane % 8;
      stmatrix_x4_trans(ds_tile + DsTile::offset(row, key), ds[step]);
    }
  }

  // Part `part` (a piece: Traits::kDqPieceCols) of this warpgroup's columns of dQ (64 q rows) = dS (64 q
  // rows x kBlockN keys, K-major) K (MN-major).
  __device__ void issue_dq(float (&dq)[kDq], std::uint32_t ds_tile, int part) {
    const int first_col = (dq_first_piece() + part) * Traits::kDqPieceCols;
    const std::uint32_t k_base = smem_address(s_.k) + (first_col / KTile::kColsPerBlock) * KTile::kColumnBlockBytes +
                                 (first_col % KTile::kColsPerBlock) * Traits::kElementBytes;
    const std::uint64_t a_desc = kmajor_descriptor(ds_tile);
    const std::uint64_t b_desc = mnmajor_descriptor(k_base, KTile::kColumnBlockBytes);
    constexpr bool kAdvance = Traits::kLeanAddressing;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Traits::kKeySteps; ++step) {
      const int block = step / 4;
      const std::uint32_t in_row = (step % 4) * 32;
      const std::uint64_t desc_a =
          kmajor_descriptor_at<kAdvance>(a_desc, ds_tile, block * DsTile::kColumnBlockBytes + in_row);
      const std::uint64_t desc_b =
          mnmajor_descriptor_at<kAdvance>(b_desc, k_base, step * 16 * kSwizzleBytes, KTile::kColumnBlockBytes);
      wgmma_ss<Traits::kDqPieceCols, Traits::kIsBf16, /*kBMNMajor=*/true>(dq, desc_a, desc_b, step > 0);
    }
    wgmma_commit();
  }

  // Thread 0 of each consumer issues the reductions of its dQ share and waits for them; in the
  // deterministic kernels its writer does (dq_writer.cuh), and each warp hands its part of the share over.
  __device__ bool issues_dq_reductions() const { return !Traits::kDeterministic && thread_ == 0; }

  // A step's dQ share leaves in three parts:
  //   1. before turn 1, thread 0 waits until the reduction that last read the step's buffer (two steps
  //      back: kDqBuffers) is done reading, so that this wait finds it finished; the turn's named
  //      barrier tells the warpgroup;
  //   2. after the dQ GEMM, every thread stores its accumulators into the share;
  //   3. thread 0 adds the share into the workspace by one bulk reduction, which runs while the
  //      consumer goes on: after turn 2, whose barrier synchronized the warpgroup, or
  //      (Traits::kDqReducedAtOnce) at once, behind a named barrier of its own. In deterministic
  //      kernels each warp hands its stores to the writer there instead (dq_staged counts the four
  //      warps, with no named barrier: +1.5-3.5% at d 64, perf-notes v101), at d 64 / 128 only after
  //      the next dS stores, whose proxy fence then covers the share's (kDqShareFencedWithDs), and
  //      thread 0 in part 1 waits for the writer's dq_free.
  __device__ void wait_dq_share_free(const PendingDq& pending) const {
    if constexpr (Traits::kDeterministic) {
      // The buffer's previous use is kDqBuffers steps back; its first use waits for nothing (the
      // parity of the phase before the barrier's first).
      if (thread_ == 0) {
        mbarrier_wait(&s_.dq_free[warpgroup_][pending.buffer_of_dq()], ((pending.uses / Traits::kDqBuffers) % 2) ^ 1);
      }
    } else if constexpr (!Traits::kDqFromRegisters) {
      if (issues_dq_reductions()) tma_store_wait_read<Traits::kDqBuffers - 1>();
    }
  }

  // Without the share: every thread adds its dQ accumulators into the workspace (in the share's
  // order), four at a time.
  __device__ void add_dq_from_registers(const float (&dq)[kDq], const PendingDq& pending, int part) const {
    const std::int64_t row = workspace_row<Traits::kBlockM>(p_, seq_, pending.head, pending.m0);
    float* share = p_.dq_accum + row * Traits::kHeadDim + (dq_first_piece() + part) * kDqPieceFloats;
#pragma unroll
    for (int j = 0; j < kDq / 4; ++j) {
      red_add_f32x4(share + (j * Traits::kWarpgroupThreads + thread_) * 4, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2],
                    dq[4 * j + 3]);
    }
  }

  __device__ int dq_first_piece() const { return Traits::dq_first_piece(warpgroup_); }
  __device__ int dq_pieces() const { return Traits::dq_pieces(warpgroup_); }
  static constexpr int kDqPieceFloats = Traits::kDqPieceFloats;
  __device__ float* dq_share(const PendingDq& pending) const {
    return s_.dq[pending.buffer_of_dq()] + dq_first_piece() * kDqPieceFloats;
  }

  __device__ void stage_dq_share(const float (&dq)[kDq], const PendingDq& pending, int part) const {
    float* share = dq_share(pending) + part * kDqPieceFloats;
#pragma unroll
    for (int j = 0; j < kDq / 4; ++j) {
      *reinterpret_cast<float4*>(share + (j * Traits::kWarpgroupThreads + thread_) * 4) =
          make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
    }
    // Generic-proxy stores -> the bulk reduction (async proxy); run_step's fence after the dS stores
    // covers them where the hand-over waits for it.
    if constexpr (!Traits::kDqShareFencedWithDs) fence_proxy_async_shared();
  }

  // Before thread 0 reduces the share: every thread's stores in (a named barrier of the warpgroup's own).
  // The deterministic kernels' writer counts the warps' arrivals instead (reduce_dq_share), so that no
  // warp waits for the others there.
  __device__ void sync_dq_share() const {
    if constexpr (!Traits::kDeterministic) {
      named_barrier_sync(Traits::kDqShareBarrierBase + warpgroup_, Traits::kWarpgroupThreads);
    }
  }

  // Traits::kDqReducedAtOnce: the share leaves right after the step's dQ parts are stored.
  __device__ void reduce_dq_share_at_once(const PendingDq& pending) const {
    if constexpr (!Traits::kDqFromRegisters && Traits::kDqReducedAtOnce) {
      sync_dq_share();
      reduce_dq_share(pending);
    }
  }

  __device__ void reduce_dq_share(const PendingDq& pending) const {
    if constexpr (Traits::kDeterministic) {
      release_from_warp(&s_.dq_staged[warpgroup_][pending.buffer_of_dq()], thread_);  // each warp -> writer
    } else if (issues_dq_reductions()) {
      const std::int64_t row = workspace_row<Traits::kBlockM>(p_, seq_, pending.head, pending.m0);
      bulk_reduce_add_f32(p_.dq_accum + row * Traits::kHeadDim + dq_first_piece() * kDqPieceFloats,
                          dq_share(pending), dq_pieces() * kDqPieceFloats * sizeof(float));
      tma_store_commit();
    }
  }

  // The gradients through shared memory and TMA where the CTA's whole key block lies within its
  // sequence's stored keys (its rows end no later than the tensor map's, which for a packed dk/dv is only
  // the last sequence's end; the others store through registers). Writing 64 x d gradients from the
  // accumulators by 4-byte stores took about 13k cycles a CTA on the H200 (d 128: 28% of a 512-token CTA;
  // each warp store touches 8 rows), which held the SM from the next CTA (perf-notes v117).
  __device__ bool stores_gradient_tiles() const {
    if constexpr (!Traits::kGradientsByTma) return false;
    return (block_.n_block + 1) * Traits::kBlockN <= seq_.key_rows;
  }

  // The gradients go to the K and V tiles, in the layout TMA loaded K and V in, once neither consumer
  // reads them (kKvFreeBarrier: after both have waited for their last dQ GEMM, which reads all of K).
  // dK (times softmax_scale) into this consumer's K rows, dV into its V rows.
  __device__ void store_gradient_tiles(const float (&dk)[kG], const float (&dv)[kG], const GradientMaps& maps) const {
    named_barrier_sync(Traits::kKvFreeBarrier, Traits::kConsumerThreads);
    write_gradient_rows(dk, p_.softmax_scale, smem_address(s_.k));
    write_gradient_rows(dv, 1.0f, smem_address(s_.v));
    issue_gradient_stores([&](std::uint32_t offset, int col, int row) {
      tma_store_4d(maps.dk, s_.k + offset, col, row, block_.kv_head, seq_.rows.k_batch);
      tma_store_4d(maps.dv, s_.v + offset, col, row, block_.kv_head, seq_.rows.k_batch);
    });
  }

  // Traits::kSplitsRoles: consumer 0's dV into the V tile, consumer 1's dK (times softmax_scale) into the
  // K tile.
  __device__ void store_role_gradient_tile(const float (&grad)[kG], const GradientMaps& maps) const {
    const bool is_dk = warpgroup_ == 1;
    named_barrier_sync(Traits::kKvFreeBarrier, Traits::kConsumerThreads);
    if constexpr (Traits::kHeadDimV == Traits::kHeadDim) {
      write_gradient_rows(grad, is_dk ? p_.softmax_scale : 1.0f, smem_address(is_dk ? s_.k : s_.v));
      issue_gradient_stores([&](std::uint32_t offset, int col, int row) {
        tma_store_4d(is_dk ? maps.dk : maps.dv, (is_dk ? s_.k : s_.v) + offset, col, row, block_.kv_head,
                     seq_.rows.k_batch);
      });
    } else if (is_dk) {
      write_gradient_rows(grad, p_.softmax_scale, smem_address(s_.k));
      issue_gradient_stores([&](std::uint32_t offset, int col, int row) {
        tma_store_4d(maps.dk, s_.k + offset, col, row, block_.kv_head, seq_.rows.k_batch);
      });
    } else {  // dV: v's columns, in the V tile of their width
      write_gradient_rows<VTile>(value_gradient(grad), 1.0f, smem_address(s_.v));
      issue_gradient_stores<VTile>([&](std::uint32_t offset, int col, int row) {
        tma_store_4d(maps.dv, s_.v + offset, col, row, block_.kv_head, seq_.rows.k_batch);
      });
    }
  }

  // This consumer's 64 rows of a gradient, times scale, into its rows of a K/V-shaped tile (as the
  // forward's O: store_accumulator_rows).
  template <class Tile = KTile, int kRegisters>
  __device__ void write_gradient_rows(const float (&grad)[kRegisters], float scale, std::uint32_t tile) const {
    const float row_scale[2] = {scale, scale};
    store_accumulator_rows<Tile, Traits::kIsBf16>(tile, first_key_in_tile(), thread_, grad, row_scale);
  }

  // Once the warpgroup's rows are written, thread 0 issues store(byte offset in the tile, first column,
  // first row of dk/dv) for each 64-column block of its rows (columns past head_dim and rows past the
  // tensor's end are not written: the maps end there).
  template <class Tile = KTile, class Store>
  __device__ void issue_gradient_stores(Store&& store) const {
    fence_proxy_async_shared();  // our generic stores -> the TMA unit's (async proxy) reads
    named_barrier_sync(Traits::kGradRowsBarrierBase + warpgroup_, Traits::kWarpgroupThreads);
    if (thread_ != 0) return;
    const int row = seq_.rows.k_row0 + key0_;
#pragma unroll
    for (int block = 0; block < Tile::kColumnBlocks; ++block) {
      store(block * Tile::kColumnBlockBytes + first_key_in_tile() * kSwizzleBytes, block * Tile::kColsPerBlock, row);
    }
    tma_store_commit();
    tma_store_wait_all();  // the stores read shared memory until they finish; the CTA ends after this
  }

  // dK (times softmax_scale) and dV of this warpgroup's keys that exist, through registers: every key
  // row stored for the sequence (key_rows), so those past the keys it uses get their 0; no column past
  // k's head dim in dk or v's in dv (a pair never straddles one: both are even).
  __device__ void store_gradients(const float (&dk)[kG], const float (&dv)[kG]) const {
    Element* dk_out = gradient_rows(p_.dk, p_.dk_batch_stride, p_.dk_row_stride, p_.dk_head_stride);
    Element* dv_out = gradient_rows(p_.dv, p_.dv_batch_stride, p_.dv_row_stride, p_.dv_head_stride);
    for_each_stored_pair(p_.head_dim, [&](int i, int key, int col) {
      *reinterpret_cast<std::uint32_t*>(dk_out + key * p_.dk_row_stride + col) =
          pack_pair<Traits::kIsBf16>(dk[i] * p_.softmax_scale, dk[i + 1] * p_.softmax_scale);
    });
    for_each_stored_pair(p_.head_dim_v, [&](int i, int key, int col) {
      *reinterpret_cast<std::uint32_t*>(dv_out + key * p_.dv_row_stride + col) =
          pack_pair<Traits::kIsBf16>(dv[i], dv[i + 1]);
    });
  }

  // Traits::kSplitsRoles: consumer 0 stores dV, consumer 1 dK (times softmax_scale).
  __device__ void store_role_gradient(const float (&grad)[kG]) const {
    const bool is_dk = warpgroup_ == 1;
    const std::int64_t row_stride = is_dk ? p_.dk_row_stride : p_.dv_row_stride;
    Element* out = is_dk ? gradient_rows(p_.dk, p_.dk_batch_stride, row_stride, p_.dk_head_stride)
                         : gradient_rows(p_.dv, p_.dv_batch_stride, row_stride, p_.dv_head_stride);
    const float scale = is_dk ? p_.softmax_scale : 1.0f;
    for_each_stored_pair(is_dk ? p_.head_dim : p_.head_dim_v, [&](int i, int key, int col) {
      *reinterpret_cast<std::uint32_t*>(out + key * row_stride + col) =
          pack_pair<Traits::kIsBf16>(grad[i] * scale, grad[i + 1] * scale);
    });
  }

  using Element = typename Traits::Element;
  // Row 0 of this CTA's sequence and K/V head in dk or dv.
  __device__ Element* gradient_rows(void* out, std::int64_t batch_stride, std::int64_t row_stride,
                                    std::int64_t head_stride) const {
    return static_cast<Element*>(out) + seq_.rows.k_batch * batch_stride + seq_.rows.k_row0 * row_stride +
           block_.kv_head * head_stride;
  }

  // store(i, key, col) for each accumulator pair (i, i + 1) of a gradient that has a place in the output
  // (whose rows have `cols` columns).
  template <class Store>
  __device__ void for_each_stored_pair(int cols, Store&& store) const {
#pragma unroll
    for (int i = 0; i < kG; i += 2) {
      const int key = key_of(i);
      if (key >= seq_.key_rows) continue;
      const int col = accumulator_col(thread_, i);
      if (col >= cols) continue;
      store(i, key, col);
    }
  }

  typename Traits::SharedStorage& s_;
  const BwdParams& p_;
  const KeyBlock block_;
  const BwdSequence seq_;
  const int warpgroup_;
  const int thread_;
  const int key0_;  // first key of this warpgroup's 64
};

}  // namespace hopattn::sm90
