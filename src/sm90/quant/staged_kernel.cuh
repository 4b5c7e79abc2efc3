// The quantizer for head dims 64, 128 and 256: persistent CTAs, each copying its next chunk of rows
// into shared memory whole while it quantizes the current one from there (amax, then codes).
//
// Why: the pre-pass is memory-bound, and a kernel that loads rows into registers as it goes keeps only
// what its registers hold in flight. v114's warps, four rows each in flight, moved 1.3-1.6 TB/s and
// read each row twice from L2 or DRAM (perf-notes v119). Staged, every byte of a 16-64 KB chunk is
// requested at once; double-buffered (v120), the next chunk streams in while the CTA computes, instead
// of each CTA waiting for its own. The copies are TMA boxes of up to 256 rows, one instruction each
// (v121): as 16-byte cp.async copies, their address arithmetic was a fifth of the kernel's instructions,
// and at 0.7 warp instructions a cycle per scheduler the kernel was bound by issue, not by DRAM (ncu,
// session 37); bulk loads of one row each are issued lane by lane (the instruction takes uniform
// operands), about 20 instructions a row.
//
// A row of d = 32 * E elements is processed by one warp, lane l holding columns [l*E, l*E + E), read
// from the stage as one 2E-byte vector (conflict-free: the warp reads one contiguous row). Codes go out
// as one E-byte store a lane, or, for a keys-contiguous out (V^T in memory), into a staged codes tile
// whose rows have an odd number of 4-byte words, so that consecutive threads can store consecutive keys
// of one column with the 32 keys of a warp's read in 32 different banks.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/quant/row_codes.cuh"

