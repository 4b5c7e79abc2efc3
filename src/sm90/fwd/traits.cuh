// One traits struct per (head dim, element type): tile shape, warpgroup roles, register budgets,
// pipeline depth, shared-memory plan and named-barrier ids. Kernel bodies use only these names.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "sm90/fwd/cp_async_visit.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// kBlockN_: keys per K/V tile: as wide as the registers allow (S is 64 x kBlockN f32 per warpgroup and
// O is 64 x kHeadDimV f32) while kStages_ K and V stages still fit in shared memory.
// kWarpSpecialized_: a producer warpgroup issues the TMA loads (FlashAttention-3); without it one
// consumer thread issues them between its own GEMMs (the ablation baseline).
// kConsumerWarpgroups_: 64 query rows each; 3 (192-row tiles, FlashAttention-3's choice at head dim
// 64) gives each K/V block more GEMM work to hide the softmax behind, at 160 registers a thread.
// kVarlen_: variable-length batches (cu_seqlens_q / cu_seqlens_k / seqused_k): each tile reads its
// sequence's lengths and first rows (sequence.cuh); its own instantiation, so that the dense kernels
// keep their code.
// kKvByCpAsync_: the variable-length kernels' variant whose producer warpgroup copies K and V with
// cp.async (fwd/kv_cp_async.cuh; head dims up to 128; a paged cache in kernels of its own,
// attention_forward_kernel's kKvSource).
// kChunksAndSequsedQ_: the variable-length kernels' variant that takes attention_chunk (its arithmetic:
// fwd/attention_chunk.hpp) and seqused_q (fwd/sequence.cuh), which calls with either take, dense
// batches too. Its own instantiation: as runtime tests in every kernel, they cost calls with neither
// 1-4% (H100, perf-notes session 44).
// kHeadDimV_: the width of the V and O tiles, where v's head dim is narrower than q's and k's
// (DeepSeek's q/k 192, v 128): P V then runs at v's width instead of the zero-filled columns of q's.
// kDecodingOnly_: the variable-length kernels' variant for decoding steps at head dim 256 (head dims
// 136-256 run there): the launch sends it only tiles of at most 8 live rows, which warpgroup 0 computes
// transposed (kTransposedDecode), so the m64 loops are not compiled. At d 256 they spill once packing
// and the split are in (kVarlenSplit below); without them the variant packs and splits.
template <int kHeadDim_, typename Element_, int kBlockN_, int kStages_, bool kWarpSpecialized_ = true,
          int kConsumerWarpgroups_ = 2, bool kVarlen_ = false, bool kKvByCpAsync_ = false,
          bool kChunksAndSequsedQ_ = false, int kHeadDimV_ = kHeadDim_, bool kDecodingOnly_ = false>
struct FwdTraits {
  using Element = Element_;
  static constexpr bool kIsBf16 = std::is_same_v<Element, __nv_bfloat16>;
  static_assert(kIsBf16 || std::is_same_v<Element, __half>, "16-bit element types only");
  static constexpr int kElementBytes = 2;

  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static_assert(kHeadDimV <= kHeadDim && kHeadDimV % 64 == 0, "V tiles of whole 64-column blocks, at most q's width");
  // Query rows per CTA tile; each consumer warpgroup owns 64 of them (one m64 wgmma row block).
  static constexpr int kConsumerWarpgroups = kConsumerWarpgroups_;
  static_assert(kConsumerWarpgroups == 2 || kConsumerWarpgroups == 3, "2 or 3 consumer warpgroups");
  static constexpr int kRowsPerWarpgroup = 64;
  static constexpr int kBlockM = kConsumerWarpgroups * kRowsPerWarpgroup;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kWarpSpecialized = kWarpSpecialized_;
  static constexpr bool kVarlen = kVarlen_;
  // Only the producer warp skips the empty tiles of a variable-length grid (scheduler.cuh).
  static_assert(!kVarlen || kWarpSpecialized, "variable-length kernels are warp-specialized");

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kProducerWarpgroups = kWarpSpecialized ? 1 : 0;
  static constexpr int kThreads = kWarpgroupThreads * (kProducerWarpgroups + kConsumerWarpgroups);
  static constexpr int kConsumerWarps = kConsumerWarpgroups * 4;
  // setmaxnreg budgets. The CTA owns what it was launched with (65536 / threads, rounded down to a
  // multiple of 8: 168 per thread for 384 threads, 128 for 512); setmaxnreg.inc waits until the pool
  // can pay, so the budgets must add up to no more than that or the consumers wait forever.
  // A producer warpgroup that copies K and V itself (kKvByCpAsync below) spilled at 24 registers (its
  // leader's visit hand-out beside the copies); those kernels' consumers fit in 232. At d 64 it spilled
  // 4 bytes at 40 too once the consumers had the transposed decoding loop (the leader's Q phase):
  // 48 / 224 there. The d 256 decoding-only variant's producer (packed Q, the split's visits) spilled
  // 20 bytes at 24: 40 / 232.
  static constexpr int kProducerRegisters =
      kConsumerWarpgroups == 2 ? (kKvByCpAsync_ ? (kHeadDim_ == 64 ? 48 : 40) : (kDecodingOnly_ ? 40 : 24)) : 32;
  static constexpr int kConsumerRegisters =
      kConsumerWarpgroups == 2 ? (kKvByCpAsync_ ? (kHeadDim_ == 64 ? 224 : 232) : (kDecodingOnly_ ? 232 : 240)) : 160;
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static_assert(!kWarpSpecialized ||
                    (kProducerRegisters + kConsumerWarpgroups * kConsumerRegisters) * kWarpgroupThreads <=
                        kLaunchRegisters * kThreads,
                "register budgets exceed what the CTA is launched with");

