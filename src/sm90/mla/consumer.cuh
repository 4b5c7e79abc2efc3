// An MLA consumer warpgroup (of two). Both compute the tile's whole S = [Q QV] [K V]^T per K/V block
// (Q, QV, K, V all from shared memory), its mask and online softmax; each then accumulates its own
// 256 of O's 512 columns, O += P V (P from registers, V MN-major from the stage), and stores them.
// Thread 0 also loads K and V: the first two blocks up front, then block i + 1 into the stage of block
// i - 1 once both warpgroups released it (one arrive per warp), while block i's S GEMM runs. So the
// warpgroups drift apart by at most a block; no other barrier joins them after the Q tile.
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
#include "sm90/mla/tile.cuh"
#include "sm90/tile/fragment.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// Packed tile row -> (query row, query head); live: a row of the output at all.
struct MlaRow {
  int q_row, head;
  bool live;
};

__device__ __forceinline__ MlaRow mla_row(const MlaParams& p, const MlaTile& t, int tile_row, int block_m) {
  const int packed = t.m_block * block_m + tile_row;
  MlaRow r;
  r.q_row = int(p.head_ratio_divisor.divide(unsigned(packed)));
  r.head = t.kv_head * p.head_ratio + packed - r.q_row * p.head_ratio;
  r.live = packed < p.packed_rows;
  return r;
}

struct KvMaps {
  const CUtensorMap* k;
  const CUtensorMap* v;
};

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

  __device__ void run() {
    const int blocks = t_.block_end - t_.block_begin;
    const bool loads = threadIdx.x == 0;
    if (loads) {
      for (int i = 0; i < min(blocks, Traits::kStages); ++i) load_kv_block<Traits>(s_, maps_.k, maps_.v, p_, t_, i);
    }
    load_q_tile();
    // This thread's two accumulator rows: the first key each may not see (mask_from_[r]).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const MlaRow row = mla_row(p_, t_, accumulator_row(thread_, 2 * r), Traits::kBlockM);
      rows_[r] = row;
      mask_from_[r] = p_.causal ? min(t_.seqlen_k, max(0, row.q_row + t_.seqlen_k - p_.seqlen_q + 1)) : t_.seqlen_k;
    }
    // The first key some row of the tile may not see: blocks past it take the mask.
    const MlaRow first = mla_row(p_, t_, 0, Traits::kBlockM);
    const int tile_mask_from =
        p_.causal ? min(t_.seqlen_k, max(0, first.q_row + t_.seqlen_k - p_.seqlen_q + 1)) : t_.seqlen_k;

    float o[kO];
