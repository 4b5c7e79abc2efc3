// The GPU quantizer's host side: how a job is cut into chunks (a CTA's unit), which kernel takes them,
// and the passes. Head dims 64, 128 and 256 go to the staged kernel (staged_kernel.cuh: a chunk copied
// into shared memory whole, read from there for amax and codes); other head dims to the generic one
// (generic_kernel.cuh). A scale group that fits one chunk is quantized in one pass (kFused); one
// spread over several (kPerTensor, kPerHead, long kPerBlock blocks) first reduces amax into its descale
// slot (zero, atomicMax, amax -> scale), then a quantize pass reads the finished scales. Consecutive
// jobs (q, k, v) that take the same staged kernel share each pass's launch.
#include "sm90/quant/quantize.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "sm90/host/device_guard.hpp"
#include "sm90/host/launch_support.hpp"
#include "sm90/host/tensor_map.hpp"
#include "sm90/quant/generic_kernel.cuh"
#include "sm90/quant/staged_kernel.cuh"

namespace hopattn::sm90 {
namespace {

using quant::Params;
using quant::Pass;

// Descale slots i of [0, count): zeroed before an amax pass, turned into scales after it. Slot i is
// group i % groups of head i / groups (one slot for kPerTensor: count 1).
__device__ float* slot_of(const Params& p, int i) {
  const int group = i % p.groups_per_head, bh = i / p.groups_per_head;
  return static_cast<float*>(p.descale.data) +
         detail::descale_offset(p.descale, p.granularity, bh / p.heads, bh % p.heads, group);
}
__global__ void reset_slots(Params p, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) *slot_of(p, i) = 0.0f;
}
__global__ void amax_to_scale(Params p, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) *slot_of(p, i) = detail::scale_from_amax(*slot_of(p, i), p.power_of_two_scales);
}

// One job's decomposition (Params' comment) and the kernel it takes.
struct JobPlan {
  Params p;
  bool fused;      // each scale group is one chunk: one kFused pass
  bool aligned;    // rows_aligned
  bool transform;  // incoherent processing (q and k)
  bool held;       // transformed fused chunks short enough for the kHeld kernels
  long long slots;  // descale slots that an amax pass zeroes and finishes
};

bool staged_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

// Whether every row may be copied by TMA and a lane's E codes stored as one vector: in and out
// TMA-addressable (data and every stride but the contiguous one multiples of 16 bytes). A
// keys-contiguous out is written through shared memory, so only its input counts.
bool rows_aligned(const detail::QuantizeJob& job) {
  return tma_addressable(bshd_view(*job.in, sixteen_bit_map_type(job.in->dtype))) &&
         (job.out_keys_contiguous || tma_addressable(fp8_byte_view(*job.out)));
}

template <int E>
bool held_fits(int chunk_rows) {
  return chunk_rows <= quant::staged_warps<E, true>() * quant::held_rows<E>();
}

// Held rows pay at d 128 and 256 (167 -> 142 and 229 -> 167 us for q, k, v at 2 x 8k x 16 x 128 / 1 x 8k x
// 16 x 256 with block scales); at d 64 they were level (101 -> 100 us, 7 CTAs an SM falling to 3) and
// their kernel spills, so d 64 transforms twice.
bool holds_rows(int head_dim, int chunk_rows) {
  return (head_dim == 128 && held_fits<4>(chunk_rows)) || (head_dim == 256 && held_fits<8>(chunk_rows));
}

