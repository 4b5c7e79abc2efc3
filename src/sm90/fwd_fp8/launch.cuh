// Definition of launch_forward_fp8: tensor maps over the e4m3 tensors, parameters (descales
// included; params_builder.hpp), grid and tile hand-out (those of the 16-bit launch: launch.cuh's
// helpers, scheduler.cuh's protocol), and the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "sm90/fwd/launch.cuh"
#include "sm90/fwd_fp8/descale_plan.cuh"
#include "sm90/fwd_fp8/kernel.cuh"
#include "sm90/fwd_fp8/launch.hpp"
#include "sm90/fwd_fp8/params_builder.hpp"
#include "sm90/fwd_fp8/split_combine.cuh"
#include "sm90/fwd_fp8/traits.cuh"
#include "sm90/host/tensor_map.hpp"

namespace hopattn::sm90 {

// V given keys-contiguous (v.stride[1] == 1) as its transpose for TMA: (batch, head dim, heads, keys)
// with the keys contiguous; a 128-key box is one 128-byte swizzled row of V^T.
inline BshdView fp8_transposed_byte_view(const Tensor& v) {
  return BshdView{v.data, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, v.shape[0], v.shape[3], v.shape[2], v.shape[1],
                  v.stride[0], v.stride[3], v.stride[2]};
}

// The merge of split pieces (split_combine.cuh): one CTA per region tile, consumer warpgroup and
// group of O chunks, allowed to launch while the forward kernel runs (programmatic stream serialization).
template <class Traits>
Status launch_split_combine(const Fp8FwdParams& fp, cudaStream_t stream) {
  return launch_dependent_kernel(attention_forward_fp8_split_combine_kernel<Traits>, combine_grid<Traits>(fp.base),
                                 stream, fp, "launching the fp8 split combine kernel");
}

// The grouped kernel's descale plan (descale_plan.cuh) for `fp`, in scratch memory of `device` taken
// on `stream` (*plan; the caller gives it back once the forward is queued), its pointer set in `fp`.
template <class Traits>
Status plan_descale_groups(Fp8FwdParams* fp, int device, cudaStream_t stream, void** plan) {
  const FwdParams& p = fp->base;
  const int blocks = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const long long entries = static_cast<long long>(p.batch) * p.heads_kv * blocks;
  if (Status st = acquire_split_workspace(device, entries * sizeof(DescaleGroupPlan), stream, plan);
      !st.ok())
    return st;
  fp->descale_plan = static_cast<const DescaleGroupPlan*>(*plan);
  fp->descale_plan_blocks = blocks;
  constexpr int kThreads = 128;
  const unsigned grid = static_cast<unsigned>((entries + kThreads - 1) / kThreads);
  fp8_descale_group_plan_kernel<Traits::kDescaleGroups, Traits::kDescaleGroupKeys>
      <<<grid, kThreads, 0, stream>>>(*fp, static_cast<DescaleGroupPlan*>(*plan), blocks);
  return cuda_status(cudaGetLastError(), "launching the fp8 descale plan kernel");
}

template <class Traits>
Status launch_fp8_kernel(const FwdArgs& args, const detail::Problem& pr) {
  if (pr.paged && !Traits::kPagedKv)  // launch_forward_fp8 never picks these (192- or 96-key blocks)
    return Status(StatusCode::kUnsupported,
                  "internal error in the sm_90a fp8 forward launch: a paged cache needs power-of-two key blocks");
  // forward_fp8 takes launch_forward_fp8_chunks_seqused_q for these.
  if (detail::has_chunks_or_seqused_q(pr) && !Traits::kChunksAndSequsedQ)
    return Status(StatusCode::kUnsupported,
                  "internal error in the sm_90a fp8 forward launch: attention_chunk or "
                  "seqused_q in a kernel without them");
  if (Traits::kBlockDescales && (args.descale_block_rows_q % Traits::kRowsPerWarpgroup != 0 ||
                       args.descale_block_rows_kv % Traits::kDescaleGroupKeys != 0)) {
    return Status(StatusCode::kUnsupported,
                  "descale_block_rows_q " + std::to_string(args.descale_block_rows_q) + " / descale_block_rows_kv " +
                      std::to_string(args.descale_block_rows_kv) +
                      " is not supported by the sm_90a fp8 forward kernel; it needs multiples of " +
                      std::to_string(Traits::kRowsPerWarpgroup) + " and " + std::to_string(Traits::kDescaleGroupKeys));
  }
  // GQA packing (variable-length kernels up to d 128): where packs_gqa says it pays, as in the 16-bit
  // launch, but not over a q block descale, whose entries are per query head; in the d 256 decoding
  // kernel where decoding_kernel_packs says.
  const bool q_block_descale = args.q_block_descale.has_value();
  if constexpr (Traits::kDecodingOnly) {
    if (!fits_decoding_kernel(args.options.pack_gqa, pr, q_block_descale))
      return Status(StatusCode::kUnsupported, "internal error in the sm_90a fp8 forward launch: a tile of more than " +
                                                  std::to_string(kTransposedRows) + " rows for the decoding kernel");
  }
  const bool pack_gqa = Traits::kDecodingOnly ? decoding_kernel_packs(args.options.pack_gqa, pr, q_block_descale)
                                              : Traits::kPacksGqa && !q_block_descale &&
                                                    packs_gqa(args.options.pack_gqa, pr, Traits::kBlockM);
  if (Traits::kPacksGqa && args.q_block_descale && args.options.pack_gqa == KernelOptions::PackGqa::kOn)
    return Status(StatusCode::kUnsupported,
                  "KernelOptions::pack_gqa = kOn with q_block_descale is not supported by the sm_90a fp8 forward "
                  "kernel (a packed tile's rows span query heads, a q block descale is per query head); pack "
                  "with per-head q_descale, or leave pack_gqa at kAuto");
  const int head_ratio = pr.heads_q / pr.heads_kv;
  CUtensorMap tm_q, tm_k, tm_v;
  constexpr int kBox = Traits::kColsPerBlock;
  static_assert(kBox * Traits::kElementBytes == kSwizzleBytes, "TMA box must be one 128-byte swizzled row");
  if (Status st = pack_gqa ? make_packed_q_map(&tm_q, fp8_byte_view(args.q), kBox, head_ratio,
                                               Traits::kBlockM / head_ratio)
                           : make_tensor_map(&tm_q, fp8_byte_view(args.q), kBox, Traits::kBlockM);
      !st.ok())
    return st;
  const BshdView k_view = fp8_byte_view(args.k);
  // A paged cache (num_pages, page_size, heads_kv, d) is a dense tensor of num_pages batch entries; its
  // blocks load in chunks of at most a page (load_fp8_paged_chunks).
  const int kv_box_rows = pr.paged ? paged_chunk_rows(pr.page_size, Traits::kBlockN) : Traits::kBlockN;
  if (Status st = make_tensor_map(&tm_k, k_view, kBox, kv_box_rows); !st.ok()) return st;
  // Where V^T comes from global memory: V^T boxes of 128 keys x the head dim, and K's permuted rows
  // (producer.cuh); otherwise V in K's boxes, and the permuted map is not read.
  CUtensorMap tm_k_permuted = tm_k;
  // The block map folds heads into K's columns, so a box past head_dim would read the next head's
  // columns, not TMA's zero fill: head dims narrower than the kernel's take the rows map.
  const bool k_block_boxes =
      Traits::kVtFromGlobal && pr.head_dim == Traits::kHeadDim && permuted_block_map_applies(k_view);
  if constexpr (Traits::kVtFromGlobal) {
    if (Status st = k_block_boxes ? make_permuted_block_map(&tm_k_permuted, k_view, kBox, Traits::kBlockN)
                                  : make_permuted_rows_map(&tm_k_permuted, k_view, kBox);
        !st.ok())
      return st;
    const CUtensorMapSwizzle swizzle = Traits::kVtSwizzle64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
    if (Status st = make_tensor_map(&tm_v, fp8_transposed_byte_view(args.v), Traits::VtTile::kColsPerBlock,
                                    Traits::kHeadDimV, swizzle);
        !st.ok())
      return st;
  } else {
    if (Status st = make_tensor_map(&tm_v, fp8_byte_view(args.v), kBox, kv_box_rows); !st.ok()) return st;
  }
  // O (bf16): one box per consumer warpgroup's 64 rows and 64 columns, as in the 16-bit launch.
  CUtensorMap tm_o{};
  const BshdView out_view = bshd_view(args.out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  const bool store_o_by_tma = Traits::kOThroughSmem && tma_addressable(out_view);
  if (store_o_by_tma) {
    if (Status st = make_tensor_map(&tm_o, out_view, Traits::OTile::kColsPerBlock, Traits::kRowsPerWarpgroup);
        !st.ok())
      return st;
  }

  // Nothing to compute (validation refuses other empties).
  if (pr.seqlen_q == 0 || (pr.varlen_q && args.q.shape[0] == 0)) return Status::Ok();
  DeviceGuard device(pr.device_index);
  Fp8FwdParams fp = make_fp8_params(args, pr, Traits::kBlockM, Traits::kDescaleGroupKeys,
                                    heads_per_group(pr, pr.device_index, pack_gqa), pack_gqa);
  FwdParams& p = fp.base;
  fp.k_groups_per_batch = k_block_boxes ? pr.seqlen_k / 16 : 0;
  p.pingpong = p.pingpong && Traits::kPingPongPays;
  p.store_o_by_tma = store_o_by_tma;
  if (std::string why = fp8_params_error(fp, Traits::kBlockM); !why.empty())
    return Status(StatusCode::kUnsupported, "internal error in the sm_90a fp8 forward launch: " + why);

  auto kernel = attention_forward_fp8_kernel<Traits>;
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSharedBytes);
  if (Status st = cuda_status(attr, "raising the fp8 forward kernel's shared-memory limit"); !st.ok()) return st;

  // The hand-out of launch_forward (launch.cuh); split pieces (the tail split, or the variable-length
  // split) are merged by a second kernel.
  Schedule schedule;
  if (Status st = begin_schedule<Traits>(args, pr, &p, &schedule); !st.ok()) return st;
  const cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  // The grouped kernel's descale plan: computed on the stream right before it, in scratch memory
  // given back right after it (stream-ordered).
  Status launched = Status::Ok();
  void* plan = nullptr;
  if constexpr (Traits::kDescaleGroups > 1) launched = plan_descale_groups<Traits>(&fp, pr.device_index, stream, &plan);
  if (launched.ok()) {
    launched = launch_kernel(kernel, dim3(schedule.grid), dim3(Traits::kThreads), Traits::kSharedBytes, stream,
                             args.options.programmatic_launch, "launching the fp8 forward kernel", tm_q, tm_k,
                             tm_k_permuted, tm_v, tm_o, fp);
  }
  if (plan != nullptr) {
    const Status released = release_split_workspace(plan, stream);
    if (launched.ok()) launched = released;
  }
  if constexpr (Traits::kTailSplit) {
    if (launched.ok() && p.split.units > 0) launched = launch_split_combine<Traits>(fp, stream);
  }
  if constexpr (Traits::kVarlenSplit) {  // pieces in the 16-bit partial format: the bf16 combine merges them
    if (launched.ok() && p.split.units > 0)
      launched = launch_varlen_combine<Fp8VarlenCombineTraits<Traits::kHeadDim, Traits::kChunksAndSequsedQ>>(p, stream);
  }
  return end_schedule(args, schedule, launched);
}

// Whether head dim 128 (64: v in the ordinary layout) with block descales takes 192-key blocks: where
// its k/v descale rows are whole 192-key blocks or (dense batches) whole 64-key descale groups, where
// tiles see many keys (tile_keys: keys_per_tile) as without descales, or at any length where they are
// not whole 128-key blocks (they would otherwise be refused).
inline bool fp8_block_descales_take_wide_blocks(const FwdArgs& args, long long tile_keys, bool varlen) {
  const int rows = args.descale_block_rows_kv;
  const int narrow = fp8_default_block_n(128, true);
  return rows % (varlen ? kFp8WideBlockN : kFp8WideDescaleGroupKeys) == 0 &&
         (tile_keys >= kFp8WideBlockMinKeys || rows % narrow != 0);
}

// The kernel with per-block descale reads only when some are given (Fp8FwdTraits::kBlockDescales),
// with the softcap step only when a softcap is given; without either, head dims 128 and 64 (at d 64
// with v in the ordinary layout) take wider K blocks where a tile sees many keys (keys_per_tile at
// least kFp8WideBlockMinKeys: long key sequences, wide sliding windows), and do so with block
// descales whose k/v rows allow them (d 64 since v134: 128-row descales on 128-key blocks took 1.25
// ms against 0.99 per head at 2 x 8k x 16, 1.12 on these, H200 2026-12-05); head dim 256 with block
// descales takes 96-key blocks where the rows allow them (kFp8D256DescaleBlockN; rows of 32 but not
// 96, such as 128, the grouped kernel).
// kVtFromGlobal: v is keys-contiguous. kVarlen: the variable-length kernels (cu_seqlens_q /
// cu_seqlens_k / seqused_k / a paged cache), with the same choices by max_seqlen_k, but a paged cache
// takes neither wide block (192 or 96 keys would straddle pages of 128 keys or more).
template <int kHeadDim, bool kVtFromGlobal, bool kVarlen, int kHeadDimV>
Status launch_forward_fp8(const FwdArgs& args, const detail::Problem& pr) {
  static_assert(!(kVarlen && kVtFromGlobal), "variable-length FP8 kernels take v in the ordinary layout");
  // The default-width kernels: Traits<block descales, softcap>.
  using Plain = Fp8Traits<kHeadDim, false, false, kVtFromGlobal, kVarlen, false, kHeadDimV>;
  using Descales = Fp8Traits<kHeadDim, true, false, kVtFromGlobal, kVarlen, false, kHeadDimV>;
  using Softcap = Fp8Traits<kHeadDim, false, true, kVtFromGlobal, kVarlen, false, kHeadDimV>;
  using SoftcapDescales = Fp8Traits<kHeadDim, true, true, kVtFromGlobal, kVarlen, false, kHeadDimV>;
  const bool block_descales = args.q_block_descale || args.k_block_descale || args.v_block_descale;
  if (pr.softcap > 0.0f) {
    if (block_descales) return launch_fp8_kernel<SoftcapDescales>(args, pr);
    return launch_fp8_kernel<Softcap>(args, pr);
  }
  const bool wide_blocks_fit = !pr.paged;
  // Every FP8 kernel's tiles are kBlockM rows high: the keys one of them sees pick the wide blocks.
  const long long tile_keys = keys_per_tile(pr, Plain::kBlockM);
  if (block_descales) {
    if constexpr (kHeadDim == 128 || (kHeadDim == 64 && !kVtFromGlobal)) {
      if (wide_blocks_fit && fp8_block_descales_take_wide_blocks(args, tile_keys, kVarlen)) {
        if (args.descale_block_rows_kv % kFp8WideBlockN == 0)
          return launch_fp8_kernel<Fp8FwdTraits<kHeadDim, true, false, kFp8WideBlockN, kVtFromGlobal, kVarlen>>(args,
                                                                                                                pr);
        if constexpr (!kVarlen) {
          return launch_fp8_kernel<
              Fp8FwdTraits<kHeadDim, true, false, kFp8WideBlockN, kVtFromGlobal, false, kFp8WideDescaleGroupKeys>>(args,
                                                                                                                   pr);
        }
      }
    }
    if constexpr (kHeadDim == 256 && !kVtFromGlobal) {
      if (wide_blocks_fit && args.descale_block_rows_kv % kFp8D256DescaleBlockN == 0)
        return launch_fp8_kernel<Fp8FwdTraits<kHeadDim, true, false, kFp8D256DescaleBlockN, false, kVarlen>>(args, pr);
      if constexpr (!kVarlen) {
        if (wide_blocks_fit && args.descale_block_rows_kv % kFp8D256DescaleGroupKeys == 0)
          return launch_fp8_kernel<Fp8FwdTraits<kHeadDim, true, false, kFp8D256DescaleBlockN, false, false,
                                                kFp8D256DescaleGroupKeys>>(args, pr);
      }
    }
    return launch_fp8_kernel<Descales>(args, pr);
  }
  if constexpr (kHeadDim == 128 || (kHeadDim == 64 && !kVtFromGlobal)) {
    if (wide_blocks_fit && tile_keys >= kFp8WideBlockMinKeys)
      return launch_fp8_kernel<Fp8FwdTraits<kHeadDim, false, false, kFp8WideBlockN, kVtFromGlobal, kVarlen>>(args, pr);
  }
  return launch_fp8_kernel<Plain>(args, pr);
}

// Calls with attention_chunk > 0 or seqused_q in kernels of their own (Fp8FwdTraits::kChunksAndSequsedQ),
// so that no other kernel carries their tests: the default-width kernels (128 keys; 64 at d 256 with
// block descales or softcap), softcap and block descales as launch_forward_fp8 picks them. At d 64 and
// 128 the variable-length ones, which take dense batches too; at d 192 and 256 the dense one, so chunks
// only (the d 256 variable-length kernel spilled with chunks and seqused_q, 2026-12-05). The wide-block
// kernels spilled with chunks (perf-notes session 42).
template <int kHeadDim, int kHeadDimV>
Status launch_forward_fp8_chunks_seqused_q(const FwdArgs& args, const detail::Problem& pr) {
  constexpr bool kVarlen = kHeadDim <= 128;
  using Plain = Fp8Traits<kHeadDim, false, false, false, kVarlen, true, kHeadDimV>;
  using Descales = Fp8Traits<kHeadDim, true, false, false, kVarlen, true, kHeadDimV>;
  using Softcap = Fp8Traits<kHeadDim, false, true, false, kVarlen, true, kHeadDimV>;
  using SoftcapDescales = Fp8Traits<kHeadDim, true, true, false, kVarlen, true, kHeadDimV>;
  const bool block_descales = args.q_block_descale || args.k_block_descale || args.v_block_descale;
  if (pr.softcap > 0.0f)
    return block_descales ? launch_fp8_kernel<SoftcapDescales>(args, pr) : launch_fp8_kernel<Softcap>(args, pr);
  return block_descales ? launch_fp8_kernel<Descales>(args, pr) : launch_fp8_kernel<Plain>(args, pr);
}

// Decoding steps at head dims 136-256 with v in the ordinary layout (takes_decoding_kernel,
// params_builder.hpp): the d 256 variable-length kernel's decoding-only variant (Fp8FwdTraits::kDecodingOnly),
// with the softcap step or without, per-head descales (128-key blocks) or block descales too (64-key
// blocks, as the other d 256 block-descale kernels take: 128 spilled there).
template <int kHeadDim>
Status launch_forward_fp8_decoding(const FwdArgs& args, const detail::Problem& pr) {
  static_assert(kHeadDim == 256, "the decoding-only variant: d 256");
  using Plain = Fp8Traits<256, false, false, false, /*kVarlen=*/true, false, 256, /*kDecodingOnly=*/true>;
  using Softcap = Fp8Traits<256, false, true, false, /*kVarlen=*/true, false, 256, /*kDecodingOnly=*/true>;
  using Descales = Fp8Traits<256, true, false, false, /*kVarlen=*/true, false, 256, /*kDecodingOnly=*/true>;
  using SoftcapDescales = Fp8Traits<256, true, true, false, /*kVarlen=*/true, false, 256, /*kDecodingOnly=*/true>;
  static_assert(Descales::kBlockN == 64 && SoftcapDescales::kBlockN == 64,
                "takes_decoding_kernel admits block descales of multiples of 64 rows");
  static_assert(Fp8TransposedDecode<Plain>::kRows == kTransposedRows,
                "the decoding kernel's routing (params_builder.hpp) counts the transposed tile's rows");
  if (args.q_block_descale || args.k_block_descale || args.v_block_descale)
    return pr.softcap > 0.0f ? launch_fp8_kernel<SoftcapDescales>(args, pr) : launch_fp8_kernel<Descales>(args, pr);
  return pr.softcap > 0.0f ? launch_fp8_kernel<Softcap>(args, pr) : launch_fp8_kernel<Plain>(args, pr);
}

}  // namespace hopattn::sm90
