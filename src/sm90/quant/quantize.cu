// One CTA per tile of rows of one (batch, head); one warp per row. A row of d = 32 * E elements sits in
// registers, lane l holding columns [l*E, l*E + E): the Walsh-Hadamard butterflies of stride < E stay in
// a lane, those of stride >= E pair lane l with lane l ^ (stride / E) through shuffles. Every float
// operation is an explicitly rounded intrinsic applied in the CPU quantizer's order, so codes and
// scales match src/reference/fp8_quantize.cpp bit for bit.
//
// Rows of d 64, 128 or 256 take that layout with or without the transform; where the host finds the rows
// 16-byte aligned (kVector) a lane reads its E elements with one load and writes its E codes with one
// store, and each warp has kRowsInFlight rows' loads in flight: a warp reading one row at a time with
// 2-byte loads moved 0.64-0.82 TB/s (perf-notes v114). Other head dims and unaligned rows go
// element by element.
//
// kPerBlock: one launch; a tile is a scale block, its CTA reduces amax over the tile, writes the scale
// and quantizes (the second read of the tile hits L2). kPerTensor / kPerHead: the scale group spans many
// tiles, so amax is reduced into the descale slots first (zero, atomicMax, amax -> scale), then a
// quantize launch reads the finished scales.
//
// A keys-contiguous v8 (V^T in memory) is written through shared memory: warps encode 32 rows into a
// staged tile, then consecutive threads store consecutive keys of one column, so each warp's store is
// one 32-byte run instead of 32 bytes a column stride apart.
#include "sm90/quant/quantize.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "sm90/arch/convert.cuh"
#include "sm90/host/device_guard.hpp"

namespace hopattn::sm90 {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

// The staged tile of a keys-contiguous store: 32 keys (one per lane in the store) x up to 256 columns
// (a whole transformed row, d <= 256). Its row pitch is an odd number of 4-byte words, so the 32 keys
// of one column sit in 32 different banks.
constexpr int kStagedKeys = 32;
constexpr int kStagedCols = 256;
constexpr int kStagedPitch = kStagedCols + 4;

enum class Pass : int {
  kFused,     // kPerBlock: amax of the tile, scale, codes
  kAmax,      // atomicMax of the tile's amax into its descale slot
  kQuantize,  // codes with the scale already in the descale slot
};

struct Params {
  Tensor in, out, descale;  // plain views; only data and strides are read on the device
  int batch, seqlen, heads, head_dim;
  int block_rows, tiles_per_head;
  QuantGranularity granularity;
  detail::HadamardSigns signs;
  float norm;
  bool out_keys_contiguous;
};

__device__ float to_float(__half x) { return __half2float(x); }
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ std::uint8_t to_e4m3(float x, float scale) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}

template <typename T>
__device__ const T* row_in(const Params& p, int b, int s, int h) {
  return static_cast<const T*>(p.in.data) + b * p.in.stride[0] + s * p.in.stride[1] + h * p.in.stride[2];
}

__device__ std::uint8_t* row_out(const Params& p, int b, int s, int h) {
  return static_cast<std::uint8_t*>(p.out.data) + b * p.out.stride[0] + s * p.out.stride[1] + h * p.out.stride[2];
}

// A lane's E 16-bit inputs as one vector (4, 8 or 16 bytes).
template <int E>
using InVector = std::conditional_t<E == 2, unsigned, std::conditional_t<E == 4, uint2, uint4>>;

// Lane's E columns of row (b, s, h) as floats (exact conversions).
template <typename T, int E, bool kVector>
__device__ void load_lane_columns(const Params& p, int b, int s, int h, int lane, float (&v)[E]) {
  const T* in = row_in<T>(p, b, s, h) + lane * E;
  if constexpr (kVector) {
    const InVector<E> raw = *reinterpret_cast<const InVector<E>*>(in);
    unsigned words[E / 2];
    if constexpr (E == 2) {
      words[0] = raw;
    } else if constexpr (E == 4) {
      words[0] = raw.x, words[1] = raw.y;
    } else {
      words[0] = raw.x, words[1] = raw.y, words[2] = raw.z, words[3] = raw.w;
    }
#pragma unroll
    for (int i = 0; i < E / 2; ++i) {
      const float2 pair = unpack_pair<T>(words[i]);
      v[2 * i] = pair.x;
      v[2 * i + 1] = pair.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) v[i] = to_float(in[i]);
  }
}