Status plan_job(const detail::QuantizeJob& job, const detail::QuantizePlan& plan, JobPlan* out) {
  const bool per_block = plan.granularity == QuantGranularity::kPerBlock;
  Params& p = out->p;
  p = Params{*job.in, *job.out, *job.descale, job.batch, job.seqlen, job.heads, job.head_dim};
  p.group_rows = per_block ? job.block_rows : job.seqlen;
  p.groups_per_head = static_cast<int>(scale_blocks(plan.granularity, job.seqlen, job.block_rows));
  if (staged_head_dim(job.head_dim)) {
    const int row_bytes = job.head_dim * 2;
    out->fused = per_block && static_cast<long long>(job.block_rows) * row_bytes <= quant::kMaxStageBytes;
    p.chunk_rows = out->fused ? job.block_rows : quant::kChunkStageBytes / row_bytes;
  } else {
    out->fused = per_block;  // the generic kernel reads rows from global memory: any block is one chunk
    p.chunk_rows = out->fused ? job.block_rows : detail::kDefaultTileRows;
  }
  p.chunks_per_group = static_cast<int>((static_cast<long long>(p.group_rows) + p.chunk_rows - 1) / p.chunk_rows);
  p.granularity = plan.granularity;
  p.signs = plan.signs;
  p.norm = job.hadamard_norm;
  p.out_keys_contiguous = job.out_keys_contiguous;
  p.power_of_two_scales = job.power_of_two_scales;
  const long long chunks = static_cast<long long>(job.batch) * job.heads * p.groups_per_head * p.chunks_per_group;
  if (chunks > 0x7fffffffLL) {
    return Status(StatusCode::kUnsupported, "quantize_fp8: batch * heads * (chunks of rows per head) = " +
                                                std::to_string(chunks) + " exceeds the 2^31 - 1 chunks of one launch");
  }
  p.chunks = static_cast<int>(chunks);
  out->slots = plan.granularity == QuantGranularity::kPerTensor
                   ? 1
                   : static_cast<long long>(job.batch) * job.heads * p.groups_per_head;
  out->aligned = rows_aligned(job);
  out->transform = job.hadamard;
  out->held = job.hadamard && out->fused && holds_rows(job.head_dim, p.chunk_rows);
  return Status::Ok();
}

// The staged kernel for one (dtype, E, transform, alignment, held rows) over a group of jobs: as many
// persistent CTAs as fit the SMs at its shared memory and registers, or one per chunk where there are
// fewer chunks.
template <typename T, int E, bool kTransform, bool kAligned, bool kHeld>
cudaError_t launch_staged(const quant::StagedJobs& jobs, int sms, Pass pass, cudaStream_t stream) {
  CUtensorMap maps[quant::kMaxJobs] = {};  // read by the kAligned kernels only
  if constexpr (kAligned) {
    for (int j = 0; j < jobs.count; ++j) {
      const Params& p = jobs.job[j];
      if (!make_tensor_map(&maps[j], bshd_view(p.in, sixteen_bit_map_type(p.in.dtype)), p.head_dim,
                           quant::staged_box_rows(p),
                           CU_TENSOR_MAP_SWIZZLE_NONE)
               .ok()) {
        return cudaErrorInvalidValue;  // rows_aligned admitted the view: the driver refused the map
      }
    }
  }
  const auto kernel = quant::quantize_staged_chunks<T, E, kTransform, kAligned, kHeld>;
  constexpr int kThreads = quant::staged_threads<E, kHeld>();
  const std::size_t smem = quant::staged_smem_bytes<E>(jobs);
  int per_sm = 0;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  if (e != cudaSuccess) return e;
  const long long chunks = jobs.chunk_end[jobs.count - 1];
  const long long resident = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  const unsigned ctas = static_cast<unsigned>(chunks < resident ? chunks : resident);
  kernel<<<ctas, kThreads, smem, stream>>>(maps[0], maps[1], maps[2], jobs, pass);
  return cudaSuccess;
}

template <typename T, int E>
cudaError_t launch_staged(const quant::StagedJobs& jobs, const JobPlan& kind, int sms, Pass pass,
                          cudaStream_t stream) {
  if constexpr (E != 2) {  // holds_rows
    if (kind.held) {
      return kind.aligned ? launch_staged<T, E, true, true, true>(jobs, sms, pass, stream)
                          : launch_staged<T, E, true, false, true>(jobs, sms, pass, stream);
    }
  }
  if (kind.transform) {
    return kind.aligned ? launch_staged<T, E, true, true, false>(jobs, sms, pass, stream)
                        : launch_staged<T, E, true, false, false>(jobs, sms, pass, stream);
  }
  return kind.aligned ? launch_staged<T, E, false, true, false>(jobs, sms, pass, stream)
                      : launch_staged<T, E, false, false, false>(jobs, sms, pass, stream);
}

