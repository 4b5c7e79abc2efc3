// The GPU quantizer's host side: how a job is cut into chunks (one per CTA), which kernel takes them,
// and the passes. Head dims 64, 128 and 256 go to the staged kernel (staged_kernel.cuh: a chunk copied
// into shared memory whole, read from there for amax and codes); other head dims to the generic one
// (generic_kernel.cuh). A scale group that fits one chunk is quantized in one launch (kFused); one
// spread over several (kPerTensor, kPerHead, long kPerBlock blocks) first reduces amax into its descale
// slot (zero, atomicMax, amax -> scale), then a quantize launch reads the finished scales.
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
  if (i < count) *slot_of(p, i) = detail::scale_from_amax(*slot_of(p, i));
}

// The staged kernel for one (dtype, E, transform, alignment, held rows): as many persistent CTAs as fit
// the SMs at its shared memory and registers, or one per chunk where there are fewer chunks.
template <typename T, int E, bool kTransform, bool kAligned, bool kHeld>
cudaError_t launch_staged(const Params& p, Pass pass, cudaStream_t stream) {
  CUtensorMap in_map{};  // read by the kAligned kernels only
  if constexpr (kAligned) {
    const auto dtype =
        std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    if (!make_tensor_map(&in_map, bshd_view(p.in, dtype), p.head_dim, quant::staged_box_rows(p),
                         CU_TENSOR_MAP_SWIZZLE_NONE)
             .ok()) {
      return cudaErrorInvalidValue;  // rows_aligned admitted the view: the driver refused the map
    }
  }
  const auto kernel = quant::quantize_staged_chunks<T, E, kTransform, kAligned, kHeld>;
  constexpr int kThreads = quant::staged_threads<E, kHeld>();
  const std::size_t smem = quant::staged_smem_bytes<E>(p);
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess) e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  if (e != cudaSuccess) return e;
  const long long resident = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  const unsigned ctas = static_cast<unsigned>(p.chunks < resident ? p.chunks : resident);
  kernel<<<ctas, kThreads, smem, stream>>>(in_map, p, pass);
  return cudaSuccess;
}

// Transformed fused chunks short enough for every warp to hold its rows go to the kHeld kernels.
template <typename T, int E>
cudaError_t launch_staged(const Params& p, bool transform, bool aligned, Pass pass, cudaStream_t stream) {
  if (transform) {
    const bool held = pass == Pass::kFused && p.chunk_rows <= quant::staged_warps<E, true>() * quant::held_rows<E>();
    if (held) {
      return aligned ? launch_staged<T, E, true, true, true>(p, pass, stream)
                     : launch_staged<T, E, true, false, true>(p, pass, stream);
    }
    return aligned ? launch_staged<T, E, true, true, false>(p, pass, stream)
                   : launch_staged<T, E, true, false, false>(p, pass, stream);
  }
  return aligned ? launch_staged<T, E, false, true, false>(p, pass, stream)
                 : launch_staged<T, E, false, false, false>(p, pass, stream);
}

// transform: validation admits it at d 64, 128 and 256 only, which the staged kernel takes.
template <typename T>
cudaError_t launch_chunks(const Params& p, bool transform, bool aligned, Pass pass, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return launch_staged<T, 2>(p, transform, aligned, pass, stream);
    case 128: return launch_staged<T, 4>(p, transform, aligned, pass, stream);
    case 256: return launch_staged<T, 8>(p, transform, aligned, pass, stream);
    default:
      quant::quantize_generic_chunks<T><<<static_cast<unsigned>(p.chunks), quant::kGenericThreads, 0, stream>>>(p, pass);
      return cudaSuccess;
  }
}

bool staged_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

// Whether every row may be copied in 16-byte pieces and a lane's E codes stored as one vector: the
// views' data and every stride but the contiguous one multiples of 16 bytes. A keys-contiguous out is
// written through shared memory, so only its input counts.
bool rows_aligned(const detail::QuantizeJob& job) {
  const auto aligned = [](const Tensor& t, int element_bytes, int contiguous_dim) {
    if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
    for (int d = 0; d < t.rank; ++d) {
      if (d != contiguous_dim && (t.stride[d] * element_bytes) % 16 != 0) return false;
    }
    return true;
  };
  return aligned(*job.in, 2, 3) && (job.out_keys_contiguous || aligned(*job.out, 1, 3));
}