// v (a lane's E columns of a row) times M = H diag(s) / sqrt(d).
template <int E>
__device__ void transform(const Params& p, int lane, float (&v)[E]) {
#pragma unroll
  for (int stride = 1; stride < E; stride *= 2) {
#pragma unroll
    for (int base = 0; base < E; base += 2 * stride) {
#pragma unroll
      for (int j = base; j < base + stride; ++j) {
        const float lo = v[j], hi = v[j + stride];
        v[j] = __fadd_rn(lo, hi);
        v[j + stride] = __fsub_rn(lo, hi);
      }
    }
  }
#pragma unroll
  for (int lanes = 1; lanes < 32; lanes *= 2) {
    const bool upper = lane & lanes;  // this lane holds the x_{j+stride} half of each pair
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const float partner = __shfl_xor_sync(0xffffffffu, v[i], lanes);
      v[i] = upper ? __fsub_rn(partner, v[i]) : __fadd_rn(v[i], partner);
    }
  }
#pragma unroll
  for (int i = 0; i < E; ++i) {
    const float x = p.signs.negated(lane * E + i) ? -v[i] : v[i];
    v[i] = __fmul_rn(x, p.norm);
  }
}

// How a kernel reads rows: E columns a lane (0: element by element, any d), whether it transforms them,
// whether a lane's columns and codes move as one vector each.
template <int E_, bool kTransform_, bool kVector_>
struct RowPath {
  static constexpr int E = E_;
  static constexpr bool kTransform = kTransform_, kVector = kVector_;
  static_assert(E > 0 || (!kTransform && !kVector), "the element-by-element path neither transforms nor vectorizes");
};

// Rows a warp loads before it uses any of them (registers: kRowsInFlight * E floats).
constexpr int kRowsInFlight = 4;

__device__ float warp_max(float m) {
#pragma unroll
  for (int lanes = 16; lanes > 0; lanes /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, lanes));
  return m;
}

// Lane's E columns of row (b, s, h), loaded and (where the path says) transformed.
template <typename T, class Path>
__device__ void load_row(const Params& p, int b, int s, int h, int lane, float (&v)[Path::E]) {
  load_lane_columns<T, Path::E, Path::kVector>(p, b, s, h, lane, v);
  if constexpr (Path::kTransform) transform<Path::E>(p, lane, v);
}

// for_each_warp_row(v, s): this warp's rows of [row_begin, row_end) (row_begin + warp, then every
// kWarps-th), each as a lane's E columns, kRowsInFlight rows loaded before the first is used.
template <typename T, class Path, class F>
__device__ void for_each_warp_row(const Params& p, int b, int h, int row_begin, int row_end, int lane, int warp,
                                  F&& f) {
  constexpr int E = Path::E;
  for (int s0 = row_begin + warp; s0 < row_end; s0 += kWarps * kRowsInFlight) {
    float v[kRowsInFlight][E];
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
      if (s0 + r * kWarps < row_end) load_lane_columns<T, E, Path::kVector>(p, b, s0 + r * kWarps, h, lane, v[r]);
    }
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
      if (s0 + r * kWarps >= row_end) break;  // the same for the whole warp
      if constexpr (Path::kTransform) transform<E>(p, lane, v[r]);
      f(v[r], s0 + r * kWarps);
    }
  }
}

// amax of this warp's rows of the tile (for_each_warp_row's), identical in every lane.
template <typename T, class Path>
__device__ float warp_rows_amax(const Params& p, int b, int h, int row_begin, int row_end, int lane, int warp) {
  float m = 0.0f;
  if constexpr (Path::E > 0) {
    for_each_warp_row<T, Path>(p, b, h, row_begin, row_end, lane, warp, [&](const float(&v)[Path::E], int) {
#pragma unroll
      for (int i = 0; i < Path::E; ++i) m = fmaxf(m, fabsf(v[i]));
    });
  } else {
    for (int s = row_begin + warp; s < row_end; s += kWarps) {
      const T* in = row_in<T>(p, b, s, h);
      for (int j = lane; j < p.head_dim; j += 32) m = fmaxf(m, fabsf(to_float(in[j])));
    }
  }
  return warp_max(m);
}

// Codes of columns [col0, col0 + cols) of row (b, s, h) into dst[0, cols) (a row of out, or of the
// staged tile of a keys-contiguous out). The E-column paths always encode the whole row (col0 0, cols d).
template <typename T, class Path>
__device__ void encode_row(const Params& p, int b, int s, int h, int lane, float scale, int col0, int cols,
                           std::uint8_t* dst) {
  if constexpr (Path::E > 0) {
    float v[Path::E];
    load_row<T, Path>(p, b, s, h, lane, v);
#pragma unroll
    for (int i = 0; i < Path::E; ++i) dst[lane * Path::E + i] = to_e4m3(v[i], scale);
  } else {
    const T* in = row_in<T>(p, b, s, h) + col0;
    for (int j = lane; j < cols; j += 32) dst[j] = to_e4m3(to_float(in[j]), scale);
  }
}