  using QTile = SwizzledTile<kBlockM, kHeadDim, kElementBytes>;
  using KTile = SwizzledTile<kBlockN, kHeadDim, kElementBytes>;
  using VTile = SwizzledTile<kBlockN, kHeadDimV, kElementBytes>;
  static constexpr int kColsPerBlock = QTile::kColsPerBlock;  // TMA box width (128 bytes)

  // Accumulator registers per consumer thread (m64 x N f32 over 128 threads).
  static constexpr int kSRegisters = kBlockN / 2;
  static constexpr int kORegisters = kHeadDimV / 2;
  static constexpr int kPSteps = kBlockN / 16;  // k16 steps of O += P V
  static constexpr int kQKSteps = kHeadDim / 16;  // k16 steps of S = Q K^T
  static_assert(kBlockN % 16 == 0, "P V reduces over keys in steps of 16");
  // Q as the A operand of S = Q K^T from registers (loaded once per tile, tile/a_fragment.hpp) rather
  // than from shared memory per K block: it takes load off shared-memory bandwidth, and the Q buffer
  // is free for the next tile's Q right away. kHeadDim / 4 registers, where they fit beside O, S and
  // P with 48 left for addresses and softmax state (shipped: d 64, 128 and 192; not d 256, which spills,
  // nor 192 / 128, whose 128-key S takes them).
  static constexpr int kQRegisters = kHeadDim / 4;
  static constexpr bool kQInRegisters =
      kQRegisters + kSRegisters + kBlockN / 4 + kORegisters <= kConsumerRegisters - 48;
  // Lean addressing: the mask test per K block reduced to two bounds per tile (masked_blocks.hpp) and
  // each wgmma descriptor advanced by one add (advance_descriptor) instead of rebuilt from the address.
  // Fewer instructions, but what ptxas makes of them differs by head dim (H200, 2026-11-29): d 256
  // +10% (bf16); d 128 +0-1.3% (bf16) and +2.5-6.5% (FP8) once the epilogue and the FP8 descale split
  // had landed (unchanged before); d 64 -9% (bf16) / -6% (FP8), where the new schedule bunched the
  // MUFU.EX2s behind a full MIO queue (ncu: mio stalls 0.6% -> 9.4% of samples). So not at d 64.
  static constexpr bool kLeanAddressing = kHeadDim >= 128;
  // Overlapped mainloop: the P V wait kept between the softmax's max reduction and its exponentials
  // (keep_next_wait_after; ptxas otherwise hoists it above the max): head dim 128 +1-1.5% on the
  // paper grid; d 64 lost 6-13%, d 256 level (H200, 2026-12-01).
  static constexpr bool kPvWaitAfterMax = kHeadDim == 128;