namespace hopattn::sm90::quant {

// Rows a warp keeps in registers, transformed, between the amax and the codes of a fused chunk (kHeld
// kernels, d 128 and 256; the host's holds_rows): 16 at d 128, 8 at d 256, 64 floats a lane; with 8
// and 16 warps, 128-row chunks (the paper's blocks). Longer chunks, d 64, and the passes of scale
// groups spread over several chunks transform each row twice in kernels that keep fewer registers.
template <int E>
constexpr int held_rows() {
  return E == 8 ? 8 : 16;
}

// Warps of a CTA: 16 for the held rows at d 256 (whose 64 KB stages leave room for one CTA an SM), 8
// otherwise.
template <int E, bool kHeld>
constexpr int staged_warps() {
  return kHeld && E == 8 ? 16 : 8;
}
template <int E, bool kHeld>
constexpr int staged_threads() {
  return staged_warps<E, kHeld>() * 32;
}

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

// Rows of the job's longest chunk: a chunk's, or the whole sequence's where that is shorter.
__host__ __device__ inline int longest_chunk_rows(const Params& p) {
  return p.chunk_rows < p.seqlen ? p.chunk_rows : p.seqlen;
}

// Rows of a chunk's TMA box: the longest chunk's, at most 256 (the largest box). A chunk is loaded as
// whole boxes from its first row: rows past the sequence read 0, rows past the chunk are loaded and
// left unread.
__host__ __device__ inline int staged_box_rows(const Params& p) {
  const int rows = longest_chunk_rows(p);
  return rows < 256 ? rows : 256;
}

// Rows a stage holds: whole boxes covering the longest chunk.
__host__ __device__ inline int stage_capacity_rows(const Params& p) {
  const int rows = longest_chunk_rows(p), box = staged_box_rows(p);
  return (rows + box - 1) / box * box;
}

// The jobs (q, k, v) that one launch of the staged kernel quantizes: those that take the same kernel.
// One launch for all keeps the SMs busy across the jobs' boundaries: launched one at a time, each
// job's kernel ramped up and drained on its own, its last round of chunks on a sixth of the CTAs (a
// 2048-chunk job over 396 CTAs; perf-notes v125).
constexpr int kMaxJobs = 3;
struct StagedJobs {
  Params job[kMaxJobs];
  int chunk_end[kMaxJobs];  // job j owns chunks [chunk_end[j - 1], chunk_end[j]) of the launch
  int count;                // jobs
  int stage_rows;           // rows of each stage: the most that any job's chunk loads
  bool keys_contiguous;     // some job's out is keys-contiguous (the codes tile is allocated)
};

// Two stages, then (keys-contiguous out only) the codes tile.
template <int E>
std::size_t staged_smem_bytes(const StagedJobs& jobs) {
  return static_cast<std::size_t>(jobs.stage_rows) *
         (2 * staged_row_bytes<E>() + (jobs.keys_contiguous ? codes_pitch<E>() : 0));
}

// A lane's E 16-bit inputs as one vector (4, 8 or 16 bytes).
template <int E>
using LaneVector = std::conditional_t<E == 2, unsigned, std::conditional_t<E == 4, uint2, uint4>>;

// A lane's E codes as one vector (2, 4 or 8 bytes).
template <int E>
using CodesVector = std::conditional_t<E == 2, unsigned short, std::conditional_t<E == 4, unsigned, uint2>>;

// Starts copying rows [row_begin, row_end) of (b, h) into `stage`, row r at r * row bytes; `full`
// completes when they have landed. kAligned (every row 16-byte aligned, host-checked): thread 0 issues
// the chunk's TMA boxes (in_map: (d, rows, heads, batch), boxes of d x staged_box_rows), which land
// while the CTA works on. Otherwise every thread copies elements through registers, done on return;
// thread 0 then completes `full` by its arrival alone (the CTA barrier before the stage is read makes
// the other threads' stores visible).
template <typename T, int E, bool kAligned, int kWarps>
__device__ void issue_stage(const CUtensorMap* in_map, const Params& p, const Chunk c, std::uint8_t* stage,
                            std::uint64_t* full) {
  constexpr int kRowBytes = staged_row_bytes<E>();
  const int rows = c.row_end - c.row_begin;
  if constexpr (kAligned) {
    if (threadIdx.x != 0) return;
    const int box_rows = staged_box_rows(p);
    const int boxes = (rows + box_rows - 1) / box_rows;
    mbarrier_arrive_expect_tx(full, boxes * box_rows * kRowBytes);  // whole boxes, zeros included
    for (int i = 0; i < boxes; ++i) {
      tma_load_4d(stage + i * box_rows * kRowBytes, in_map, full, 0, c.row_begin + i * box_rows, c.h, c.b);
    }
  } else {
    constexpr int kD = 32 * E;
    const T* first_row = row_in<T>(p, c.b, c.row_begin, c.h);
    T* staged = reinterpret_cast<T*>(stage);
    for (int i = threadIdx.x; i < rows * kD; i += kWarps * 32) {
      staged[i] = first_row[i / kD * p.in.stride[1] + i % kD];
    }
    if (threadIdx.x == 0) mbarrier_arrive(full);
  }
}

// Lane's E 16-bit elements of staged row r, two a word (column lane * E + 2i in word i's low half).
template <int E>
__device__ void load_lane_words(const std::uint8_t* stage, int r, int lane, unsigned (&words)[E / 2]) {
  const LaneVector<E> raw = *reinterpret_cast<const LaneVector<E>*>(stage + r * staged_row_bytes<E>() + lane * E * 2);
  if constexpr (E == 2) {
    words[0] = raw;
  } else if constexpr (E == 4) {
    words[0] = raw.x, words[1] = raw.y;
  } else {
    words[0] = raw.x, words[1] = raw.y, words[2] = raw.z, words[3] = raw.w;
  }
}

// Lane's E columns of staged row r as floats (exact), transformed where asked.
template <typename T, int E, bool kTransform>
__device__ void load_staged_row(const LaneFactors<E>& factors, const std::uint8_t* stage, int r, int lane,
                                float (&v)[E]) {
  unsigned words[E / 2];
  load_lane_words<E>(stage, r, lane, words);
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    const float2 pair = unpack_pair<T>(words[i]);
    v[2 * i] = pair.x;
    v[2 * i + 1] = pair.y;
  }
  if constexpr (kTransform) transform<E>(factors, lane, v);
}

// max(m, |x|) over the lane's E columns of this warp's staged rows, in every lane of the warp. Without
// the transform the 16-bit elements are compared as they are, two an instruction: |x| by clearing the
// sign bits (exact for subnormals too), a 16-bit max that ignores NaN as fmaxf does, and an exact
// conversion of the maximum to float, so the scale is the float path's.
template <typename T, int E, bool kTransform, int kWarps>
__device__ float warp_staged_amax(const LaneFactors<E>& factors, const std::uint8_t* stage, int rows, int lane,
                                  int warp) {
  if constexpr (kTransform) {
    float m = 0.0f;
    for (int r = warp; r < rows; r += kWarps) {
      float v[E];
      load_staged_row<T, E, true>(factors, stage, r, lane, v);
#pragma unroll
      for (int i = 0; i < E; ++i) m = fmaxf(m, fabsf(v[i]));
    }
    return warp_max(m);
  } else {
    using Pair = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
    Pair m = Pair(T(0.0f), T(0.0f));
    for (int r = warp; r < rows; r += kWarps) {
      unsigned words[E / 2];
      load_lane_words<E>(stage, r, lane, words);
#pragma unroll
      for (int i = 0; i < E / 2; ++i) {
        const unsigned magnitudes = words[i] & 0x7fff7fffu;
        Pair pair;
        std::memcpy(&pair, &magnitudes, sizeof(pair));
        m = __hmax2(m, pair);
      }
    }
    unsigned m_word;
    std::memcpy(&m_word, &m, sizeof(m_word));
    const float2 both = unpack_pair<T>(m_word);
    return warp_max(fmaxf(both.x, both.y));
  }
}