#pragma unroll
    for (int i = 0; i < kO; ++i) o[i] = 0.0f;
    OnlineSoftmax<kS> softmax(p_.scale_log2);
    for (int i = 0; i < blocks; ++i) {
      const int stage = i % Traits::kStages;
      mbarrier_wait(&s_.kv_full[stage], (i / Traits::kStages) & 1);
      float s[kS];
      issue_s(s, stage);
      if (loads && i >= 1 && i + 1 < blocks) {
        const int next = i + 1;  // into the stage of block i - 1
        mbarrier_wait(&s_.kv_empty[next % Traits::kStages], ((next - Traits::kStages) / Traits::kStages) & 1);
        load_kv_block<Traits>(s_, maps_.k, maps_.v, p_, t_, next);
      }
      wgmma_wait<0>();
      pin_registers(s);
      const int n0 = (t_.block_begin + i) * Traits::kBlockN;
      if (n0 + Traits::kBlockN > tile_mask_from) apply_mask(s, n0);
      if (n0 + Traits::kBlockN > t_.seqlen_k) zero_v_tail(stage, t_.seqlen_k - n0);
      float rescale[2];
      softmax.update(s, rescale);
      if (warp_rescales(rescale)) {
#pragma unroll
        for (int j = 0; j < kO; ++j) o[j] *= rescale[fragment_row_half(j)];
      }
      std::uint32_t p[kPSteps][4];
#pragma unroll
      for (int step = 0; step < kPSteps; ++step) {
#pragma unroll
        for (int j = 0; j < 4; ++j) p[step][j] = pack_pair<Traits::kIsBf16>(s[8 * step + 2 * j], s[8 * step + 2 * j + 1]);
      }
      issue_pv(o, p, stage);
      wgmma_wait<0>();
      pin_registers(o);
      __syncwarp();
      if (threadIdx.x % 32 == 0) mbarrier_arrive(&s_.kv_empty[stage]);
    }
    store(o, softmax);
  }

 private:
  // Q and QV rows of the tile into the shared [Q QV] tile (both consumer warpgroups, 16-byte chunks,
  // swizzled as TMA would): a packed tile's rows come from as many query heads as the ratio gives,
  // which one TMA box cannot name at every ratio; rows past the packed ones are zeros.
  __device__ void load_q_tile() {
    constexpr int kChunksPerRow = (Traits::kHeadDim + Traits::kHeadDimV) / 8;
    constexpr int kQChunks = Traits::kHeadDim / 8;
    const int consumer_thread = warpgroup_ * Traits::kWarpgroupThreads + thread_;
    for (int idx = consumer_thread; idx < Traits::kBlockM * kChunksPerRow; idx += Traits::kConsumerThreads) {
      const int r = idx / kChunksPerRow, c = idx % kChunksPerRow;
      const MlaRow row = mla_row(p_, t_, r, Traits::kBlockM);
      uint4 value = make_uint4(0, 0, 0, 0);
      if (row.live) {
        const MlaRows& src = c < kQChunks ? p_.q : p_.qv;
        const int col = (c < kQChunks ? c : c - kQChunks) * 8;
        const Element* base = static_cast<const Element*>(src.data) + t_.batch * src.batch_stride +
                              std::int64_t(row.q_row) * src.row_stride + std::int64_t(row.head) * src.head_stride;
        value = *reinterpret_cast<const uint4*>(base + col);
      }
      *reinterpret_cast<uint4*>(s_.q + (c / 8) * kCB + swizzle_128b(r, (c % 8) * 16)) = value;
    }
    fence_proxy_async_shared();  // the generic stores, before wgmma reads them
    named_barrier_sync(Traits::kQReadyBarrier, Traits::kConsumerThreads);
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

  // O (this warpgroup's 256 columns) += P V: V's column blocks 4w .. 4w + 3, 16 keys a step.
  __device__ void issue_pv(float (&o)[kO], const std::uint32_t (&p)[kPSteps][4], int stage) {
    const std::uint32_t v = smem_address(s_.kv[stage]) +
                            (Traits::kVFirstColumnBlock + warpgroup_ * Traits::kOColumns / 64) * kCB;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kPSteps; ++step)
      wgmma_rs<Traits::kOColumns, Traits::kIsBf16>(o, p[step], mnmajor_descriptor(v + step * 16 * kSwizzleBytes, kCB), 1);
    wgmma_commit();
  }

  // Keys past the sequence (seqused_k, the tensor's end) and, causal, past each row's diagonal: -inf
  // by selection, so that whatever the stage held there (NaN in a cache's unused rows) is dropped.
  __device__ void apply_mask(float (&s)[kS], int n0) const {
#pragma unroll
    for (int i = 0; i < kS; ++i) {
      if (n0 + accumulator_col(thread_, i) >= mask_from_[fragment_row_half(i)]) s[i] = -INFINITY;
    }
  }

  // P is 0 for keys past the sequence, but 0 times a NaN in their V rows is NaN: this warpgroup zeroes
  // those rows of its own V columns (the other warpgroup's P V reads only its own) before its P V.
  __device__ void zero_v_tail(int stage, int live_keys) {
    constexpr int kBlocks = Traits::kOColumns / 64;
    const int dead_rows = Traits::kBlockN - live_keys;
    const std::uint32_t v = smem_address(s_.kv[stage]) +
                            (Traits::kVFirstColumnBlock + warpgroup_ * kBlocks) * kCB + live_keys * kSwizzleBytes;
    for (int idx = thread_; idx < dead_rows * kBlocks * 8; idx += Traits::kWarpgroupThreads) {
      const int chunk = idx % 8, row = idx / 8 % dead_rows, block = idx / 8 / dead_rows;
      store_zero_16b(v + block * kCB + row * kSwizzleBytes + chunk * 16);
    }
    fence_proxy_async_shared();
    named_barrier_sync(Traits::kVTailBarrierBase + warpgroup_, Traits::kWarpgroupThreads);
  }

  // Normalized O of this warpgroup's columns (and, from warpgroup 0, LSE): into out, or with a split
  // into the partials. A row that saw no key stores 0 and LSE -inf.
  __device__ void store(const float (&o)[kO], const OnlineSoftmax<kS>& softmax) {
    float inv_sum[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(softmax.row_sum[r]);
      const bool empty = sum == 0.0f;
      inv_sum[r] = empty ? 0.0f : __fdividef(1.0f, sum);
      lse[r] = empty ? -INFINITY : (softmax.row_max[r] * p_.scale_log2 + __log2f(sum)) * 0.69314718055994531f;
    }
    const int col0 = warpgroup_ * Traits::kOColumns;
    if (p_.splits > 1) {
      const std::int64_t slot = std::int64_t(t_.index) * p_.splits + t_.split;
      float* partial = p_.partial_o + slot * Traits::kBlockM * Traits::kHeadDimV;
#pragma unroll
      for (int i = 0; i < kO; i += 2) {
        const int r = fragment_row_half(i);
        const int row = accumulator_row(thread_, i), col = col0 + accumulator_col(thread_, i);
        *reinterpret_cast<float2*>(partial + row * Traits::kHeadDimV + col) =
            make_float2(o[i] * inv_sum[r], o[i + 1] * inv_sum[r]);
      }
      if (warpgroup_ == 0 && thread_ % 4 == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) p_.partial_lse[slot * Traits::kBlockM + accumulator_row(thread_, 2 * r)] = lse[r];
      }
      return;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!rows_[r].live) continue;
      Element* out = static_cast<Element*>(p_.out.data) + t_.batch * p_.out.batch_stride +
                     std::int64_t(rows_[r].q_row) * p_.out.row_stride + std::int64_t(rows_[r].head) * p_.out.head_stride;
#pragma unroll
      for (int i = 2 * r; i < kO; i += 4) {
        const int col = col0 + accumulator_col(thread_, i);
        *reinterpret_cast<std::uint32_t*>(out + col) =
            pack_pair<Traits::kIsBf16>(o[i] * inv_sum[r], o[i + 1] * inv_sum[r]);
      }
      if (warpgroup_ == 0 && thread_ % 4 == 0 && p_.lse != nullptr) {
        p_.lse[t_.batch * p_.lse_batch_stride + std::int64_t(rows_[r].head) * p_.lse_head_stride +
               std::int64_t(rows_[r].q_row) * p_.lse_row_stride] = lse[r];
      }
    }
  }

  typename Traits::SharedStorage& s_;
  const MlaParams& p_;
  const MlaTile& t_;
  const int warpgroup_;
  const int thread_;
  const KvMaps maps_;
  MlaRow rows_[2];
  int mask_from_[2];
};

}  // namespace hopattn::sm90
