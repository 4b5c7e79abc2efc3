// The quantizer for head dims other than 64, 128 and 256: one warp a row, lanes striding its columns
// element by element, read once for amax and again (from L2) for the codes. Any d, any chunk length.
// With the transform (kTransform: q and k, d a multiple of 16 up to 256, validation's rule) each row
// goes through its warp's shared-memory row first, once for amax and again for the codes, as on the CPU.
//
// A keys-contiguous out (V^T in memory) is written through shared memory: warps encode 32 rows into a
// staged tile, then consecutive threads store consecutive keys of one column, so each warp's store is
// one 32-byte run instead of 32 bytes a column stride apart.
#pragma once

#include <cstdint>

#include "sm90/quant/row_codes.cuh"

namespace hopattn::sm90::quant {

constexpr int kGenericWarps = 4;
constexpr int kGenericThreads = kGenericWarps * 32;

// The staged tile of a keys-contiguous store: 32 keys (one per lane in the store) x up to 256 columns.
// Its row pitch is an odd number of 4-byte words, so the 32 keys of one column sit in 32 different banks.
constexpr int kStagedKeys = 32;
constexpr int kStagedCols = 256;
constexpr int kStagedPitch = kStagedCols + 4;

// Row s times M = H diag(s) / sqrt(block) (row_codes.cuh), into the warp's shared-memory `row`: the
// CPU's butterflies stage by stage (strides 1, 2, ... below hadamard_block(d)), each lane taking pairs
// lane, lane + 32, ... of a stage, so that every sum is the CPU's; then column j times s_j / sqrt(block).
template <typename T>
__device__ void transformed_row(const Params& p, const Chunk c, int s, int lane, float* row) {
  const T* in = row_in<T>(p, c.b, s, c.h);
  __syncwarp();  // the warp's previous row is read
  for (int j = lane; j < p.head_dim; j += 32) row[j] = to_float(in[j]);
  for (int stride = 1; stride < detail::hadamard_block(p.head_dim); stride *= 2) {
    __syncwarp();
    for (int pair = lane; pair < p.head_dim / 2; pair += 32) {
      const int j = pair / stride * 2 * stride + pair % stride;
      const float lo = row[j], hi = row[j + stride];
      row[j] = __fadd_rn(lo, hi);
      row[j + stride] = __fsub_rn(lo, hi);
    }
  }
  __syncwarp();
  for (int j = lane; j < p.head_dim; j += 32) row[j] = __fmul_rn(row[j], p.signs.negated(j) ? -p.norm : p.norm);
}

template <typename T, bool kTransform>
__device__ float warp_rows_amax(const Params& p, const Chunk c, int lane, int warp, float* row) {
  float m = 0.0f;
  for (int s = c.row_begin + warp; s < c.row_end; s += kGenericWarps) {
    if constexpr (kTransform) {
      transformed_row<T>(p, c, s, lane, row);  // each lane reads back the columns it wrote
      for (int j = lane; j < p.head_dim; j += 32) m = fmaxf(m, fabsf(row[j]));
    } else {
      const T* in = row_in<T>(p, c.b, s, c.h);
      for (int j = lane; j < p.head_dim; j += 32) m = fmaxf(m, fabsf(to_float(in[j])));
    }
  }
  return warp_max(m);
}

// Codes of columns [col0, col0 + cols) of row s into dst[0, cols).
template <typename T>
__device__ void encode_columns(const Params& p, const Chunk c, int s, int lane, float inverse_scale, int col0,
                               int cols, std::uint8_t* dst) {
  const T* in = row_in<T>(p, c.b, s, c.h) + col0;
  for (int j = lane; j < cols; j += 32) dst[j] = to_e4m3(to_float(in[j]), inverse_scale);
}

template <typename T>
__device__ void encode_rows_keys_contiguous(const Params& p, const Chunk c, float inverse_scale) {
  __shared__ std::uint8_t staged[kStagedKeys][kStagedPitch];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  std::uint8_t* out = row_out(p, c.b, 0, c.h);
  for (int key0 = c.row_begin; key0 < c.row_end; key0 += kStagedKeys) {
    const int keys = min(kStagedKeys, c.row_end - key0);
    for (int col0 = 0; col0 < p.head_dim; col0 += kStagedCols) {
      const int cols = min(kStagedCols, p.head_dim - col0);
      for (int r = warp; r < keys; r += kGenericWarps) {
        encode_columns<T>(p, c, key0 + r, lane, inverse_scale, col0, cols, staged[r]);
      }
      __syncthreads();
      for (int i = threadIdx.x; i < keys * cols; i += kGenericThreads) {
        const int r = i % keys, col = i / keys;
        out[(key0 + r) * p.out.stride[1] + (col0 + col) * p.out.stride[3]] = staged[r][col];
      }
      __syncthreads();  // the tile is restaged next
    }
  }
}

template <typename T, bool kTransform>
__global__ void __launch_bounds__(kGenericThreads) quantize_generic_chunks(Params p, Pass pass) {
  // Each warp's transformed row (kTransform only: the array is unused otherwise).
  __shared__ float rows[kTransform ? kGenericWarps : 1][kTransform ? detail::kMaxHadamardDim : 1];
  const Chunk c = chunk_of(p, blockIdx.x);
  if (c.row_begin >= c.row_end) return;  // a group's chunks past the sequence (uniform in the CTA)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* row = rows[kTransform ? warp : 0];
  float scale;
  if (pass == Pass::kQuantize) {
    scale = *c.slot;
  } else {
    const float amax = cta_max<kGenericWarps>(warp_rows_amax<T, kTransform>(p, c, lane, warp, row));
    scale = publish_amax(pass, amax, c.slot, p.power_of_two_scales);
    if (pass == Pass::kAmax) return;
  }
  const float inverse_scale = detail::inverse_scale(scale);
  if constexpr (kTransform) {  // q and k: never keys-contiguous (only v8 may be)
    for (int s = c.row_begin + warp; s < c.row_end; s += kGenericWarps) {
      transformed_row<T>(p, c, s, lane, row);
      std::uint8_t* out = row_out(p, c.b, s, c.h);
      for (int j = lane; j < p.head_dim; j += 32) out[j] = to_e4m3(row[j], inverse_scale);
    }
    return;
  }
  if (p.out_keys_contiguous) return encode_rows_keys_contiguous<T>(p, c, inverse_scale);
  for (int s = c.row_begin + warp; s < c.row_end; s += kGenericWarps) {
    encode_columns<T>(p, c, s, lane, inverse_scale, 0, p.head_dim, row_out(p, c.b, s, c.h));
  }
}

}  // namespace hopattn::sm90::quant