// v's codes, byte i of the vector for column lane * E + i; two conversions an instruction.
template <int E>
__device__ CodesVector<E> encode_lane(const float (&v)[E], float inverse_scale) {
  unsigned pairs[E / 2];
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    const float2 scaled = make_float2(__fmul_rn(v[2 * i], inverse_scale), __fmul_rn(v[2 * i + 1], inverse_scale));
    pairs[i] = __nv_cvt_float2_to_fp8x2(scaled, __NV_SATFINITE, __NV_E4M3);  // .x in the low byte
  }
  if constexpr (E == 2) {
    return static_cast<unsigned short>(pairs[0]);
  } else if constexpr (E == 4) {
    return pairs[0] | pairs[1] << 16;
  } else {
    return make_uint2(pairs[0] | pairs[1] << 16, pairs[2] | pairs[3] << 16);
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

// Staged codes of rows [row_begin, row_end) to a keys-contiguous out: a warp takes a column at a time,
// its lanes consecutive keys, so each store is one 32-byte run of the column (and each codes-tile read
// 32 banks). Indexed by column and key directly: until v123 one flat index was split with % and / by
// the row count, an integer division per byte.
template <int E, int kWarps>
__device__ void store_codes_keys_contiguous(const Params& p, const Chunk c, const std::uint8_t* codes) {
  constexpr int kD = 32 * E;
  const int rows = c.row_end - c.row_begin;
  const int lane = threadIdx.x % 32;
  std::uint8_t* out = row_out(p, c.b, c.row_begin, c.h);
  for (int col = threadIdx.x / 32; col < kD; col += kWarps) {
    std::uint8_t* column = out + col * p.out.stride[3];
    for (int r = lane; r < rows; r += 32) column[r * p.out.stride[1]] = codes[r * codes_pitch<E>() + col];
  }
}

// A lane's codes of staged row r: to `dst` (its place in out), or to the codes tile.
template <int E, bool kAligned>
__device__ void store_lane_codes(const Params& p, std::uint8_t* dst, std::uint8_t* codes, int r, int lane,
                                 CodesVector<E> lane_codes) {
  if (p.out_keys_contiguous) {
    store_words(codes + r * codes_pitch<E>() + lane * E, lane_codes);
  } else if constexpr (kAligned) {
    *reinterpret_cast<CodesVector<E>*>(dst) = lane_codes;
  } else {
    std::memcpy(dst, &lane_codes, sizeof(lane_codes));
  }
}

// A fused chunk of at most held_rows rows a warp, transformed once: each warp keeps its rows in
// registers from the amax to the codes. The transform (5 shuffled butterfly stages a row at d 128) is
// what bounds the Hadamard path; doing it twice cost ~1.7x the plain path's time (perf-notes v122).
template <typename T, int E, bool kAligned>
__device__ void quantize_held_chunk(const Params& p, const Chunk c, const std::uint8_t* stage, std::uint8_t* codes,
                                    const LaneFactors<E>& factors) {
  constexpr int kWarps = staged_warps<E, true>();
  const int rows = c.row_end - c.row_begin;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float held[held_rows<E>()][E];
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < held_rows<E>(); ++j) {
    if (warp + j * kWarps < rows) {  // the same for the whole warp, which the shuffles need
      load_staged_row<T, E, true>(factors, stage, warp + j * kWarps, lane, held[j]);
#pragma unroll
      for (int i = 0; i < E; ++i) m = fmaxf(m, fabsf(held[j][i]));
    }
  }
  const float scale = publish_amax(Pass::kFused, cta_max<kWarps>(warp_max(m)), c.slot, p.power_of_two_scales);
  const float inverse_scale = detail::inverse_scale(scale);
  std::uint8_t* first = row_out(p, c.b, c.row_begin + warp, c.h) + lane * E;
#pragma unroll
  for (int j = 0; j < held_rows<E>(); ++j) {
    if (warp + j * kWarps < rows) {
      store_lane_codes<E, kAligned>(p, first + j * kWarps * p.out.stride[1], codes, warp + j * kWarps, lane,
                                    encode_lane<E>(held[j], inverse_scale));
    }
  }
}

