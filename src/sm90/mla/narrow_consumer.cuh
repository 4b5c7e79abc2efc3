// An MLA consumer warpgroup of a narrow tile (mla/narrow_traits.cuh): warpgroup w takes the split's key
// blocks w, w + 2, ... through ring stage w, each with S^T = [K V] [Q QV]^T, the column (query row)
// softmax and O^T += V^T P^T; its first thread loads block i + 2 once block i's P V has read the stage.
// At the end both warpgroups' O^T and statistics meet in shared memory and leave, merged, as rows.
//
// Thread t = 32 w + l of a warpgroup holds, per 8-row group j of the N = kRows query rows, the
// accumulators of keys (or v's columns) 16 w + l / 4 (+ 8) for query rows 8 j + 2 (l % 4) + {0, 1}:
// kRows / 4 query rows a thread, reduced over the warpgroup as fwd/transposed_columns.cuh says.
#pragma once

#include <cmath>
#include <cstdint>

#include "sm90/arch/convert.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/shared_access.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/fwd/transposed_columns.cuh"
#include "sm90/mla/params.hpp"
#include "sm90/mla/producer.cuh"
#include "sm90/mla/q_tile.cuh"
#include "sm90/mla/tile.cuh"
#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <class Traits>
class MlaNarrowConsumer {
  using Element = typename Traits::Element;
  static constexpr int kRows = Traits::kBlockM;
  static constexpr int kS = kRows / 2;     // S^T (then P^T) accumulators a thread: m64 x kRows
  using Columns = TransposedColumns<kRows>;
  static constexpr int kCols = Columns::kPerThread;  // query rows a thread holds
  static constexpr int kDimTiles = Traits::kDimTiles;
  static constexpr int kCB = Traits::kColumnBlockBytes;

 public:
  __device__ MlaNarrowConsumer(typename Traits::SharedStorage& s, const MlaParams& p, const MlaTile& t, int warpgroup,
                               KvMaps maps)
      : s_(s), p_(p), t_(t), warpgroup_(warpgroup), thread_(threadIdx.x % Traits::kWarpgroupThreads), maps_(maps) {}

  // By thread 0 before the CTA's first __syncthreads. A stage is refilled by its own warpgroup once that
  // warpgroup's P V has read it, so no barrier says it is empty.
  __device__ static void init_barriers(typename Traits::SharedStorage& s) {
    for (int i = 0; i < Traits::kStages; ++i) mbarrier_init(&s.kv_full[i], 1);
  }

