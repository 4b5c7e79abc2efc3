// Traits of the FP8 (e4m3) forward kernel for one head dim: tile shape, roles, register budgets,
// pipeline depth, shared-memory plan. Mirrors sm90/fwd/traits.cuh where the two agree.
#pragma once

#include <cstdint>
#include <type_traits>

#include "sm90/fwd/traits.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

// Keys per K/V block: 128 (at d 256, S 64 and P 16 registers beside O's 128 fit the consumers' 240;
// 96 keys ran 4-8% slower and 64 keys 11-24% slower, H200 2026-11-29). The block-descale and softcap
// kernels at d 256 keep 64: their scales push 128 keys into spills (40 and 16 bytes); so do the softcap
// kernels at d 192 (4 bytes). Descale rows must be multiples of kBlockN, so 128-row descales work at
// every head dim.
constexpr int fp8_default_block_n(int head_dim, bool block_descales, bool softcap = false) {
  return (head_dim == 256 && (block_descales || softcap)) || (head_dim == 192 && softcap) ? 64 : 128;
}
// Head dim 128 from 2048 keys on: 192-key blocks, which since the 192-key-only changes of v37-v39
// take 13-14% fewer cycles than 128-key blocks at 8k-16k, 7-11% at 2k-4k (causal 4k 7%). At 1k the
// padding of the last block (up to 191 keys of wasted work per tile row) costs more than the
// per-block overheads the width saves: +1-4% (H200, 2026-12-01). With block descales: 192-key
// blocks where the k/v descale rows are multiples of 192 (launch.cuh,
// fp8_block_descales_take_wide_blocks), 12-16% fewer cycles than 128-key blocks with 128-row
// descales at 8k-16k, 5-8% at 2k-4k (H200, 2026-12-01); where they are multiples of 64 only (128
// rows), the grouped 192-key kernel (kDescaleGroupKeys_ below). Head dim 64 takes them from 2048 keys too
// where v is in the ordinary layout (without a softcap, not paged): decoding steps 5-17% faster (b 8 x
// 32/8 x 16k 57.8 -> 47.8 us, MHA 16%), variable-length prefill 8k +5%, dense prefill +3-8% (H200,
// 2026-12-03, perf-notes v92, v93); with block descales by the same rows as head dim 128 (v134:
// 128-row descales -11% at 2 x 8k x 16, 384-row -15%; H200, 2026-12-05).
constexpr int kFp8WideBlockN = 192;
constexpr int kFp8WideBlockMinKeys = 2048;
// Keys per k/v descale group of the grouped 192-key block-descale kernel (Fp8FwdTraits::kDescaleGroupKeys).
constexpr int kFp8WideDescaleGroupKeys = 64;
// Head dim 256 with block descales whose k/v rows are multiples of 96 (192-row scales serve both head
// dims): 96-key blocks instead of 64 (128 spill 64 bytes there): 12-14% fewer cycles at 4k-16k (H200,
// 2026-12-01). The ordinary v layout only: a 96-key V^T tile from global memory is not whole 64-byte
// swizzle blocks, and the keys-contiguous kernel keeps 64 keys.
constexpr int kFp8D256DescaleBlockN = 96;
// Keys per k/v descale group of the grouped 96-key d 256 kernel (Fp8FwdTraits::kDescaleGroupKeys);
// it takes k/v descale rows that are multiples of 32 but not of 96 (128 rows), dense batches only.
constexpr int kFp8D256DescaleGroupKeys = 32;