// One chunk, staged: amax and scale unless kQuantize (`scale` then holds the slot's), then the codes.
// kHeld: fused chunks of the transform of at most kWarps * held_rows rows (the host's choice).
template <typename T, int E, bool kTransform, bool kAligned, bool kHeld>
__device__ void quantize_staged_chunk(const Params& p, Pass pass, const Chunk c, const std::uint8_t* stage,
                                      std::uint8_t* codes, const LaneFactors<E>& factors, float scale) {
  constexpr int kWarps = staged_warps<E, kHeld>();
  const int rows = c.row_end - c.row_begin;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if constexpr (kHeld) {
    static_assert(kTransform, "only transformed rows are worth holding");
    quantize_held_chunk<T, E, kAligned>(p, c, stage, codes, factors);
  } else {
    if (pass != Pass::kQuantize) {
      const float m = warp_staged_amax<T, E, kTransform, kWarps>(factors, stage, rows, lane, warp);
      scale = publish_amax(pass, cta_max<kWarps>(m), c.slot, p.power_of_two_scales);
      if (pass == Pass::kAmax) return;
    }
    const float inverse_scale = detail::inverse_scale(scale);
    // This lane's codes of row r, stepped along rather than recomputed in 64 bits each row.
    std::uint8_t* dst = row_out(p, c.b, c.row_begin + warp, c.h) + lane * E;
    const std::int64_t dst_step = kWarps * p.out.stride[1];
    for (int r = warp; r < rows; r += kWarps, dst += dst_step) {
      float v[E];
      load_staged_row<T, E, kTransform>(factors, stage, r, lane, v);
      store_lane_codes<E, kAligned>(p, dst, codes, r, lane, encode_lane<E>(v, inverse_scale));
    }
  }
  if (p.out_keys_contiguous) {
    __syncthreads();
    store_codes_keys_contiguous<E, kWarps>(p, c, codes);
  }
}

// A launch's chunk `index` as its job's chunk, with the job.
struct JobChunk {
  int job;
  Chunk chunk;
};
__device__ inline JobChunk locate(const StagedJobs& jobs, int index) {
  int j = 0;
  while (j + 1 < jobs.count && index >= jobs.chunk_end[j]) ++j;
  return {j, chunk_of(jobs.job[j], j == 0 ? index : index - jobs.chunk_end[j - 1])};
}

// Chunks blockIdx.x, + gridDim.x, ... of the launch: chunk k is quantized from stage k % 2 while chunk
// k + 1 is copied into the other. full[s] completes each time stage s has landed. map_j: job j's input
// (kAligned only).
template <typename T, int E, bool kTransform, bool kAligned, bool kHeld>
__global__ void __launch_bounds__(staged_threads<E, kHeld>())
    quantize_staged_chunks(const __grid_constant__ CUtensorMap map_0, const __grid_constant__ CUtensorMap map_1,
                           const __grid_constant__ CUtensorMap map_2, const __grid_constant__ StagedJobs jobs,
                           Pass pass) {
  constexpr int kWarps = staged_warps<E, kHeld>();
  extern __shared__ __align__(128) std::uint8_t smem[];
  __shared__ std::uint64_t full[2];
  const int stage_bytes = jobs.stage_rows * staged_row_bytes<E>();
  const int chunks = jobs.chunk_end[jobs.count - 1];
  std::uint8_t* codes = smem + 2 * stage_bytes;  // keys-contiguous out only
  const LaneFactors<E> factors(jobs.job[0], threadIdx.x % 32);  // the plan's signs: every job's
  const auto issue = [&](const JobChunk& jc, int stage) {
    const CUtensorMap* map = jc.job == 0 ? &map_0 : jc.job == 1 ? &map_1 : &map_2;
    issue_stage<T, E, kAligned, kWarps>(map, jobs.job[jc.job], jc.chunk, smem + stage * stage_bytes, &full[stage]);
  };
  if (threadIdx.x == 0) {
    mbarrier_init(&full[0], 1);
    mbarrier_init(&full[1], 1);
    fence_barrier_init();
  }
  __syncthreads();
  JobChunk c = locate(jobs, blockIdx.x);
  issue(c, 0);
  for (int index = blockIdx.x, k = 0;; index += gridDim.x, ++k) {  // gridDim.x <= chunks
    const bool has_next = index < chunks - static_cast<int>(gridDim.x);
    const JobChunk next = has_next ? locate(jobs, index + gridDim.x) : c;
    if (has_next) issue(next, (k + 1) % 2);
    const Params& p = jobs.job[c.job];
    // Chunks past the sequence's end are empty (uniform in the CTA).
    const bool empty = c.chunk.row_begin >= c.chunk.row_end;
    const float scale = pass == Pass::kQuantize && !empty ? *c.chunk.slot : 0.0f;
    mbarrier_wait(&full[k % 2], k / 2 % 2);
    __syncthreads();
    if (!empty) {
      quantize_staged_chunk<T, E, kTransform, kAligned, kHeld>(p, pass, c.chunk, smem + k % 2 * stage_bytes, codes,
                                                               factors, scale);
    }
    if (!has_next) break;
    __syncthreads();  // this stage (and the codes tile) is refilled next
    c = next;
  }
}

}  // namespace hopattn::sm90::quant