  // The launch may split the last rounds' tiles along the keys (fwd/split_plan.hpp): the last full
  // round and the partial one (units of 1-2 tiles; what session 8 measured: H200, 2026-12-01).
  // Not with variable lengths: the split plan assumes every tile has the same key blocks.
  static constexpr bool kTailSplit = !kVarlen;
  static constexpr int kSplitRegionRounds = 2;
  static constexpr bool kDecodingOnly = kDecodingOnly_;
  static_assert(!kDecodingOnly || (kVarlen && kHeadDim == 256 && kHeadDimV == kHeadDim && !kChunksAndSequsedQ_),
                "the decoding-only variant: the d 256 variable-length kernel without chunks or seqused_q");
  // The variable-length kernels' own split (every tile in equal-count pieces, plan_varlen_split) and
  // GQA packing (fwd/packed_gqa.cuh), for decoding. At head dim 256 only in the decoding-only variant:
  // beside the m64 loops their code spills (O alone takes 128 of the 168 registers ptxas plans the
  // kernel for).
  static constexpr bool kVarlenSplit = kVarlen && (kHeadDim <= 128 || kDecodingOnly);
  static constexpr bool kPacksGqa = kVarlenSplit;
  // Tiles of at most 8 live rows computed transposed (fwd/transposed_decode.cuh): at d 64 a decoding
  // step's 192-key blocks cost the m64 loop about as much tensor and exponential time as their bytes
  // take to stream (+6-11.5% with it on the decode grid, perf-notes v89); at d 128 the stream bounds
  // the step and the transposed loop's longer chain per block cost 0-5% (H200, 2026-12-03). At d 256
  // the decoding-only variant computes every tile so.
  static constexpr bool kTransposedDecode = kPacksGqa && (kHeadDim == 64 || kDecodingOnly);
  // K and V by the whole producer warpgroup's cp.async copies rather than one thread's TMA boxes
  // (fwd/kv_cp_async.cuh): a decoding step is bound by HBM, and streaming K/V alone the H200 reached
  // 4.41-4.49 TB/s with 128 threads of cp.async against 4.05-4.17 with TMA boxes of any shape, ring
  // depth or CTAs per SM (bench/probes/tma_stream.cu, 2026-12-02). Launches choose it
  // (takes_kv_copy_kernel in fwd/params_builder.hpp).
  static constexpr bool kKvByCpAsync = kKvByCpAsync_;
  static_assert(!kKvByCpAsync || (kVarlen && kHeadDim <= 128), "K/V copies: the variable-length kernels up to d 128");
  static constexpr bool kChunksAndSequsedQ = kChunksAndSequsedQ_;
  static_assert(!kChunksAndSequsedQ || kVarlen, "chunks and seqused_q: the variable-length kernels");

  // Named barriers (id 0 is __syncthreads): one "your turn to issue GEMMs" barrier per consumer
  // warpgroup for ping-pong scheduling (with 3 warpgroups the turn goes round: 0, 1, 2, 0, ...).
  static constexpr int kPingPongBarrierBase = 1;
  static constexpr int kPingPongBarrierThreads = 2 * kWarpgroupThreads;

  // Named barriers of the TMA-store epilogue: one per consumer warpgroup, after the ping-pong ones.
  static constexpr int kEpilogueBarrierBase = kPingPongBarrierBase + kConsumerWarpgroups;
  static constexpr int kEpilogueBarrierThreads = kWarpgroupThreads;

  // The O tile is staged in shared memory for a TMA store: the consumers then leave the epilogue at
  // shared-memory speed instead of waiting on 32-64 scattered global stores a thread (a quarter of the
  // stall samples at 512 tokens). Each warpgroup gets its own 64 rows where a whole O tile fits (head
  // dim 64, 128, 192); else (256, and 192 / 128's 128-key blocks) the warpgroups take one 64-row stage
  // in turns, each handing it on once the TMA unit has read its rows (the O-stage turn barriers below).
  static constexpr int kSmemLimit = 227 * 1024;
  static constexpr int kRingBytes = kStages * (KTile::kBytes + VTile::kBytes);
  using WholeOTile = SwizzledTile<kBlockM, kHeadDimV, kElementBytes>;
  static constexpr bool kOStagePerWarpgroup =
      QTile::kBytes + WholeOTile::kBytes + kRingBytes + kSwizzleAtomBytes <= kSmemLimit;
  static constexpr bool kOStageShared =
      !kOStagePerWarpgroup &&
      QTile::kBytes + WholeOTile::kBytes / kConsumerWarpgroups + kRingBytes + kSwizzleAtomBytes <= kSmemLimit;
  static constexpr bool kOThroughSmem = kOStagePerWarpgroup || kOStageShared;
  using OTile = SwizzledTile<kOStagePerWarpgroup ? kBlockM : kRowsPerWarpgroup, kHeadDimV, kElementBytes>;
  struct OStage {
    alignas(kSwizzleAtomBytes) std::uint8_t bytes[OTile::kBytes];
  };
  struct NoStorage {};
  // Shared O stage: warpgroup w waits on barrier kOTurnBarrierBase + w (its 128 threads) until warp 0
  // of the previous warpgroup in round-robin order arrives (32 threads).
  static constexpr int kOTurnBarrierBase = kEpilogueBarrierBase + kConsumerWarpgroups;
  static constexpr int kOTurnBarrierThreads = kWarpgroupThreads + 32;
  // The cp.async producer warpgroup: its leader hands each visit id to the other threads. The TMA
  // producer of a variable-length kernel: its K warp hands a paged visit to its V warp.
  static constexpr int kProducerBarrier = kOTurnBarrierBase + kConsumerWarpgroups;
  static_assert(kProducerBarrier < 16, "named barrier ids are 0-15");