// One pass over jobs [0, count) of `plans`, which take the same kernel: one staged launch, or one
// generic launch a job (other head dims).
template <typename T>
cudaError_t launch_pass(const JobPlan* plans, int count, int sms, Pass pass, cudaStream_t stream) {
  const int d = plans[0].p.head_dim;
  if (!staged_head_dim(d)) {
    for (int j = 0; j < count; ++j) {
      const Params& p = plans[j].p;
      const auto kernel = plans[j].transform ? quant::quantize_generic_chunks<T, true>
                                             : quant::quantize_generic_chunks<T, false>;
      kernel<<<static_cast<unsigned>(p.chunks), quant::kGenericThreads, 0, stream>>>(p, pass);
    }
    return cudaSuccess;
  }
  quant::StagedJobs jobs{};
  jobs.count = count;
  int chunks = 0;
  for (int j = 0; j < count; ++j) {
    jobs.job[j] = plans[j].p;
    chunks += plans[j].p.chunks;  // quantize_fp8 keeps a launch's chunks under 2^31
    jobs.chunk_end[j] = chunks;
    const int rows = quant::stage_capacity_rows(plans[j].p);
    if (rows > jobs.stage_rows) jobs.stage_rows = rows;
    jobs.keys_contiguous |= plans[j].p.out_keys_contiguous;
  }
  switch (d) {
    case 64: return launch_staged<T, 2>(jobs, plans[0], sms, pass, stream);
    case 128: return launch_staged<T, 4>(jobs, plans[0], sms, pass, stream);
    default: return launch_staged<T, 8>(jobs, plans[0], sms, pass, stream);
  }
}

// Jobs that take the same kernel and the same passes, so that one launch can serve them (v may have
// a head dim of its own, and the kernel is chosen by it).
bool same_launch(const JobPlan& a, const JobPlan& b) {
  return a.p.head_dim == b.p.head_dim && a.fused == b.fused && a.aligned == b.aligned &&
         a.transform == b.transform && a.held == b.held;
}

// The passes of jobs [0, count) of `plans`, which share a launch, on a device of `sms` SMs.
cudaError_t quantize_group(const JobPlan* plans, int count, bool bf16, int sms, cudaStream_t stream) {
  const auto pass_all = [&](Pass pass) {
    return bf16 ? launch_pass<__nv_bfloat16>(plans, count, sms, pass, stream)
                : launch_pass<__half>(plans, count, sms, pass, stream);
  };
  if (plans[0].fused) return pass_all(Pass::kFused);
  for (int j = 0; j < count; ++j) {
    const unsigned slot_blocks = static_cast<unsigned>((plans[j].slots + 255) / 256);
    reset_slots<<<slot_blocks, 256, 0, stream>>>(plans[j].p, static_cast<int>(plans[j].slots));
  }
  if (cudaError_t e = pass_all(Pass::kAmax); e != cudaSuccess) return e;
  for (int j = 0; j < count; ++j) {
    const unsigned slot_blocks = static_cast<unsigned>((plans[j].slots + 255) / 256);
    amax_to_scale<<<slot_blocks, 256, 0, stream>>>(plans[j].p, static_cast<int>(plans[j].slots));
  }
  return pass_all(Pass::kQuantize);
}

}  // namespace

Status quantize_fp8(const detail::QuantizePlan& plan, void* stream) {
  const DeviceGuard device(plan.device_index);
  if (!device.selected()) {
    return Status(StatusCode::kCudaError, "quantize_fp8: cannot select CUDA device " + std::to_string(plan.device_index));
  }
  JobPlan plans[quant::kMaxJobs];
  for (int j = 0; j < quant::kMaxJobs; ++j) {
    if (Status s = plan_job(plan.jobs[j], plan, &plans[j]); !s.ok()) return s;
  }
  const bool bf16 = plan.jobs[0].in->dtype == Dtype::kBFloat16;
  const int sms = device_attribute(cudaDevAttrMultiProcessorCount, plan.device_index, 1);
  cudaError_t e = cudaSuccess;
  for (int first = 0, last = 1; first < quant::kMaxJobs && e == cudaSuccess; first = last, last = first + 1) {
    long long chunks = plans[first].p.chunks;
    while (last < quant::kMaxJobs && same_launch(plans[first], plans[last]) &&
           chunks + plans[last].p.chunks <= 0x7fffffffLL) {
      chunks += plans[last++].p.chunks;
    }
    e = quantize_group(plans + first, last - first, bf16, sms, static_cast<cudaStream_t>(stream));
  }
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("quantize_fp8: kernel launch failed: ") + cudaGetErrorString(e));
  }
  return Status::Ok();
}

}  // namespace hopattn::sm90