// kBlockDescales_: the kernel reads per-block descales (q/k/v_block_descale, any of them); without
// them the per-K-block scale loads and the v-scale switch compile away (as run-time branches they
// cost the no-descale path 2-5%, H200 2026-11-29).
// kSoftcap_: scores pass through softcap * tanh(score / softcap) (MUFU.TANH per score) before the
// softmax; a separate instantiation so that the kernels without it carry no per-score branch.
// kVtFromGlobal_: v is given keys-contiguous (V^T in memory, detail::Problem::v_keys_contiguous): the
// producer loads V^T tiles by TMA instead of transposing V, and K's rows permuted
// (fp8_layout.hpp, key_of_s_column) so that P packs in V^T's key order.
// kVarlen_: variable-length batches (cu_seqlens_q / cu_seqlens_k / seqused_k / a paged cache), as the
// 16-bit kernels' kVarlen (fwd/sequence.cuh): each tile reads its sequence's lengths and first rows.
// The ordinary v layout only (a packed keys-contiguous v has no layout in the API).
// kChunksAndSequsedQ_: the variant that takes attention_chunk and seqused_q
// (launch_forward_fp8_chunks_seqused_q), as the 16-bit kernels' FwdTraits::kChunksAndSequsedQ: as
// runtime tests in every kernel they cost the d 128 causal forward 4% (H100, perf-notes session 44).
// kDescaleGroupKeys_: keys per k/v descale group; a K block has one k and one v block scale per group.
// Whole blocks but in the grouped kernels, which take 128-row descales (quantize_fp8's default) whose
// boundaries fall inside their blocks (Fp8Consumer, DescaleGroups in softmax.cuh; the per-block values
// from a plan kernel, descale_plan.cuh), dense batches only (the variable-length d 128 kernel spilled
// 52 bytes with groups, v127, before the plan):
//  - 192-key d 128, groups of 64 (kFp8WideDescaleGroupKeys): 10-14% faster than the 128-key kernel at
//    2k-16k keys (causal 8k 12%, keys-contiguous v 14%), 5% slower than the one-group 192-key kernel
//    that 192-row descales take (H200, 2026-12-04, perf-notes v127-v128);
//  - 96-key d 256, groups of 32 (kFp8D256DescaleGroupKeys): 6-9% faster than the 64-key kernel
//    (perf-notes v129).
// kHeadDimV_: the width of the V, V^T and O tiles, below kHeadDim only for DeepSeek's q/k 192 with v at
// most 128 (takes_v128_kernels, host/tile_width.hpp), whose P V then skips the 64 columns the 192-wide
// V tile would zero-fill.
// kDecodingOnly_: the d 256 variable-length kernel's variant for decoding steps (tiles of at most 8 live
// rows, every one computed transposed), as the 16-bit FwdTraits::kDecodingOnly.
template <int kHeadDim_, bool kBlockDescales_ = false, bool kSoftcap_ = false,
          int kBlockN_ = fp8_default_block_n(kHeadDim_, kBlockDescales_, kSoftcap_), bool kVtFromGlobal_ = false,
          bool kVarlen_ = false, int kDescaleGroupKeys_ = kBlockN_, bool kChunksAndSequsedQ_ = false,
          int kHeadDimV_ = kHeadDim_, bool kDecodingOnly_ = false>