  __device__ void run() {
    const int blocks = t_.block_end - t_.block_begin;
    if (thread_ == 0 && warpgroup_ < blocks) load_kv_block<Traits>(s_, maps_.k, maps_.v, p_, t_, warpgroup_);
    __syncwarp();  // bar.sync is .aligned: the warp reconverges after its first thread's loads
    load_mla_q_tile<Traits>(s_.q, p_, t_, threadIdx.x);
#pragma unroll
    for (int c = 0; c < kCols; ++c) col_max_[c] = -INFINITY, col_sum_[c] = 0.0f;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int i = 0; i < kS; ++i) ot_[d][i] = 0.0f;
    }
    // The first key each of this thread's query rows may not see, and the first some row may not.
    int mask_from[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) mask_from[c] = mla_first_masked_key(p_, t_, mla_row(p_, t_, query_row(c), kRows));
    const int tile_mask_from = mla_first_masked_key(p_, t_, mla_row(p_, t_, 0, kRows));

    const int stage = warpgroup_;
    for (int i = warpgroup_; i < blocks; i += Traits::kStages) {
      mbarrier_wait(&s_.kv_full[stage], (i / Traits::kStages) & 1);
      issue_scores(stage);
      wgmma_wait<0>();
      pin_registers(st_);
      const int n0 = (t_.block_begin + i) * Traits::kBlockN;
      if (n0 + Traits::kBlockN > tile_mask_from) mask_scores(n0, mask_from);
      update_softmax();
      if (n0 + Traits::kBlockN > t_.seqlen_k) zero_v_tail(stage, t_.seqlen_k - n0);
      store_probabilities();
      issue_output(stage);
      wgmma_wait<0>();
      pin_output();
      if (i + Traits::kStages < blocks) {
        named_barrier_sync(barrier(), Traits::kWarpgroupThreads);  // every warp's P V has read the stage
        if (thread_ == 0) load_kv_block<Traits>(s_, maps_.k, maps_.v, p_, t_, i + Traits::kStages);
        __syncwarp();
      }
    }
    match_barrier_counts(blocks);
    leave_for_merge();
    named_barrier_sync(Traits::kMergeBarrier, Traits::kThreads);
    merge_and_store();
  }

 private:
  __device__ int barrier() const { return Traits::kWarpgroupBarrierBase + warpgroup_; }

  // The warpgroup that took fewer blocks passes its own barrier as often as the other passed theirs.
  // The hardware needs none of it; compute-sanitizer's racecheck does: with unequal counts it reported
  // the merge's reads of the other warpgroup's rows as racing their writes across the CTA barrier, and
  // with equal counts nothing (perf-notes v148). A few barriers of a warpgroup that would wait for the
  // other anyway. Per block of run()'s loop: the column exchange (update_softmax), P^T's publication
  // and, after every block but the warpgroup's last, the stage's release: keep the count in step with
  // the loop.
  __device__ void match_barrier_counts(int blocks) const {
    const auto barriers_of = [blocks](int warpgroup) {
      const int own_blocks = blocks > warpgroup ? (blocks - warpgroup + Traits::kStages - 1) / Traits::kStages : 0;
      return own_blocks > 0 ? 3 * own_blocks - 1 : 0;
    };
    const int missing = max(barriers_of(0), barriers_of(1)) - barriers_of(warpgroup_);
    for (int k = 0; k < missing; ++k) named_barrier_sync(barrier(), Traits::kWarpgroupThreads);
  }

  // The tile row (query column) of this thread's c-th query row, and the slot of accumulator i.
  __device__ int query_row(int c) const { return Columns::column(thread_, c); }
  __device__ static constexpr int slot(int i) { return 2 * (i / 4) + i % 2; }

  // S^T = [K V] [Q QV]^T: 36 k16 steps, both operands K-major from shared memory, one commit group.
  __device__ void issue_scores(int stage) {
    const std::uint32_t kv = smem_address(s_.kv[stage]), q = smem_address(s_.q);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Traits::kSSteps; ++step) {
      const std::uint32_t in_row = (step % 4) * 32;  // 16 columns = 32 bytes
      wgmma_ss<kRows, Traits::kIsBf16>(st_, kmajor_descriptor(kv + (step / 4) * kCB + in_row),
                                       kmajor_descriptor(q + (step / 4) * Traits::QTile::kColumnBlockBytes + in_row),
                                       step > 0);
    }
    wgmma_commit();
  }

  // O^T += V^T P^T: per m64 tile d of v's columns, 4 k16 steps over the block's keys (V MN-major from
  // the stage, P^T K-major from this warpgroup's P tile), one commit group.
  __device__ void issue_output(int stage) {
    const std::uint32_t v = smem_address(s_.kv[stage]) + Traits::kVFirstColumnBlock * kCB;
    const std::uint32_t pt = smem_address(s_.p[warpgroup_]);
    wgmma_fence();
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int step = 0; step < Traits::kPSteps; ++step) {
        wgmma_ss<kRows, Traits::kIsBf16, /*kBMNMajor=*/false, /*kAMNMajor=*/true>(
            ot_[d], mnmajor_descriptor(v + d * kCB + step * 16 * kSwizzleBytes, kCB), kmajor_descriptor(pt + step * 32), 1);
      }
    }
    wgmma_commit();
  }

  __device__ void pin_output() {
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) pin_registers(ot_[d]);
  }

  __device__ void mask_scores(int n0, const int (&mask_from)[kCols]) {
#pragma unroll
    for (int i = 0; i < kS; ++i) {
      if (n0 + accumulator_row(thread_, i) >= mask_from[slot(i)]) st_[i] = -INFINITY;
    }
  }

  // values[c] (one per thread and query row) reduced with op over the warpgroup, through this
  // warpgroup's exchange slots (rewritten only after its next barrier: store_probabilities' or the
  // merge's).
  template <typename Op>
  __device__ void reduce_columns(float (&values)[kCols], Op op) {
    Columns::reduce(values, smem_address(s_.exchange[warpgroup_]), thread_, barrier(), op);
  }

  // One block of the online softmax over raw scores (as OnlineSoftmax): the query rows' new max, the
  // scores turned into probabilities and added to the thread's partial sums, O^T rescaled.
  __device__ void update_softmax() {
    float block_max[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) block_max[c] = -INFINITY;
#pragma unroll
    for (int i = 0; i < kS; ++i) block_max[slot(i)] = fmaxf(block_max[slot(i)], st_[i]);
    reduce_columns(block_max, MaxOp{});
    float factor[kCols], bias[kCols];
    step_column_softmax(col_max_, col_sum_, block_max, p_.scale_log2, factor, bias);
#pragma unroll
    for (int i = 0; i < kS; ++i) {
      st_[i] = fast_exp2(fmaf(st_[i], p_.scale_log2, bias[slot(i)]));
      col_sum_[slot(i)] += st_[i];
    }
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int i = 0; i < kS; ++i) ot_[d][i] *= factor[slot(i)];
    }
  }

  // V rows past the sequence's keys zeroed (zero_v_rows_past_keys), all of v's columns: this warpgroup's
  // P V reads them all. Fenced and published by store_probabilities' barrier.
  __device__ void zero_v_tail(int stage, int live_keys) {
    zero_v_rows_past_keys<Traits>(smem_address(s_.kv[stage]) + Traits::kVFirstColumnBlock * kCB, live_keys, kDimTiles,
                                  thread_, Traits::kWarpgroupThreads);
  }

  // P^T into this warpgroup's P tile (query rows x keys, K-major): a warp's 16 keys of 8 query rows are
  // two 8 x 8 matrices (keys x rows) of its accumulators, stored transposed; one stmatrix x4 takes two
  // such row groups. Lanes 8m .. 8m + 7 address matrix m's rows.
  __device__ void store_probabilities() {
    const int lane = thread_ % 32, matrix = lane / 8, warp = thread_ / 32;
    const std::uint32_t pt = smem_address(s_.p[warpgroup_]);
#pragma unroll
    for (int pair = 0; pair < kRows / 16; ++pair) {
      std::uint32_t in[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int i = 4 * (2 * pair + m / 2) + 2 * (m % 2);
        in[m] = pack_pair<Traits::kIsBf16>(st_[i], st_[i + 1]);
      }
      const int row = 8 * (2 * pair + matrix / 2) + lane % 8, key = 16 * warp + 8 * (matrix % 2);
      stmatrix_x4_trans(pt + Traits::PTile::offset(row, key), in);
    }
    fence_proxy_async_shared();  // generic-proxy stores (P^T, a zeroed V tail) -> the wgmma's reads
    named_barrier_sync(barrier(), Traits::kWarpgroupThreads);
  }

  // This warpgroup's O^T into its own stage as rows of floats (both its P V and its loads are done),
  // and its rows' max and whole sums into the statistics slots.
  __device__ void leave_for_merge() {
    float total[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) total[c] = col_sum_[c];
    reduce_columns(total, SumOp{});
    if (thread_ < 4) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        s_.col_max[warpgroup_][query_row(c)] = col_max_[c];
        s_.col_sum[warpgroup_][query_row(c)] = total[c];
      }
    }
    float* rows = reinterpret_cast<float*>(s_.kv[warpgroup_]);
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
      for (int i = 0; i < kS; ++i)
        rows[accumulator_col(thread_, i) * Traits::kMergeStride + 64 * d + accumulator_row(thread_, i)] = ot_[d][i];
    }
  }

  // Both warpgroups' halves merged, 8 columns a thread: out (or the split's partials) = (2^(m0 - m) O0 +
  // 2^(m1 - m) O1) / L with L the sums weighed alike, and LSE. A row that saw no key stores 0 and LSE
  // -inf.
  __device__ void merge_and_store() {
    constexpr int kChunks = Traits::kHeadDimV / 8;
    const float* rows0 = reinterpret_cast<const float*>(s_.kv[0]);
    const float* rows1 = reinterpret_cast<const float*>(s_.kv[1]);
    const std::int64_t first_partial = mla_partial_index(p_, t_.index, t_.split, kRows, 0);
    for (int idx = threadIdx.x; idx < kRows * kChunks; idx += Traits::kThreads) {
      const int r = idx / kChunks, col = idx % kChunks * 8;
      const MlaRow row = mla_row(p_, t_, r, kRows);
      if (!row.live) continue;
      const float m = fmaxf(s_.col_max[0][r], s_.col_max[1][r]);
      const float m_scaled = m == -INFINITY ? 0.0f : m * p_.scale_log2;
      const float w0 = fast_exp2(s_.col_max[0][r] * p_.scale_log2 - m_scaled);
      const float w1 = fast_exp2(s_.col_max[1][r] * p_.scale_log2 - m_scaled);
      const float sum = s_.col_sum[0][r] * w0 + s_.col_sum[1][r] * w1;
      const float inv_sum = sum == 0.0f ? 0.0f : __fdividef(1.0f, sum);
      const float a0 = w0 * inv_sum, a1 = w1 * inv_sum;
      float o[8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 x = *reinterpret_cast<const float4*>(rows0 + r * Traits::kMergeStride + col + 4 * h);
        const float4 y = *reinterpret_cast<const float4*>(rows1 + r * Traits::kMergeStride + col + 4 * h);
        o[4 * h + 0] = a0 * x.x + a1 * y.x;
        o[4 * h + 1] = a0 * x.y + a1 * y.y;
        o[4 * h + 2] = a0 * x.z + a1 * y.z;
        o[4 * h + 3] = a0 * x.w + a1 * y.w;
      }
      const float lse = sum == 0.0f ? -INFINITY : (m_scaled + __log2f(sum)) * 0.69314718055994531f;
      if (p_.splits > 1) {
        float* partial = p_.partial_o + (first_partial + r) * Traits::kHeadDimV + col;
        *reinterpret_cast<float4*>(partial) = make_float4(o[0], o[1], o[2], o[3]);
        *reinterpret_cast<float4*>(partial + 4) = make_float4(o[4], o[5], o[6], o[7]);
        if (col == 0) p_.partial_lse[first_partial + r] = lse;
        continue;
      }
      Element* out = mla_out_row<Element>(p_, t_.batch, row) + col;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        reinterpret_cast<std::uint32_t*>(out)[k] = pack_pair<Traits::kIsBf16>(o[2 * k], o[2 * k + 1]);
      if (col == 0 && p_.lse != nullptr) {
        *mla_lse_entry(p_, t_.batch, row) = lse;
      }
    }
  }

  typename Traits::SharedStorage& s_;
  const MlaParams& p_;
  const MlaTile& t_;
  const int warpgroup_;
  const int thread_;
  const KvMaps maps_;
  float st_[kS];                // S^T, then P^T, of the current block
  float ot_[kDimTiles][kS];     // O^T, unnormalized
  float col_max_[kCols];        // running raw-score max of the thread's query rows
  float col_sum_[kCols];        // the thread's partial sums of them
};

}  // namespace hopattn::sm90