// The job's groups and chunks (Params' comment); fused when a group is one chunk.
Params make_params(const detail::QuantizeJob& job, const detail::QuantizePlan& plan, bool* fused) {
  const bool per_block = plan.granularity == QuantGranularity::kPerBlock;
  Params p{*job.in, *job.out, *job.descale, job.batch, job.seqlen, job.heads, job.head_dim};
  p.group_rows = per_block ? job.block_rows : job.seqlen;
  p.groups_per_head = static_cast<int>(scale_blocks(plan.granularity, job.seqlen, job.block_rows));
  if (staged_head_dim(job.head_dim)) {
    const int row_bytes = job.head_dim * 2;
    *fused = per_block && static_cast<long long>(job.block_rows) * row_bytes <= quant::kMaxStageBytes;
    p.chunk_rows = *fused ? job.block_rows : quant::kChunkStageBytes / row_bytes;
  } else {
    *fused = per_block;  // the generic kernel reads rows from global memory: any block is one chunk
    p.chunk_rows = *fused ? job.block_rows : detail::kDefaultTileRows;
  }
  p.chunks_per_group = static_cast<int>((static_cast<long long>(p.group_rows) + p.chunk_rows - 1) / p.chunk_rows);
  p.granularity = plan.granularity;
  p.signs = plan.signs;
  p.norm = job.hadamard_norm;
  p.out_keys_contiguous = job.out_keys_contiguous;
  return p;
}

Status quantize_job(const detail::QuantizeJob& job, const detail::QuantizePlan& plan, cudaStream_t stream) {
  bool fused = false;
  Params p = make_params(job, plan, &fused);
  const long long chunks = static_cast<long long>(job.batch) * job.heads * p.groups_per_head * p.chunks_per_group;
  const long long slots = plan.granularity == QuantGranularity::kPerTensor
                              ? 1
                              : static_cast<long long>(job.batch) * job.heads * p.groups_per_head;
  if (chunks > 0x7fffffffLL) {
    return Status(StatusCode::kUnsupported, "quantize_fp8: batch * heads * (chunks of rows per head) = " +
                                                std::to_string(chunks) + " exceeds the 2^31 - 1 chunks of one launch");
  }
  p.chunks = static_cast<int>(chunks);
  const bool bf16 = job.in->dtype == Dtype::kBFloat16;
  const bool aligned = rows_aligned(job);
  const auto chunks_pass = [&](Pass pass) {
    return bf16 ? launch_chunks<__nv_bfloat16>(p, job.hadamard, aligned, pass, stream)
                : launch_chunks<__half>(p, job.hadamard, aligned, pass, stream);
  };
  cudaError_t e = cudaSuccess;
  if (fused) {
    e = chunks_pass(Pass::kFused);
  } else {
    const int count = static_cast<int>(slots);
    const unsigned slot_blocks = static_cast<unsigned>((slots + 255) / 256);
    reset_slots<<<slot_blocks, 256, 0, stream>>>(p, count);
    e = chunks_pass(Pass::kAmax);
    if (e == cudaSuccess) {
      amax_to_scale<<<slot_blocks, 256, 0, stream>>>(p, count);
      e = chunks_pass(Pass::kQuantize);
    }
  }
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("quantize_fp8: kernel launch failed: ") + cudaGetErrorString(e));
  }
  return Status::Ok();
}

}  // namespace

Status quantize_fp8(const detail::QuantizePlan& plan, void* stream) {
  const DeviceGuard device(plan.device_index);
  if (!device.selected()) {
    return Status(StatusCode::kCudaError, "quantize_fp8: cannot select CUDA device " + std::to_string(plan.device_index));
  }
  Status status;
  for (const detail::QuantizeJob& job : plan.jobs) {
    status = quantize_job(job, plan, static_cast<cudaStream_t>(stream));
    if (!status.ok()) break;
  }
  return status;
}

}  // namespace hopattn::sm90