// Codes of this warp's rows of the tile into out (its ordinary layout).
template <typename T, class Path>
__device__ void encode_warp_rows(const Params& p, int b, int h, int row_begin, int row_end, int lane, int warp,
                                 float scale) {
  constexpr int E = Path::E;
  if constexpr (E > 0) {
    for_each_warp_row<T, Path>(p, b, h, row_begin, row_end, lane, warp, [&](const float(&v)[E], int s) {
      std::uint8_t* dst = row_out(p, b, s, h) + lane * E;
      if constexpr (Path::kVector) {
        unsigned words[(E + 3) / 4] = {};
#pragma unroll
        for (int i = 0; i < E; ++i) words[i / 4] |= unsigned{to_e4m3(v[i], scale)} << (8 * (i % 4));
        if constexpr (E == 2) {
          *reinterpret_cast<unsigned short*>(dst) = static_cast<unsigned short>(words[0]);
        } else if constexpr (E == 4) {
          *reinterpret_cast<unsigned*>(dst) = words[0];
        } else {
          *reinterpret_cast<uint2*>(dst) = make_uint2(words[0], words[1]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < E; ++i) dst[i] = to_e4m3(v[i], scale);
      }
    });
  } else {
    for (int s = row_begin + warp; s < row_end; s += kWarps)
      encode_row<T, Path>(p, b, s, h, lane, scale, 0, p.head_dim, row_out(p, b, s, h));
  }
}

// Rows [row_begin, row_end) of (b, h) into a keys-contiguous out, through the staged tile.
template <typename T, class Path>
__device__ void quantize_rows_keys_contiguous(const Params& p, int b, int h, int row_begin, int row_end,
                                              float scale) {
  __shared__ std::uint8_t staged[kStagedKeys][kStagedPitch];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  std::uint8_t* out = row_out(p, b, 0, h);
  for (int key0 = row_begin; key0 < row_end; key0 += kStagedKeys) {
    const int keys = min(kStagedKeys, row_end - key0);
    for (int col0 = 0; col0 < p.head_dim; col0 += kStagedCols) {
      const int cols = min(kStagedCols, p.head_dim - col0);
      for (int r = warp; r < keys; r += kWarps)
        encode_row<T, Path>(p, b, key0 + r, h, lane, scale, col0, cols, staged[r]);
      __syncthreads();
      for (int i = threadIdx.x; i < keys * cols; i += kThreads) {
        const int r = i % keys, c = i / keys;
        out[(key0 + r) * p.out.stride[1] + (col0 + c) * p.out.stride[3]] = staged[r][c];
      }
      __syncthreads();  // the tile is restaged next
    }
  }
}

template <typename T, class Path>
__global__ void __launch_bounds__(kThreads) quantize_tiles(Params p, Pass pass) {
  const int tile = blockIdx.x % p.tiles_per_head;
  const int h = (blockIdx.x / p.tiles_per_head) % p.heads;
  const int b = blockIdx.x / p.tiles_per_head / p.heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row_begin = tile * p.block_rows;
  const int row_end = min(p.seqlen, row_begin + p.block_rows);
  float* slot = static_cast<float*>(p.descale.data) + detail::descale_offset(p.descale, p.granularity, b, h, tile);

  float scale;
  if (pass == Pass::kQuantize) {
    scale = *slot;
  } else {
    float m = warp_rows_amax<T, Path>(p, b, h, row_begin, row_end, lane, warp);
    __shared__ float warp_amax[kWarps];
    if (lane == 0) warp_amax[warp] = m;
    __syncthreads();
    m = warp_amax[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, warp_amax[w]);
    if (pass == Pass::kAmax) {
      // amax >= 0, and non-negative floats order like their bit patterns.
      if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(slot), __float_as_int(m));
      return;
    }
    scale = detail::scale_from_amax(m);
    if (threadIdx.x == 0) *slot = scale;
  }
  if (p.out_keys_contiguous) return quantize_rows_keys_contiguous<T, Path>(p, b, h, row_begin, row_end, scale);
  encode_warp_rows<T, Path>(p, b, h, row_begin, row_end, lane, warp, scale);
}