  struct alignas(kSwizzleAtomBytes) SharedStorage {
    alignas(kSwizzleAtomBytes) std::uint8_t q[QTile::kBytes];
    std::conditional_t<kOThroughSmem, OStage, NoStorage> o;  // O tile before its TMA store
    alignas(kSwizzleAtomBytes) std::uint8_t k[kStages][KTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t v[kStages][VTile::kBytes];
    int visit;                       // producer -> consumers, published with q_full: visit id
    std::uint64_t q_full;            // producer (TMA) -> consumers: Q tile landed (or no tile left)
    std::uint64_t q_empty;           // consumers -> producer: last S GEMM of the tile done
    std::uint64_t k_full[kStages];   // producer (TMA) -> consumers: K stage landed
    std::uint64_t k_empty[kStages];  // consumers -> producer: S GEMM done reading the K stage
    std::uint64_t v_full[kStages];   // producer (TMA) -> consumers: V stage landed
    std::uint64_t v_empty[kStages];  // consumers -> producer: PV GEMM done reading the V stage
    // The consumers' keep_next_wait_after stores (never read), where kPvWaitAfterMax.
    std::conditional_t<kPvWaitAfterMax, float[kConsumerWarpgroups * kWarpgroupThreads], NoStorage> pv_fence;
    // Variable-length kernels: consumers -> consumers, the V rows past a sequence's keys zeroed in
    // the stage of its last block (v_tail.cuh). Last, so the dense kernels' layout is what it was.
    std::conditional_t<kVarlen, std::uint64_t, NoStorage> v_tail_cleared;
    // kKvByCpAsync: the producer leader -> the producer warpgroup, each visit decoded, in two slots
    // used in turn (a slot is rewritten only after every thread passed the next visit's barrier).
    std::conditional_t<kKvByCpAsync, HandedVisit[2], NoStorage> producer_visit;
    // kKvByCpAsync: the producer leader -> the consumers, each K stage's block and whether it is its
    // visit's last (stage_entry): a sharing piece's blocks are known only as it claims them. Beside it
    // the leader -> the producer warpgroup, a sharing piece's next block, in two slots used in turn.
    std::conditional_t<kKvByCpAsync, int[kStages], NoStorage> stage_block;
    std::conditional_t<kKvByCpAsync, int[2], NoStorage> next_claimed_block;
    // The TMA producer of a variable-length kernel: a paged visit's page ids a block ahead, K's and V's
    // (producer.cuh, PagedChunkIds), and its visits handed from K's warp to V's, in two slots.
    std::conditional_t<kVarlen && !kKvByCpAsync, int[2][2][kBlockN / kMinPageSize], NoStorage> paged_ids;
    std::conditional_t<kVarlen && !kKvByCpAsync, int[2], NoStorage> paged_visit;
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage));
  static_assert(kSharedBytes <= kSmemLimit, "shared-memory plan exceeds the 227 KB an sm_90 CTA can have");
};

// The d 256 decoding-only kernel (kDecodingOnly_): 64-key blocks (the transposed tile's M), two stages.
// launch_shipped_decoding_forward runs it; the FP8 decoding kernel's pieces merge in its combine.
template <typename Element>
using DecodingTraits256 = FwdTraits<256, Element, 64, 2, /*kWarpSpecialized=*/true, 2, /*kVarlen=*/true, false, false,
                                    256, /*kDecodingOnly=*/true>;

}  // namespace hopattn::sm90
