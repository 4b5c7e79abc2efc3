// launch_forward<Traits>: tensor maps, parameters, grid, and the launch of one kernel configuration.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "api/problem.hpp"
#include "sm90/fwd/kernel.cuh"
#include "sm90/fwd/params_builder.hpp"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd/traits.cuh"
#include "sm90/fwd/varlen_combine.cuh"
#include "sm90/host/device_guard.hpp"
#include "sm90/host/launch_support.hpp"
#include "sm90/host/tensor_map.hpp"
#include "sm90/host/split_workspace.hpp"
#include "sm90/host/tile_counters.hpp"

namespace hopattn::sm90 {

// How many (batch, head) pairs of the tile grid the scheduler interleaves: about as many as keep their
// K/V within half of L2 and never fewer than the query heads that share one K/V head (GQA), which read
// the same K/V; rounded down to a divisor of the pairs so that every group is the same size. A packed
// GQA grid's heads are the K/V heads.
inline int heads_per_group(const detail::Problem& pr, int device, bool pack_gqa) {
  const std::int64_t l2_budget = device_attribute(cudaDevAttrL2CacheSize, device, 50 << 20) / 2;
  const std::int64_t kv_bytes = std::int64_t(pr.seqlen_k) * (pr.head_dim + pr.head_dim_v) * 2 /*bytes*/;
  const std::int64_t kv_heads = kv_bytes > 0 ? std::max<std::int64_t>(1, l2_budget / kv_bytes) : 1;
  const int q_heads_per_kv_head = pack_gqa ? 1 : pr.heads_q / pr.heads_kv;
  const std::int64_t total = std::int64_t(pr.batch) * tile_grid_heads(pr, pack_gqa);
  std::int64_t group = std::min<std::int64_t>(kv_heads * q_heads_per_kv_head, total);
  while (total % group != 0) --group;
  return static_cast<int>(group);
}

// The hand-out of a launch (scheduler.cuh), shared by the 16-bit and FP8 launches: the tail split
// (split_plan.hpp; where Traits::kTailSplit, and only with the persistent hand-out, whose claims it
// extends), the grid, and a counter slot for a persistent or split launch. A split launch also takes
// its partials' workspace, which end_schedule gives back once the kernel is queued.
struct Schedule {
  int grid = 0;
  void* split_workspace = nullptr;
};

template <class Traits>
Status begin_schedule(const FwdArgs& args, const detail::Problem& pr, FwdParams* p, Schedule* schedule) {
  const int sms = device_attribute(cudaDevAttrMultiProcessorCount, pr.device_index, 1);
  const int tile_blocks = (pr.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const bool uniform = p->window_left < 0 && p->window_right < 0 && p->attention_chunk == 0;
  if (!args.options.persistent) {
    p->split = no_split_plan(p->num_tiles);
  } else if constexpr (Traits::kVarlenSplit) {
    p->split = plan_varlen_split(p->num_tiles, tile_blocks, sms, args.num_splits, Traits::kConsumerWarpgroups,
                                 is_decoding_step(p->seqlen_q, p->pack_gqa ? p->head_ratio : 1, Traits::kBlockM));
  } else if constexpr (Traits::kTailSplit) {
    p->split = plan_split(p->num_tiles, tile_blocks, sms, args.num_splits, uniform, Traits::kConsumerWarpgroups,
                          Traits::kSplitRegionRounds);
  } else {
    p->split = no_split_plan(p->num_tiles);
  }
  const int items = p->split.first_tile + p->split.units;
  const bool persistent = args.options.persistent && items > sms;
  schedule->grid = persistent ? sms : items;
  if (persistent || p->split.units > 0) {
    int* slot = nullptr;
    if (Status st = acquire_tile_counter(pr.device_index, &slot); !st.ok()) return st;
    if (persistent) p->tile_counter = slot;
    p->split_counters = slot + kTilePairInts;
  }
  if (p->split.units > 0) {
    using Partials = SplitPartials<Traits::kORegisters, Traits::kConsumerWarpgroups>;
    const std::size_t bytes = 2 * std::size_t(p->split.units) * Partials::kBytesPerSlot;
    if (Status st = acquire_split_workspace(pr.device_index, bytes, static_cast<cudaStream_t>(args.stream),
                                            &schedule->split_workspace);
        !st.ok())
      return st;
    p->split_partials = static_cast<float*>(schedule->split_workspace);
  }
  return Status::Ok();
}

// After the launch (queued or failed): gives the split workspace back, stream-ordered.
inline Status end_schedule(const FwdArgs& args, const Schedule& schedule, Status launched) {
  if (schedule.split_workspace == nullptr) return launched;
  Status released = release_split_workspace(schedule.split_workspace, static_cast<cudaStream_t>(args.stream));
  return launched.ok() ? released : launched;
}

template <class Traits>
Status launch_forward(const FwdArgs& args, const detail::Problem& pr) {
  // forward.cu takes launch_shipped_chunks_seqused_q_forward for these.
  if (detail::has_chunks_or_seqused_q(pr) && !Traits::kChunksAndSequsedQ)
    return Status(StatusCode::kUnsupported, "internal error in the sm_90a forward launch: attention_chunk or "
                                            "seqused_q in a kernel without them");
  const CUtensorMapDataType dtype =
      Traits::kIsBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap tm_q, tm_k, tm_v;
  if constexpr (Traits::kDecodingOnly) {
    static_assert(TransposedDecode<Traits>::kRows == kTransposedRows,
                  "the decoding kernel's routing (params_builder.hpp) counts the transposed tile's rows");
    if (!fits_decoding_kernel(args.options.pack_gqa, pr))
      return Status(StatusCode::kUnsupported, "internal error in the sm_90a forward launch: a tile of more than " +
                                                  std::to_string(kTransposedRows) + " rows for the decoding kernel");
  }
  const bool pack_gqa = Traits::kDecodingOnly ? decoding_kernel_packs(args.options.pack_gqa, pr)
                                              : Traits::kPacksGqa && packs_gqa(args.options.pack_gqa, pr, Traits::kBlockM);
  const int head_ratio = pr.heads_q / pr.heads_kv;
  if (Status st = pack_gqa ? make_packed_q_map(&tm_q, bshd_view(args.q, dtype), Traits::kColsPerBlock, head_ratio,
                                               Traits::kBlockM / head_ratio)
                           : make_tensor_map(&tm_q, bshd_view(args.q, dtype), Traits::kColsPerBlock, Traits::kBlockM);
      !st.ok())
    return st;
  // A paged cache (num_pages, page_size, heads_kv, d) is a dense tensor of num_pages batch entries; its
  // blocks load in chunks of at most a page (producer.cuh, load_paged_kv).
  const int kv_box_rows = pr.paged ? paged_chunk_rows(pr.page_size, Traits::kBlockN) : Traits::kBlockN;
  if (Status st = make_tensor_map(&tm_k, bshd_view(args.k, dtype), Traits::kColsPerBlock, kv_box_rows); !st.ok())
    return st;
  if (Status st = make_tensor_map(&tm_v, bshd_view(args.v, dtype), Traits::kColsPerBlock, kv_box_rows); !st.ok())
    return st;
  // O: one box per consumer warpgroup's 64 rows and 64 columns.
  CUtensorMap tm_o{};
  const BshdView out_view = bshd_view(args.out, dtype);
  const bool store_o_by_tma = Traits::kOThroughSmem && tma_addressable(out_view);
  if (store_o_by_tma) {
    if (Status st = make_tensor_map(&tm_o, out_view, Traits::kColsPerBlock, Traits::kRowsPerWarpgroup); !st.ok())
      return st;
  }

  // Nothing to compute (validation refuses other empties).
  if (pr.seqlen_q == 0 || (pr.varlen_q && args.q.shape[0] == 0)) return Status::Ok();
  DeviceGuard device(pr.device_index);
  FwdParams p =
      make_fwd_params(args, pr, Traits::kBlockM, heads_per_group(pr, pr.device_index, pack_gqa), pack_gqa);
  p.store_o_by_tma = store_o_by_tma;
  // A field left unset would make the kernel decode garbage tiles and write nowhere, silently.
  if (std::string why = fwd_params_error(p, Traits::kBlockM); !why.empty())
    return Status(StatusCode::kUnsupported, "internal error in the sm_90a forward launch: " + why);
  auto kernel = attention_forward_kernel<Traits>;
  if constexpr (Traits::kKvByCpAsync) {
    if (pr.paged) {
      switch (paged_kv_copy_source(args, pr, Traits::kBlockM, CpAsyncKvLoader<Traits>::kRowsPerPass)) {
        case KvCopySource::kAnyPages: kernel = attention_forward_kernel<Traits, KvCopySource::kAnyPages>; break;
        case KvCopySource::kRowPages: kernel = attention_forward_kernel<Traits, KvCopySource::kRowPages>; break;
        default: kernel = attention_forward_kernel<Traits, KvCopySource::kPages>;
      }
    }
  }
  const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSharedBytes);
  if (Status st = cuda_status(attr_status, "raising the forward kernel's shared-memory limit"); !st.ok()) return st;

  Schedule schedule;
  if (Status st = begin_schedule<Traits>(args, pr, &p, &schedule); !st.ok()) return st;
  const cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  Status launched = launch_kernel(kernel, schedule.grid, dim3(Traits::kThreads), Traits::kSharedBytes, stream,
                                  args.options.programmatic_launch, "launching the forward kernel", tm_q, tm_k, tm_v,
                                  tm_o, p);
  if constexpr (Traits::kVarlenSplit) {  // split pieces are merged by a second kernel
    if (launched.ok() && p.split.units > 0) launched = launch_varlen_combine<Traits>(p, stream);
  }
  return end_schedule(args, schedule, launched);
}

}  // namespace hopattn::sm90