// The descale slots of kPerTensor / kPerHead: zeroed before the amax pass, turned into scales after it.
__global__ void reset_slots(Params p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.batch * p.heads) return;
  static_cast<float*>(p.descale.data)[detail::descale_offset(p.descale, p.granularity, i / p.heads, i % p.heads, 0)] =
      0.0f;
}
__global__ void amax_to_scale(Params p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.batch * p.heads) return;
  float* slot = static_cast<float*>(p.descale.data) +
                detail::descale_offset(p.descale, p.granularity, i / p.heads, i % p.heads, 0);
  *slot = detail::scale_from_amax(*slot);
}

template <typename T, class Path>
void launch_tiles(const Params& p, Pass pass, cudaStream_t stream) {
  const long long tiles = static_cast<long long>(p.batch) * p.heads * p.tiles_per_head;
  quantize_tiles<T, Path><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(p, pass);
}

template <typename T, int E, bool kTransform>
void launch_tiles(const Params& p, bool vector, Pass pass, cudaStream_t stream) {
  if (vector) return launch_tiles<T, RowPath<E, kTransform, true>>(p, pass, stream);
  if constexpr (kTransform) return launch_tiles<T, RowPath<E, true, false>>(p, pass, stream);
  return launch_tiles<T, RowPath<0, false, false>>(p, pass, stream);  // element by element
}

// hadamard: validation admits d in {64, 128, 256}. vector: rows_aligned.
template <typename T>
void launch_tiles(const Params& p, bool hadamard, bool vector, Pass pass, cudaStream_t stream) {
  const auto by_dim = [&](auto transform) {
    constexpr bool kTransform = decltype(transform)::value;
    switch (p.head_dim) {
      case 64: return launch_tiles<T, 2, kTransform>(p, vector, pass, stream);
      case 128: return launch_tiles<T, 4, kTransform>(p, vector, pass, stream);
      case 256: return launch_tiles<T, 8, kTransform>(p, vector, pass, stream);
      default: return launch_tiles<T, RowPath<0, false, false>>(p, pass, stream);
    }
  };
  if (hadamard) return by_dim(std::true_type{});
  by_dim(std::false_type{});
}

// Whether a lane's E inputs and E codes may move as one vector each: the views' data and every stride
// but the contiguous one multiples of 16 bytes (then a lane's E-element offset is a multiple of its
// vector's size). A keys-contiguous out is written through shared memory, so only its input counts.
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

Status quantize_job(const detail::QuantizeJob& job, const detail::QuantizePlan& plan, cudaStream_t stream) {
  Params p{*job.in, *job.out, *job.descale, job.batch, job.seqlen, job.heads, job.head_dim, job.block_rows,
           static_cast<int>(scale_blocks(QuantGranularity::kPerBlock, job.seqlen, job.block_rows)),
           plan.granularity, plan.signs, job.hadamard_norm, job.out_keys_contiguous};
  const long long tiles = static_cast<long long>(job.batch) * job.heads * p.tiles_per_head;
  if (tiles > 0x7fffffffLL || static_cast<long long>(job.batch) * job.heads > 0x7fffffffLL) {
    return Status(StatusCode::kUnsupported, "quantize_fp8: batch * heads * ceil(seqlen / block_rows) = " +
                                                std::to_string(tiles) + " exceeds the 2^31 - 1 CTAs of one launch");
  }
  const bool bf16 = job.in->dtype == Dtype::kBFloat16;
  const bool vector = rows_aligned(job);
  auto tiles_pass = [&](Pass pass) {
    if (bf16) {
      launch_tiles<__nv_bfloat16>(p, job.hadamard, vector, pass, stream);
    } else {
      launch_tiles<__half>(p, job.hadamard, vector, pass, stream);
    }
  };
  if (plan.granularity == QuantGranularity::kPerBlock) {
    tiles_pass(Pass::kFused);
  } else {
    // kPerTensor uses slot (0, 0) only: treat it as one (batch, head).
    Params slots = p;
    if (plan.granularity == QuantGranularity::kPerTensor) slots.batch = slots.heads = 1;
    const unsigned slot_blocks = static_cast<unsigned>((static_cast<long long>(slots.batch) * slots.heads + 255) / 256);
    reset_slots<<<slot_blocks, 256, 0, stream>>>(slots);
    tiles_pass(Pass::kAmax);
    amax_to_scale<<<slot_blocks, 256, 0, stream>>>(slots);
    tiles_pass(Pass::kQuantize);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
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
