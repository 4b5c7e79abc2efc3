// launch_mla_forward: tensor maps, parameters, the split-KV plan, the kernel and, split, the combine.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "sm90/host/device_guard.hpp"
#include "sm90/host/int_array.hpp"
#include "sm90/host/launch_support.hpp"
#include "sm90/host/split_workspace.hpp"
#include "sm90/host/tensor_map.hpp"
#include "sm90/mla/combine.cuh"
#include "sm90/mla/consumer.cuh"
#include "sm90/mla/kernel.cuh"
#include "sm90/mla/launch.hpp"
#include "sm90/mla/narrow_consumer.cuh"
#include "sm90/mla/narrow_traits.cuh"
#include "sm90/mla/traits.cuh"

namespace hopattn::sm90 {

// Splits of each tile's key blocks: FwdArgs::num_splits when given, else the count that minimizes
// waves x blocks per split (a CTA's blocks run one after another; CTAs past a whole wave of SMs wait for
// one) plus what a split adds: its partial rows (513 floats a live row) written, then read back by the
// combine, and its CTA's start. That last term's weight, 14 K/V blocks per 64 live rows spread over the
// SMs, is fit to a sweep of num_splits (perf-notes v139, call L: batch 1 x 128 heads x 32k keys is
// fastest at 48 splits, 1.14x the 64 that pure wave counting picks; 4k keys at 16-48). Never a split
// without blocks.
inline int mla_splits(int requested, int tiles, int live_rows_per_tile, int key_blocks, int sms) {
  if (requested > 0) {
    const int per_split = (key_blocks + std::min(requested, key_blocks) - 1) / std::min(requested, key_blocks);
    return (key_blocks + per_split - 1) / per_split;
  }
  const double partial_blocks = 14.0 * live_rows_per_tile / 64.0;
  int best = 1;
  double best_cost = 0.0;
  for (int splits = 1; splits <= std::min(key_blocks, 256); ++splits) {
    const int per_split = (key_blocks + splits - 1) / splits;
    if ((key_blocks + per_split - 1) / per_split != splits) continue;  // the same blocks as fewer splits
    const double waves = std::ceil(double(tiles) * splits / sms);
    const double cost = waves * per_split + (splits > 1 ? partial_blocks * tiles * splits / sms : 0.0);
    if (splits == 1 || cost < best_cost) best = splits, best_cost = cost;
  }
  return best;
}

inline MlaRows mla_rows(const Tensor& t) { return MlaRows{const_cast<void*>(t.data), t.stride[0], t.stride[1], t.stride[2]}; }

// One MLA forward launch in tiles of Traits::kBlockM packed rows, computed by Consumer.
template <class Traits, class Consumer>
Status launch_mla_tiles(const FwdArgs& args, const detail::Problem& pr) {
  const CUtensorMapDataType dtype = Traits::kIsBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  // A paged cache (num_pages, page_size, heads_kv, d) is a dense tensor of num_pages entries, loaded
  // in boxes of at most a page (mla/producer.cuh).
  const int box_rows = pr.paged ? std::min(pr.page_size, Traits::kBlockN) : Traits::kBlockN;
  CUtensorMap tm_k, tm_v;
  if (Status st = make_tensor_map(&tm_k, bshd_view(args.k, dtype), 64, box_rows); !st.ok()) return st;
  if (Status st = make_tensor_map(&tm_v, bshd_view(args.v, dtype), 64, box_rows); !st.ok()) return st;

  DeviceGuard device(pr.device_index);
  MlaParams p{};
  p.batch = pr.batch;
  p.heads_kv = pr.heads_kv;
  p.head_ratio = pr.heads_q / pr.heads_kv;
  p.seqlen_q = pr.seqlen_q;
  p.seqlen_k = pr.seqlen_k;
  p.packed_rows = pr.seqlen_q * p.head_ratio;
  p.m_blocks = (p.packed_rows + Traits::kBlockM - 1) / Traits::kBlockM;
  p.head_ratio_divisor = FastDivisor(static_cast<std::uint32_t>(p.head_ratio));
  p.scale_log2 = pr.softmax_scale * static_cast<float>(M_LOG2E);
  p.causal = pr.causal;
  p.seqused_k = int_array_or_null(args.seqused_k);
  if (pr.paged) set_page_table(p, *args.page_table, pr.page_size);
  p.q = mla_rows(args.q);
  p.qv = mla_rows(*args.qv);
  p.out = mla_rows(args.out);
  if (args.lse) {
    p.lse = static_cast<float*>(args.lse->data);
    p.lse_batch_stride = args.lse->stride[0];
    p.lse_head_stride = args.lse->stride[1];
    p.lse_row_stride = args.lse->stride[2];
  }
  const int tiles = p.batch * p.heads_kv * p.m_blocks;
  const int key_blocks = std::max(1, (pr.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN);
  const int sms = device_attribute(cudaDevAttrMultiProcessorCount, pr.device_index, 132);
  p.splits = mla_splits(args.num_splits, tiles, std::min(p.packed_rows, Traits::kBlockM), key_blocks, sms);
  p.blocks_per_split = (key_blocks + p.splits - 1) / p.splits;
  if (p.m_blocks * p.heads_kv > 65535 || p.batch > 65535)
    return Status(StatusCode::kUnsupported, "qv: batch " + std::to_string(p.batch) + " and heads_kv x row tiles " +
                                                std::to_string(p.m_blocks * p.heads_kv) +
                                                " must each be at most 65535 (the MLA kernel's grid)");

  const cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  void* workspace = nullptr;
  if (p.splits > 1) {
    const std::size_t slots = std::size_t(tiles) * p.splits * Traits::kBlockM;
    if (Status st = acquire_split_workspace(pr.device_index, slots * (Traits::kHeadDimV + 1) * sizeof(float), stream,
                                            &workspace);
        !st.ok())
      return st;
    p.partial_o = static_cast<float*>(workspace);
    p.partial_lse = p.partial_o + slots * Traits::kHeadDimV;
  }
  auto kernel = mla_forward_kernel<Traits, Consumer>;
  Status launched = cuda_status(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSharedBytes),
      "raising the MLA forward kernel's shared-memory limit");
  if (launched.ok()) {
    const dim3 grid(p.splits, p.m_blocks * p.heads_kv, p.batch);
    launched = launch_kernel(kernel, grid, dim3(Traits::kThreads), Traits::kSharedBytes, stream,
                             args.options.programmatic_launch, "launching the MLA forward kernel", tm_k, tm_v, p);
  }
  if (launched.ok() && p.splits > 1) {
    const int rows = tiles * Traits::kBlockM;
    static_assert(kMlaCombineWarps * 32 == 128, "launch_dependent_kernel launches 128-thread CTAs");
    launched = launch_dependent_kernel(mla_combine_kernel<Traits>, dim3((rows + kMlaCombineWarps - 1) / kMlaCombineWarps),
                                       stream, p, "launching the MLA split combine kernel");
  }
  if (workspace == nullptr) return launched;
  Status released = release_split_workspace(workspace, stream);
  return launched.ok() ? released : launched;
}

// A step of at most 32 packed rows (a decoding step of 16 or 32 query heads a K/V head, or two rows of
// 16) runs in narrow tiles, computed transposed (mla/narrow_traits.cuh); wider ones in 64-row tiles.
template <typename Element>
Status launch_mla_forward(const FwdArgs& args, const detail::Problem& pr) {
  if (pr.seqlen_q == 0) return Status::Ok();
  const int packed_rows = pr.seqlen_q * (pr.heads_q / pr.heads_kv);
  using Narrow16 = MlaNarrowTraits<Element, 16>;
  using Narrow32 = MlaNarrowTraits<Element, 32>;
  using Wide = MlaTraits<Element>;
  if (packed_rows <= 16) return launch_mla_tiles<Narrow16, MlaNarrowConsumer<Narrow16>>(args, pr);
  if (packed_rows <= 32) return launch_mla_tiles<Narrow32, MlaNarrowConsumer<Narrow32>>(args, pr);
  return launch_mla_tiles<Wide, MlaConsumer<Wide>>(args, pr);
}

}  // namespace hopattn::sm90
