// Tile shapes, roles, register budgets and the shared-memory plan of the backward kernel, per (head
// dim, element type).
//
// Up to head dim 128 a CTA owns kBlockN = 128 keys of one K/V head; each of the two consumer warpgroups
// owns 64 of them (one m64 wgmma row block), and keeps their dK and dV accumulators (64 x d f32 each)
// in registers for the whole CTA. The CTA walks q blocks of kBlockM = 64 rows of every q head that reads
// the K/V head: per q block it computes S^T = K Q^T and dP^T = V dO^T (keys as the wgmma M, so that
// dV += P^T dO and dK += dS^T Q take P^T and dS^T straight from the accumulators as A fragments), and
// dQ = dS K (dS through shared memory), added into a float32 workspace per consumer and step.
//
// At head dims 192 and 256 dK and dV of 64 keys would take 192 or 256 registers a thread: there both
// consumers take the same 64 keys and split the step's work by role (kSplitsRoles): consumer 0
// computes S^T, P^T and dV += P^T dO, consumer 1 dP^T, dS^T (with consumer 0's P^T, through shared
// memory) and dK += dS^T Q; each keeps one gradient (64 keys x d: d/2 registers) and issues about half
// of dQ's columns (kDqPieceCols below).
//
// Dense and variable-length batches (cu_seqlens_q / cu_seqlens_k / seqused_k / seqused_q) take the same kernels:
// each CTA reads its sequence's lengths and first rows (bwd/sequence.cuh). Dense batches ran 2-6%
// faster on them than on kernels of their own (perf-notes v57).
//
// kDeterministic_: dQ's reductions into each q block wait their turn in a fixed key-block order
// (bwd/dq_order.cuh, issued by writer threads: dq_writer.cuh), so dq is bitwise reproducible;
// instantiations of their own.
// kChunksAndSequsedQ_: the variant that takes attention_chunk (fwd/attention_chunk.hpp: block ranges,
// masks, dQ turns) and seqused_q (query_tail.cuh), not deterministic; instantiations of their own:
// in every kernel their runtime tests cost calls without either 3.5-5% at d 64 (H100, perf-notes
// session 44).
// kHeadDimV_: the width of the V and dO tiles and of dV (v's head dim rounded up to a 64-column block),
// where it is narrower than q and k's (DeepSeek's q/k 192, v 128): dP^T = V dO^T takes v's k-steps and
// dV += P^T dO v's columns, instead of multiplying zero-filled ones. Only where the consumers split
// the roles (kSplitsRoles), where dV is one consumer's gradient alone.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <int kHeadDim_, typename Element_, bool kDeterministic_ = false, bool kChunksAndSequsedQ_ = false,
          int kHeadDimV_ = kHeadDim_>