struct Fp8FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr bool kBlockDescales = kBlockDescales_;
  static constexpr bool kSoftcap = kSoftcap_;
  static constexpr bool kVtFromGlobal = kVtFromGlobal_;
  static constexpr bool kVarlen = kVarlen_;
  static_assert(!(kVarlen && kVtFromGlobal), "variable-length FP8 kernels take v in the ordinary layout");
  // Paged caches (FwdParams::page_table): the variable-length kernels whose key blocks are powers of two,
  // which pages (powers of two from 16) divide or are divided by (load_paged_chunks); the 192- and
  // 96-key kernels would straddle pages and do without the code (with it the 192-key ones spilled).
  static constexpr bool kPagedKv = kVarlen && (kBlockN_ & (kBlockN_ - 1)) == 0;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                "fp8 head dims are 64, 128, 192 and 256");
  static_assert(kHeadDimV == kHeadDim || (kHeadDim == 192 && kHeadDimV == 128), "fp8 v widths: q's, or 128 at 192");
  static constexpr int kElementBytes = 1;

  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kRowsPerWarpgroup = 64;
  static constexpr int kBlockM = kConsumerWarpgroups * kRowsPerWarpgroup;
  static constexpr int kBlockN = kBlockN_;
  static_assert(kBlockN % 32 == 0 && kBlockN <= 256, "keys per block: k32 steps of P V, at most a 256-wide S");
  // Q, K and V are loaded in 128-byte (128-element) column blocks. Head dims 64 and 192 fill half of
  // their last one: the TMA box stays 128 wide and zero-fills the columns past kHeadDim (outside the
  // tensor), so every tile keeps the 128B swizzle; the Q K^T GEMM reads only the first kHeadDim columns
  // and the V transpose only V's first kHeadDim.
  static constexpr int kTileCols = (kHeadDim + 127) / 128 * 128;
  using QTile = SwizzledTile<kBlockM, kTileCols, kElementBytes>;
  using KTile = SwizzledTile<kBlockN, kTileCols, kElementBytes>;
  using VTile = SwizzledTile<kBlockN, (kHeadDimV + 127) / 128 * 128, kElementBytes>;
  // V^T: dims x keys (keys contiguous: 8-bit B must be K-major) in whole 128-key column blocks; where
  // kBlockN is not a multiple of 128 the P V GEMM reads only the first kBlockN keys of the last one.
  // Where V^T comes from global memory and kBlockN is not a multiple of 128 (192 keys): 64-key column
  // blocks under the 64-byte swizzle instead, so the TMA brings exactly the block's keys.
  static constexpr bool kVtSwizzle64 = kVtFromGlobal_ && kBlockN_ % 128 != 0;
  using VtTile = std::conditional_t<kVtSwizzle64, Swizzled64Tile<kHeadDimV, kBlockN_>,
                                    SwizzledTile<kHeadDimV, (kBlockN_ + 127) / 128 * 128, kElementBytes>>;
  static constexpr int kColsPerBlock = QTile::kColsPerBlock;  // TMA box width: 128 elements
  // O (bf16) staged in shared memory for a TMA store, 64 rows per consumer warpgroup, as in the
  // 16-bit kernel (fwd/traits.cuh says why) where it fits beside Q and the wanted stages: d 64
  // (16 KB) and d 128 (32 KB): +2-8% below 8k keys, level above (H200, 2026-12-01). d 256 stores
  // from registers, and so do the block-descale kernels, which ran 5-7% slower with the stage.
  static constexpr bool kOThroughSmem = kHeadDim <= 128 && !kBlockDescales_;
  static constexpr bool kOStageShared = false;
  using OTile = SwizzledTile<kBlockM, kHeadDimV, 2>;
  struct OStage {
    alignas(kSwizzleAtomBytes) std::uint8_t bytes[OTile::kBytes];
  };
  struct NoStorage {};
  static constexpr int kOStageBytes = kOThroughSmem ? OTile::kBytes : 0;
  // K, V and V^T stages: 4 at d 64, 3 at d 128, 2 at d 256, fewer where wider K blocks do not fit
  // (225 KB for the tiles leaves the rest of the 227 KB for barriers and the alignment pad).
  static constexpr int kStageBytes = KTile::kBytes + (kVtFromGlobal ? 0 : VTile::kBytes) + VtTile::kBytes;
  // d 192 as d 256 (3 stages would fit beside 128-wide V tiles; not timed yet, perf-notes v145).
  static constexpr int kStagesWanted = kHeadDim == 64 ? 4 : (kHeadDim == 128 ? 3 : 2);
  static constexpr int kStagesFitting = (225 * 1024 - QTile::kBytes - kOStageBytes) / kStageBytes;
  static constexpr int kStages = kStagesWanted < kStagesFitting ? kStagesWanted : kStagesFitting;
  static_assert(kStages >= 2, "a K/V block this wide leaves no room for two stages");
  // Ping-pong pays where the softmax is long against the GEMMs (d 64, 128: d128 2k 707 vs 676
  // TFLOP/s without). At d 256 the barrier hand-over costs more than the overlap brings: without it
  // 1-2% faster from 4k on with 64-key blocks, 0-1% with 128 (H200, 2026-11-29). d 192 as d 256.
  static constexpr bool kPingPongPays = kHeadDim <= 128;

  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWarpgroups);
  static constexpr int kConsumerWarps = kConsumerWarpgroups * 4;
  // Producer warpgroup: warp 0 issues the TMA loads, warps 1..3 transpose V (idle where kVtFromGlobal).
  static constexpr int kTransposeWarps = 3;
  // Arrivals that complete a V^T stage: the transposer warps', or the TMA thread's expect_tx.
  static constexpr int kVtWriters = kVtFromGlobal ? 1 : kTransposeWarps;
  // setmaxnreg budgets: (24 + 2 x 240) x 128 = 168 x 384, the whole launch allocation. The transposers
  // fit in 24 because each warp takes a contiguous run of the key-group-major task order, reads its
  // lane id per stage and keeps the ring position in one counter (producer.cuh); 240 holds O, S and P
  // of 128-key blocks at d 256 (232 spilled 76 bytes). The d 256 decoding-only variant's producer
  // (packed Q, the split's visits) spilled 12 bytes at 24, and its consumers keep no m64 tile: 40 / 232.
  static constexpr int kProducerRegisters = kDecodingOnly_ ? 40 : 24;
  static constexpr int kConsumerRegisters = kDecodingOnly_ ? 232 : 240;
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static_assert((kProducerRegisters + kConsumerWarpgroups * kConsumerRegisters) * kWarpgroupThreads <=
                    kLaunchRegisters * kThreads,
                "register budgets exceed what the CTA is launched with");


  // Every kFmaExp2Every-th softmax exponential on the FMA pipe (fwd_fp8/softmax.cuh) instead of
  // MUFU.EX2, whose 16 results per clock per SM bound the FP8 softmax where the GEMMs are short.
  // The polynomial costs ~8 issue slots against MUFU's one, so only a fraction pays, and only at
  // d 64: every 8th +3.1-3.8% on the whole fp8 grid; d 128 every 4th -1% at 2k to +1.2% at 8k;
  // d 256 every 8th -2%, every 4th -5% (H200, 2026-11-29).
  static constexpr int kFmaExp2Every = kHeadDim == 64 ? 8 : 0;
  // Overlapped mainloop, true: the softmax waits for the previous P V between its max reduction and
  // its exponentials, and O's rescale (predicated, not branched around) and P's conversion interleave
  // with the exponentials: d 64 +2-5%, d 128 +1-5% (H200, 2026-11-29; a rescale behind a branch
  // there was mixed, 8k -2%). false: the wait follows the exponentials and O is rescaled in the GEMM turn,
  // skipped where no row max moved: at d 256 the other order spills, and the 128-key block-descale
  // d 128 kernel ran 2-3% slower with it. The 192-key block-descale kernel takes it (with
  // kPvWaitAfterMax): 12% fewer cycles than without at 8k-16k, 9% at 2k (H200, 2026-12-01).
  static constexpr bool kPvWaitInSoftmax =
      kHeadDim == 64 || (kHeadDim == 128 && (!kBlockDescales || kBlockN_ == kFp8WideBlockN));
  // Where the softmax waits for the P V, whether that wait is pinned after the max reduction
  // (keep_next_wait_after; ptxas otherwise hoists it above the reduction) and the GEMM turn ends
  // there too instead of right after the issue (Fp8Consumer::mainloop_overlapped): the 192-key d 128
  // kernel +3% at 8k-16k for the pin and +1-3% more for the turn; the 128-key kernels lost 2-5% with
  // the pin (d 64, d 128 below 8k keys, softcap; H200, 2026-12-01).
  static constexpr bool kPvWaitAfterMax = kPvWaitInSoftmax && kBlockN == 192;
  // Row sums over P packed into f16 pairs (HADD2), which also feed P's e4m3 conversion: the 192-key
  // d 128 kernel -1.3-1.7% cycles at 8k-16k; the 128-key kernels +0.4-2% (d 64 16k +2%, d 128 2k
  // +1.1%, d 256 16k +0.4%), where the 48 extra f16 packs cost more than the halved adds save
  // (H200, 2026-12-01). Not in the grouped kernel: there P carries its group's v ratio (DescaleGroups),
  // and a ratio below 2^-10 (an all-zero v block given a tiny scale beside ordinary ones) puts that
  // group's P under f16's normal range (2^-14), so the row sum would lose its keys. A branch to float
  // sums for such groups is no way out: it lies between the next S GEMM's issue and its wait, and
  // ptxas then serializes the wgmmas (C7518) and moves 576 bytes of registers to the stack. Float sums
  // convert P to e4m3 straight from the floats: fewer instructions than the packed form (SASS 5320 ->
  // 5256) and 1.3-2.1% faster at 2 x 8k x 16 (H200, 2026-12-05, perf-notes v131).
  static constexpr int kDescaleGroupKeys = kDescaleGroupKeys_;
  static constexpr int kDescaleGroups = kBlockN / kDescaleGroupKeys;
  static constexpr bool kPackedRowSums = kBlockN == 192 && kDescaleGroups == 1;
  static constexpr bool kChunksAndSequsedQ = kChunksAndSequsedQ_;
  static_assert(kBlockN % kDescaleGroupKeys == 0 && kDescaleGroupKeys % 32 == 0,
                "descale groups must be whole k32 steps of a block");
  static_assert(kDescaleGroups == 1 || (kBlockDescales && !kSoftcap && !kVarlen),
                "descale groups are built for the dense block-descale kernels without a softcap");
  static constexpr int kSRegisters = kBlockN / 2;
  static constexpr int kORegisters = kHeadDimV / 2;
  static constexpr int kPSteps = kBlockN / 32;    // k32 steps of O += P V
  static constexpr int kQKSteps = kHeadDim / 32;  // k32 steps of S = Q K^T
  // Lean addressing at head dims 128 and 256, as in the 16-bit kernel (fwd/traits.cuh says why; FP8
  // d 64 lost 6% with it, d 128 gained 2.5-6.5%, d 256 neither gained nor lost).
  static constexpr bool kLeanAddressing = kHeadDim >= 128;
  // The warpgroup index read from lane 0 (warpgroup_of_thread, as the 16-bit kernel does): the dense
  // d 128 kernel gained 0.8-2.1% (8 shapes, 2k-16k, causal or not); d 64 and d 256 were level to -2%,
  // the softcap kernels lost 2-4%, and the other d 128 variants (block descales, keys-contiguous v)
  // did not gain (perf-notes v98). The variable-length kernels were not timed with it.
  static constexpr bool kWarpUniformWarpgroup =
      kHeadDim == 128 && !kBlockDescales_ && !kSoftcap_ && !kVtFromGlobal_ && !kVarlen_;
  // Q from registers for S = Q K^T, as in the 16-bit kernel (fwd/traits.cuh): kHeadDim / 8 registers,
  // where they fit beside O, S and P (kBlockN / 8) with 40 to spare, 48 with block descales or a
  // softcap (their scales; the d 256 softcap kernel spilled 8 bytes at 40): d 64, d 128 (192-key
  // blocks too: +1-2% at 8k-16k, H200 2026-11-29); d 256 spills.
  static constexpr int kQRegisterSlack = kBlockDescales || kSoftcap ? 48 : 40;
  static constexpr bool kQInRegisters =
      kHeadDim / 8 + kSRegisters + kBlockN / 8 + kORegisters <= kConsumerRegisters - kQRegisterSlack;

  // Tail split (fwd/split_plan.hpp): a split piece's epilogue stores its normalized O and LSE, and a
  // second kernel merges them (split_combine.cuh); the in-kernel merge of the 16-bit consumer cost
  // this consumer 6-7% of cycles even where no tile was split (perf-notes, sessions 8-9). Where it
  // was measured to pay (cycles, forward + combine, H200, 2026-12-01): d 128 16k -2.0%, 8k -1.2%;
  // softcap d 128 16k -5.4%, d 64 -6.1%; block descales with a softcap d 128 16k -2.8%. Not at head
  // dim 256 (the forward kernel 0.4% faster, the combine +1%) nor with block descales alone: that
  // consumer ran 3-7% slower with the split's code, split or not (2k: +7.3%).
  // Not with variable lengths: the split plan assumes every tile has the same key blocks.
  static constexpr bool kTailSplit = kHeadDim <= 128 && (kSoftcap || !kBlockDescales) && !kVarlen;
  // The variable-length split (plan_varlen_split: every tile in equal-count pieces, for decoding) and
  // GQA packing (fwd/packed_gqa.cuh), as in the 16-bit variable-length kernels and, as there, up to
  // head dim 128; packing not over q block descales (a packed tile's rows span query heads). A piece
  // stores its O normalized and its LSE in the 16-bit kernels' partial format (store_combine_partial),
  // so their combine kernel of the same head dim (VarlenCombineTraits, bf16 out) merges the pieces.
  // At d 256 only in the decoding-only variant, whose consumers compile no m64 loop.
  static constexpr bool kDecodingOnly = kDecodingOnly_;
  static_assert(!kDecodingOnly || (kVarlen && kHeadDim == 256 && !kChunksAndSequsedQ_),
                "the decoding-only variant: the d 256 variable-length kernel");
  static constexpr bool kVarlenSplit = kVarlen && (kHeadDim <= 128 || kDecodingOnly);
  static constexpr bool kPacksGqa = kVarlenSplit;
  // Tiles of at most 8 live rows computed transposed (fwd_fp8/transposed_decode.cuh): the d 64 decoding
  // kernels, 4-6% faster steps at b 8 x 16k (over a cache or from pages of 16), b 1 x 64k 1% slower. At d 128,
  // as in the 16-bit kernels, the stream bounds the step: level at b 8 x 16k, b 1 x 64k 2% slower,
  // b 32 x 1k 10% slower, the loop's longer chain per block showing (H200, 2026-12-03). Every tile of
  // the d 256 decoding-only variant.
  static constexpr bool kTransposedDecode = kPacksGqa && (kHeadDim == 64 || kDecodingOnly);
  // The partial round alone: every split tile costs the combine kernel a pass over its pieces, and
  // 1 round splits a third as many tiles as 2 (68 against 200 at 2048 tiles on 132 SMs) for the same
  // balance.
  static constexpr int kSplitRegionRounds = 1;

  static constexpr int kPingPongBarrierBase = 1;
  static constexpr int kPingPongBarrierThreads = 2 * kWarpgroupThreads;
  // Named barriers of the TMA-store epilogue: one per consumer warpgroup, after the ping-pong ones.
  static constexpr int kEpilogueBarrierBase = kPingPongBarrierBase + kConsumerWarpgroups;
  static constexpr int kEpilogueBarrierThreads = kWarpgroupThreads;
  // Variable-length kernels: the transposer warps, once they have zeroed the V rows past a sequence's
  // keys and before any of them transposes the stage (run_v_transposer).
  static constexpr int kTransposerBarrier = kEpilogueBarrierBase + kConsumerWarpgroups;
  static constexpr int kTransposerThreads = kTransposeWarps * 32;

  struct alignas(kSwizzleAtomBytes) SharedStorage {
    alignas(kSwizzleAtomBytes) std::uint8_t q[QTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t k[kStages][KTile::kBytes];
    // V as loaded, for the transposers (a 16-byte stub where kVtFromGlobal).
    alignas(kSwizzleAtomBytes) std::uint8_t v[kVtFromGlobal ? 1 : kStages][kVtFromGlobal ? 16 : VTile::kBytes];
    alignas(kSwizzleAtomBytes) std::uint8_t vt[kStages][VtTile::kBytes];
    // After the tiles, where an absent stage costs no alignment padding.
    std::conditional_t<kOThroughSmem, OStage, NoStorage> o;  // O tile (bf16) before its TMA store
    // Where kPvWaitAfterMax, the consumers' keep_next_wait_after stores (never read).
    std::conditional_t<kPvWaitAfterMax, float[kConsumerWarpgroups * kWarpgroupThreads], NoStorage> pv_fence;
    int visit;                        // TMA thread -> consumers, published with q_full: visit id
    int v_end[kStages];               // TMA thread -> transposers, with v_full: no V block follows
    std::uint64_t q_full;             // TMA -> consumers: Q tile landed (or no tile left)
    std::uint64_t q_empty;            // consumers -> TMA thread: last S GEMM of the tile done
    std::uint64_t k_full[kStages];    // TMA -> consumers: K stage landed
    std::uint64_t k_empty[kStages];   // consumers -> TMA thread: S GEMM done reading the K stage
    std::uint64_t v_full[kStages];    // TMA -> transposers: V stage landed (or v_end set)
    std::uint64_t v_empty[kStages];   // transposers -> TMA thread: V stage read
    std::uint64_t vt_full[kStages];   // transposers (or TMA) -> consumers: V^T stage written
    std::uint64_t vt_empty[kStages];  // consumers -> transposers: PV GEMM done reading the V^T stage
    // Variable-length kernels: TMA thread -> transposers, with v_full: the V stage's rows that hold the
    // sequence's keys (kBlockN but in a sequence's last block; the transposers zero the rest). Last, so
    // the dense kernels' layout is what it was.
    std::conditional_t<kVarlen, int[kStages], NoStorage> v_rows;
  };
  static constexpr int kSharedBytes = static_cast<int>(sizeof(SharedStorage)) + kSwizzleAtomBytes;
  static_assert(kSharedBytes <= 227 * 1024, "shared-memory plan exceeds the 227 KB an sm_90 CTA can have");
};

