// The quantizer for head dims 64, 128 and 256: persistent CTAs, each copying its next chunk of rows
// into shared memory whole while it quantizes the current one from there (amax, then codes).
//
// Why: the pre-pass is memory-bound, and a kernel that loads rows into registers as it goes keeps only
// what its registers hold in flight. v114's warps, four rows each in flight, moved 1.3-1.6 TB/s and
// read each row twice from L2 or DRAM (perf-notes v119). Staged, every byte of a 16-64 KB chunk is
// requested at once (16-byte cp.async copies that bypass registers); double-buffered (v120), the copies
// of the next chunk stream in while the CTA computes, instead of each CTA waiting for its own.
//
// A row of d = 32 * E elements is processed by one warp, lane l holding columns [l*E, l*E + E), read
// from the stage as one 2E-byte vector (conflict-free: the warp reads one contiguous row). Codes go out
// as one E-byte store a lane, or, for a keys-contiguous out (V^T in memory), into a staged codes tile
// whose rows have an odd number of 4-byte words, so that consecutive threads can store consecutive keys
// of one column with the 32 keys of a warp's read in 32 different banks.
#pragma once

#include <cstdint>
#include <type_traits>

#include "sm90/arch/cp_async.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/quant/row_codes.cuh"

namespace hopattn::sm90::quant {

constexpr int kStagedWarps = 8;
constexpr int kStagedThreads = kStagedWarps * 32;

// Largest staged chunk, and the chunk size where a scale group spans several chunks. 64 KB lets the
// paper's 128-row blocks be one chunk at d 256 (and 192-row K/V blocks at d 128); 32 KB chunks, double
// buffered, let three CTAs share an SM's 228 KB.
constexpr int kMaxStageBytes = 64 * 1024;
constexpr int kChunkStageBytes = 32 * 1024;

template <int E>
constexpr int staged_row_bytes() {
  return 32 * E * 2;
}

// Row pitch of the keys-contiguous codes tile: d bytes plus one word, an odd number of words.
template <int E>
constexpr int codes_pitch() {
  return 32 * E + 4;
}

// Rows a stage holds: a chunk's, or the whole sequence's where that is shorter.
__host__ __device__ inline int stage_rows(const Params& p) { return p.chunk_rows < p.seqlen ? p.chunk_rows : p.seqlen; }

// Two stages, then (keys-contiguous out only) the codes tile.
template <int E>
std::size_t staged_smem_bytes(const Params& p) {
  return static_cast<std::size_t>(stage_rows(p)) *
         (2 * staged_row_bytes<E>() + (p.out_keys_contiguous ? codes_pitch<E>() : 0));
}

// A lane's E 16-bit inputs as one vector (4, 8 or 16 bytes).
template <int E>
using LaneVector = std::conditional_t<E == 2, unsigned, std::conditional_t<E == 4, uint2, uint4>>;

// A lane's E codes as one vector (2, 4 or 8 bytes).
template <int E>
using CodesVector = std::conditional_t<E == 2, unsigned short, std::conditional_t<E == 4, unsigned, uint2>>;

// Starts copying rows [row_begin, row_end) of (b, h) into `stage`, row r at r * row bytes, as one
// cp.async group. kAligned (every row 16-byte aligned, host-checked): 16-byte copies that land while the
// CTA works on; otherwise element by element through registers, done on return (an empty group).
template <typename T, int E, bool kAligned>
__device__ void issue_stage(const Params& p, const Chunk c, std::uint8_t* stage) {
  constexpr int kRowBytes = staged_row_bytes<E>();
  const int rows = c.row_end - c.row_begin;
  if constexpr (kAligned) {
    constexpr int kCopiesPerRow = kRowBytes / 16;
    for (int i = threadIdx.x; i < rows * kCopiesPerRow; i += kStagedThreads) {
      const int r = i / kCopiesPerRow, piece = i % kCopiesPerRow;
      const auto* src = reinterpret_cast<const std::uint8_t*>(row_in<T>(p, c.b, c.row_begin + r, c.h)) + piece * 16;
      cp_async_16_or_zero(smem_address(stage + r * kRowBytes + piece * 16), src, true);
    }
  } else {
    constexpr int kD = 32 * E;
    T* staged = reinterpret_cast<T*>(stage);
    for (int i = threadIdx.x; i < rows * kD; i += kStagedThreads) {
      staged[i] = row_in<T>(p, c.b, c.row_begin + i / kD, c.h)[i % kD];
    }
  }
  cp_async_commit();
}

// Lane's E columns of staged row r as floats (exact), transformed where asked.
template <typename T, int E, bool kTransform>
__device__ void load_staged_row(const LaneFactors<E>& factors, const std::uint8_t* stage, int r, int lane,
                                float (&v)[E]) {
  const LaneVector<E> raw =
      *reinterpret_cast<const LaneVector<E>*>(stage + r * staged_row_bytes<E>() + lane * E * 2);
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
  if constexpr (kTransform) transform<E>(factors, lane, v);
}

// v's codes, byte i of the vector for column lane * E + i.
template <int E>
__device__ CodesVector<E> encode_lane(const float (&v)[E], float inverse_scale) {
  unsigned words[(E + 3) / 4] = {};
#pragma unroll
  for (int i = 0; i < E; ++i) words[i / 4] |= unsigned{to_e4m3(v[i], inverse_scale)} << (8 * (i % 4));
  if constexpr (E == 2) {
    return static_cast<unsigned short>(words[0]);
  } else if constexpr (E == 4) {
    return words[0];
  } else {
    return make_uint2(words[0], words[1]);
  }
}

// A lane's codes into the codes tile, whose odd-word pitch aligns them to 4 bytes only.
template <class Vector>
__device__ void store_words(std::uint8_t* dst, Vector codes) {
  if constexpr (std::is_same_v<Vector, uint2>) {
    reinterpret_cast<unsigned*>(dst)[0] = codes.x;
    reinterpret_cast<unsigned*>(dst)[1] = codes.y;
  } else {
    *reinterpret_cast<Vector*>(dst) = codes;
  }
}

// Staged codes of rows [row_begin, row_end) to a keys-contiguous out: consecutive threads take
// consecutive keys of one column, so each warp's bytes land in one run of the column.
template <int E>
__device__ void store_codes_keys_contiguous(const Params& p, const Chunk c, const std::uint8_t* codes) {
  constexpr int kD = 32 * E;
  const int rows = c.row_end - c.row_begin;
  std::uint8_t* out = row_out(p, c.b, c.row_begin, c.h);
  for (int i = threadIdx.x; i < rows * kD; i += kStagedThreads) {
    const int r = i % rows, col = i / rows;
    out[r * p.out.stride[1] + col * p.out.stride[3]] = codes[r * codes_pitch<E>() + col];
  }
}

// One chunk, staged: amax and scale unless kQuantize (`scale` then holds the slot's), then the codes.
template <typename T, int E, bool kTransform, bool kAligned>
__device__ void quantize_staged_chunk(const Params& p, Pass pass, const Chunk c, const std::uint8_t* stage,
                                      std::uint8_t* codes, const LaneFactors<E>& factors, float scale) {
  const int rows = c.row_end - c.row_begin;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (pass != Pass::kQuantize) {
    float m = 0.0f;
    for (int r = warp; r < rows; r += kStagedWarps) {
      float v[E];
      load_staged_row<T, E, kTransform>(factors, stage, r, lane, v);
#pragma unroll
      for (int i = 0; i < E; ++i) m = fmaxf(m, fabsf(v[i]));
    }
    scale = publish_amax(pass, cta_max<kStagedWarps>(warp_max(m)), c.slot);
    if (pass == Pass::kAmax) return;
  }
  const float inverse_scale = detail::inverse_scale(scale);
  for (int r = warp; r < rows; r += kStagedWarps) {
    float v[E];
    load_staged_row<T, E, kTransform>(factors, stage, r, lane, v);
    if (p.out_keys_contiguous) {
      store_words(codes + r * codes_pitch<E>() + lane * E, encode_lane<E>(v, inverse_scale));
    } else if constexpr (kAligned) {
      *reinterpret_cast<CodesVector<E>*>(row_out(p, c.b, c.row_begin + r, c.h) + lane * E) =
          encode_lane<E>(v, inverse_scale);
    } else {
      std::uint8_t* dst = row_out(p, c.b, c.row_begin + r, c.h) + lane * E;
#pragma unroll
      for (int i = 0; i < E; ++i) dst[i] = to_e4m3(v[i], inverse_scale);
    }
  }
  if (p.out_keys_contiguous) {
    __syncthreads();
    store_codes_keys_contiguous<E>(p, c, codes);
  }
}

// Chunks blockIdx.x, + gridDim.x, ... of p.chunks: chunk k is quantized from stage k % 2 while chunk
// k + 1 is copied into the other.
template <typename T, int E, bool kTransform, bool kAligned>
__global__ void __launch_bounds__(kStagedThreads) quantize_staged_chunks(Params p, Pass pass) {
  extern __shared__ __align__(16) std::uint8_t smem[];
  const int stage_bytes = stage_rows(p) * staged_row_bytes<E>();
  std::uint8_t* codes = smem + 2 * stage_bytes;  // keys-contiguous out only
  const LaneFactors<E> factors(p, threadIdx.x % 32);
  Chunk c = chunk_of(p, blockIdx.x);
  issue_stage<T, E, kAligned>(p, c, smem);
  for (int index = blockIdx.x, k = 0;; index += gridDim.x, ++k) {  // gridDim.x <= p.chunks
    const bool has_next = index < p.chunks - static_cast<int>(gridDim.x);
    const Chunk next = has_next ? chunk_of(p, index + gridDim.x) : c;
    if (has_next) issue_stage<T, E, kAligned>(p, next, smem + (k + 1) % 2 * stage_bytes);
    // Chunks past the sequence's end are empty (uniform in the CTA).
    const float scale = pass == Pass::kQuantize && c.row_begin < c.row_end ? *c.slot : 0.0f;
    if (has_next) {
      cp_async_wait_group<1>();  // this chunk's copies have landed; the next chunk's may not have
    } else {
      cp_async_wait_group<0>();
    }
    __syncthreads();
    if (c.row_begin < c.row_end) {
      quantize_staged_chunk<T, E, kTransform, kAligned>(p, pass, c, smem + k % 2 * stage_bytes, codes, factors, scale);
    }
    if (!has_next) break;
    __syncthreads();  // this stage (and the codes tile) is refilled next
    c = next;
  }
}

}  // namespace hopattn::sm90::quant