struct BwdTraits {
  using Element = Element_;
  static constexpr bool kDeterministic = kDeterministic_;
  static constexpr bool kChunksAndSequsedQ = kChunksAndSequsedQ_;
  // The deterministic kernels' chunk arithmetic in their dQ turns and masks spilled registers.
  static_assert(!(kDeterministic && kChunksAndSequsedQ), "chunks and seqused_q: not deterministic");
  static constexpr bool kIsBf16 = std::is_same_v<Element, __nv_bfloat16>;
  static_assert(kIsBf16 || std::is_same_v<Element, __half>, "16-bit element types only");
  static constexpr int kElementBytes = 2;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                "backward head dims: 64, 128, 192, 256");
  static constexpr int kHeadDimV = kHeadDimV_;

  // Both consumers on the same keys, one for dV and one for dK (above).
  static constexpr bool kSplitsRoles = kHeadDim > 128;
  static_assert(kHeadDimV == kHeadDim || (kSplitsRoles && kHeadDimV % 64 == 0 && kHeadDimV < kHeadDim),
                "v's own width: whole 64-column blocks, narrower than q/k's, where the consumers split the roles");
  static constexpr int kBlockM = 64;  // q rows per step (128 at d 64 was 20% slower: perf-notes v54)
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kKeysPerWarpgroup = 64;
  static constexpr int kBlockN = kSplitsRoles ? kKeysPerWarpgroup : kConsumerWarpgroups * kKeysPerWarpgroup;  // keys per CTA
  // q-block stages (Q, dO, their row statistics) in flight; d 64's short steps take a third (+0.3-0.9%,
  // perf-notes v63). The deterministic d 256 kernel's dQ share (64 KB) leaves room for one (staging the
  // share in the step's own Q and dO buffers once both consumers are done with them, so that two fit,
  // measured 1-2.5% slower: perf-notes v102); at d 192 (48 KB) two fit (+33-37% over one).
  static constexpr int kStages = kHeadDim == 64 ? 3 : (kHeadDim == 256 && kDeterministic ? 1 : 2);
  // dS buffers, alternating by step: a consumer writes the next step's dS while the other may still
  // be reading this one in its dQ GEMM (consumer.cuh, PendingDq).
  static constexpr int kDsBuffers = 2;
  // dQ shares, alternating by step: a step's bulk reduction may still be reading its share while the
  // next step stores its own (consumer.cuh, stage_dq_share). One at d 192/256 (48/64 KB): the next
  // step's stores wait for the reduction's reads.
  static constexpr int kDqBuffers = kSplitsRoles ? 1 : 2;

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWarpgroups);
  static constexpr int kConsumerWarps = kConsumerWarpgroups * 4;
  static constexpr int kConsumerThreads = kConsumerWarpgroups * kWarpgroupThreads;
  // setmaxnreg budgets (see FwdTraits): 24 + 2 x 240 per thread of a warpgroup fits the 168 x 3 the
  // CTA is launched with. The deterministic kernels' dQ writers (dq_writer.cuh) run in the producer
  // warpgroup and spilled at 24: 40 + 2 x 232 fits too.
  static constexpr int kProducerRegisters = kDeterministic ? 40 : 24;
  static constexpr int kConsumerRegisters = kDeterministic ? 232 : 240;
  static_assert((kProducerRegisters + kConsumerWarpgroups * kConsumerRegisters) * kWarpgroupThreads <=
                    65536 / kThreads / 8 * 8 * kThreads,
                "register budgets exceed what the CTA is launched with");

  using QTile = SwizzledTile<kBlockM, kHeadDim, kElementBytes>;   // Q
  using DoTile = SwizzledTile<kBlockM, kHeadDimV, kElementBytes>; // dO
  using KTile = SwizzledTile<kBlockN, kHeadDim, kElementBytes>;   // K
  using VTile = SwizzledTile<kBlockN, kHeadDimV, kElementBytes>;  // V
  using DsTile = SwizzledTile<kBlockM, kBlockN, kElementBytes>;   // dS, q rows x keys (K-major A of dQ)
  static constexpr int kColsPerBlock = QTile::kColsPerBlock;      // TMA box width (128 bytes)

  // Accumulator registers per consumer thread (m64 x N f32 over 128 threads).
  static constexpr int kSRegisters = kBlockM / 2;          // S^T and dP^T: 64 keys x 64 q rows
  static constexpr int kGradRegisters = kHeadDim / 2;  // dK and dV: 64 keys x d (dV: its first kHeadDimV / 2)
  // dQ's columns in pieces of kDqPieceCols, one GEMM each, kept in the workspace (and the shares) in
  // accumulator order, piece after piece (dq_convert.cuh). Up to d 128 each consumer has one piece, half
  // the columns; at d 192 and 256 pieces of 64, consumer 0 half of them (rounded down: consumer 0 also
  // computes the exponentials; one of d 192's three ran 2-4% faster than two, H100, perf-notes v137),
  // consumer 1 the rest, each consumer's one after the other through the same registers (64 dQ
  // registers beside the scores and a gradient would spill).
  static constexpr int kDqPieceCols = kSplitsRoles ? 64 : kHeadDim / kConsumerWarpgroups;
  static constexpr int kDqPieces = kHeadDim / kDqPieceCols;
  static constexpr int kDqPiecesOfFirst = kSplitsRoles ? kDqPieces / 2 : (kDqPieces + 1) / 2;  // consumer 0's
  static constexpr int kDqRegisters = kDqPieceCols / 2;
  static constexpr int kDqPieceFloats = kBlockM * kDqPieceCols;
  // Consumer `warpgroup`'s dQ pieces: the first, and how many. Its share of a step's dQ (those pieces,
  // each in accumulator order) lies in the step's buffer from the first piece on; the shares are
  // contiguous, so each consumer's leaves by one bulk reduction. The count is a constant where both
  // have as many (every kernel but d 192's): the d 256 kernel measured 1-1.5% slower with it read
  // per warpgroup.
  static constexpr int dq_first_piece(int warpgroup) { return warpgroup * kDqPiecesOfFirst; }
  static constexpr int dq_pieces(int warpgroup) {
    if constexpr (kDqPieces == 2 * kDqPiecesOfFirst) return kDqPiecesOfFirst;
    return warpgroup == 0 ? kDqPiecesOfFirst : kDqPieces - kDqPiecesOfFirst;
  }
  // The most pieces either consumer has.
  static constexpr int kDqPiecesMost = dq_pieces(0) > dq_pieces(1) ? dq_pieces(0) : dq_pieces(1);
  static_assert(kDqPiecesMost <= 2, "consumer.cuh issues at most two dQ pieces per consumer and step");
  static constexpr int kQSteps = kBlockM / 16;   // k16 steps of dV += P^T dO and dK += dS^T Q
  static constexpr int kDSteps = kHeadDim / 16;   // k16 steps of S^T = K Q^T
  static constexpr int kDStepsV = kHeadDimV / 16; // k16 steps of dP^T = V dO^T
  static constexpr int kKeySteps = kBlockN / 16; // k16 steps of dQ = dS K
  // A step's first GEMM turn issues the previous step's dQ with this step's S^T and dP^T (consumer.cuh);
  // at head dim 128 dP^T follows once that dQ has left the registers (dK, dV, dQ, S^T and dP^T together
  // spill), and the dQ GEMM accumulates in dP^T's registers.
  static constexpr bool kDpBesideDq = kHeadDim <= 64;
  // Where a step's dQ share leaves for the workspace (consumer.cuh, reduce_dq_share): after the step's
  // second GEMM turn (no barrier of its own: +8% at d 128), or at once behind a named barrier, which
  // measured 4% faster at d 64 (perf-notes v55). The deterministic d 192 / 256 kernels hand it to their
  // writers at once (each warp arrives, no barrier), so that the writer's turn and reads start a turn
  // earlier and free the single buffer sooner (+3-9%; d 128 -1%: perf-notes v102).
  static constexpr bool kDqReducedAtOnce = kDeterministic ? kSplitsRoles : kHeadDim == 64;
  // The deterministic d 64 / d 128 kernels hand a share over after the step's dS stores instead, so
  // that one proxy fence covers both (the share's own fence was the d 64 kernel's top stall, 10% of
  // its samples under ncu: perf-notes v103).
  static constexpr bool kDqShareFencedWithDs = kDeterministic && !kDqReducedAtOnce;
  // At d 64 (not deterministic) every thread adds its dQ accumulators into the workspace itself, four
  // floats per red.global.add.v4.f32, instead of the share above: no shared-memory stores, proxy fence
  // and named barrier between the first turn and the exponentials (+5%, perf-notes v63; at d 128 it
  // needed 8 bytes of stack). At d 256 the shares and two stages would not fit in shared memory. At d
  // 192 the share (48 KB, one buffer) ran 1-3% faster: there the reductions from registers held their
  // registers until the L2, 94% busy, took them, and the next GEMM's warpgroup.arrive waited (a quarter
  // of the stall samples under ncu; perf-notes v138).
  static constexpr bool kDqFromRegisters = !kDeterministic && (kHeadDim == 64 || kHeadDim == 256);
  // Whether the consumers read a step's row statistics before the waits for S^T and dP^T (their
  // shared-memory latency hidden under the GEMMs) or after: +4-6% at d 128, -1% at d 64 (v63).
  static constexpr bool kRowStatsBeforeWaits = kHeadDim >= 128;
  // wgmma descriptors advanced from the tile's by one add (smem_layout.hpp, advance_descriptor) rather
  // than rebuilt per GEMM step (about ten instructions each): 10% fewer instructions in the d 256
  // kernel, whose score GEMMs take 16 steps, and +3-4% at d 64 (perf-notes v95); d 128 ran 4% slower
  // with it (ptxas's schedule), so it rebuilds them.
  static constexpr bool kLeanAddressing = kSplitsRoles || kHeadDim == 64;
  // The consumer's warpgroup index read from lane 0 (warpgroup_of_thread), so that what derives
  // from it lives in uniform registers: d 64 +1-5%, d 256 level; d 128 1-3% slower with it, as with
  // lean addressing (perf-notes v98), except in the deterministic kernel, whose consumers have 232
  // registers and spill without it.
  static constexpr bool kWarpUniformWarpgroup = kHeadDim != 128 || kDeterministic;
  // dK and dV through shared memory and TMA stores (consumer.cuh, stores_gradient_tiles). The
  // deterministic d 128 kernel's consumers (232 registers) spilled 68 bytes with that path beside the
  // register stores: it keeps the register stores alone.
  static constexpr bool kGradientsByTma = !(kDeterministic && kHeadDim == 128);

  // Named barriers (id 0 is __syncthreads): the consumers' GEMM turns (ping-pong, ids 1 and 2, as in the
  // forward), which also hand each step's dQ share to its reducing thread, each consumer's own
  // hand-off of a share (kDqReducedAtOnce, and the last step's after the loop; ids 3 and 4), and each
  // consumer's own wait for its zeroed K and V rows past the sequence's keys (key_tail.cuh; ids 5, 6;
  // id 5 for both consumers where they share the keys), and consumer 0's P^T handed to consumer 1
  // (kSplitsRoles; id 7), and the gradients' TMA stores at the end (consumer.cuh, store_gradient_tiles):
  // both consumers done with K and V (id 8), each consumer's rows written (ids 9, 10), and both
  // consumers' zeroed Q and dO rows past the sequence's seqused_q (query_tail.cuh; id 11).
  static constexpr int kTurnBarrierBase = 1;
  static constexpr int kDqShareBarrierBase = 3;
  static constexpr int kKeyTailBarrierBase = 5;
  static constexpr int kPReadyBarrier = 7;
  static constexpr int kKvFreeBarrier = 8;
  static constexpr int kGradRowsBarrierBase = 9;
  static constexpr int kQueryTailBarrier = 11;
  // A q block's dQ (kBlockM x kHeadDim f32) in shared memory in accumulator order, warpgroup by
  // warpgroup: element i of thread t's share at ((i / 4) * kWarpgroupThreads + t) * 4 + i % 4, so each
  // thread stores 16 contiguous bytes per 8-column block (conflict-free) and the block leaves as one
  // contiguous bulk reduction; the workspace keeps this order (dq_convert.cuh maps it back).
  static constexpr int kDqTileFloats = kBlockM * kHeadDim;
  static_assert(kBlockM == 64, "row_stats.cuh writes the row statistics in 64-row blocks");

  struct alignas(kSwizzleAtomBytes) SharedStorage {
    alignas(kSwizzleAtomBytes) std::uint8_t k[KTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t v[VTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t q[kStages][QTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t dout[kStages][DoTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t ds[kDsBuffers][DsTile::kBytes];
    // One float where the consumers add dQ from registers (kDqFromRegisters): no share to stage.
    alignas(128) float dq[kDqFromRegisters ? 1 : kDqBuffers][kDqFromRegisters ? 1 : kDqTileFloats];
    alignas(128) float row_stats[kStages][2][kBlockM];  // lse * log2(e), then D (BwdParams::row_stats)
    // kSplitsRoles: consumer 0's P^T of the step (times the softcap's slope 1 - tanh^2 when on) for
    // consumer 1's dS^T, in accumulator order (element i of thread t at ((i / 4) * 128 + t) * 4 + i % 4).
    alignas(16) float p_exchange[kSplitsRoles ? kBlockN * kBlockM : 4];
    std::uint64_t kv_full;
    std::uint64_t q_full[kStages];
    std::uint64_t q_empty[kStages];
    // ds_ready[w][b]: consumer w's 4 warps stored their half of the dS in buffer b (their keys, or
    // where the consumers share the keys, half the q rows).
    std::uint64_t ds_ready[kConsumerWarpgroups][kDsBuffers];
    // Deterministic kernels: consumer w's dQ share in buffer b staged for its writer (dq_writer.cuh;
    // each of the consumer's warps arrives), and read by the writer's bulk reduction (the buffer free
    // again).
    std::uint64_t dq_staged[kConsumerWarpgroups][kDqBuffers];
    std::uint64_t dq_free[kConsumerWarpgroups][kDqBuffers];
  };
  static constexpr int kSharedBytes = sizeof(SharedStorage);
  static_assert(kSharedBytes <= 227 * 1024, "shared memory plan exceeds the 227 KB an sm_90 CTA may use");
};

}  // namespace hopattn::sm90