// The traits the variable-length split combine (fwd/varlen_combine.cuh) takes for FP8 pieces: those of
// the bf16 variable-length kernel of the head dim (the combine reads only its O register count,
// consumer warpgroups, rows per warpgroup and output type), so both merge with the same kernel. At
// d 256 those of the bf16 decoding kernel (the one variable-length d 256 kernel that splits).
template <int kHeadDim, bool kChunksAndSequsedQ = false>
using Fp8VarlenCombineTraits =
    std::conditional_t<kHeadDim == 256, DecodingTraits256<__nv_bfloat16>,
                       FwdTraits<kHeadDim, __nv_bfloat16, 128, kHeadDim == 64 ? 4 : 2, true, 2, /*kVarlen=*/true,
                                 false, kChunksAndSequsedQ>>;

// Fp8FwdTraits with the default block width (kChunksAndSequsedQ: the variant for chunks and seqused_q;
// kDecodingOnly: the d 256 decoding kernel's).
template <int kHeadDim, bool kBlockDescales, bool kSoftcap, bool kVtFromGlobal, bool kVarlen = false,
          bool kChunksAndSequsedQ = false, int kHeadDimV = kHeadDim, bool kDecodingOnly = false>
using Fp8Traits =
    Fp8FwdTraits<kHeadDim, kBlockDescales, kSoftcap, fp8_default_block_n(kHeadDim, kBlockDescales, kSoftcap),
                 kVtFromGlobal, kVarlen, fp8_default_block_n(kHeadDim, kBlockDescales, kSoftcap), kChunksAndSequsedQ,
                 kHeadDimV, kDecodingOnly>;

}  // namespace hopattn::sm90
