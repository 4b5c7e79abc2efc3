// One benchmarked attention shape, the named grids of them, and the FLOP counts (forward and backward)
// that turn a time into TFLOP/s.
#pragma once

#include <string>
#include <vector>

#include "hopattn/hopattn.hpp"

namespace hopattn::bench {

// What the FP8 block descales hold (Shape::fp8_block_scales). Per block of one (batch, head), kAmax,
// kQuantized and kStraddle draw an amax in [4, 5.5] (what quantize_fp8 finds in 128 x 128 normal
// values) and take amax / 448; kQuantized then rounds v's up to a power of two, as quantize_fp8 does
// since session 39 (for these amaxes always 2^-6), kAmax leaves them (as it did before; every block's v
// scale differs, so O changes units every block), kStraddle makes v's 2^-6 or 2^-7 at random (a head
// whose block amaxes straddle a power of two). kOnes: all 1 (the bench's only choice before session
// 39; no block ever changes a scale).
enum class Fp8BlockScales { kQuantized, kAmax, kStraddle, kOnes };

struct Shape {
  Dtype dtype = Dtype::kBFloat16;
  int batch = 2;
  int heads_q = 16;
  int heads_kv = 16;
  int seqlen_q = 8192;
  int seqlen_k = 8192;
  int hdim = 128;
  int hdim_v = 0;  // > 0: v, out (and dout, dv) of this head dim (flash-attention 3's headdim_v)
  bool causal = false;
  int window_left = -1;  // FwdArgs::window_left (-1: unbounded); a sliding window with causal
  int attention_chunk = 0;  // FwdArgs::attention_chunk (0: off): Llama 4's chunked local attention
  KernelOptions options;
  // FP8 only: > 0 passes per-block descales (q, k and v, as fp8_block_scales says) of this many rows,
  // the block quantization path; 0 passes none (per-head factors of 1).
  int fp8_block_rows = 0;
  Fp8BlockScales fp8_block_scales = Fp8BlockScales::kQuantized;
  float softcap = 0.0f;  // > 0: scores pass through softcap * tanh(score / softcap)
  int num_splits = 0;    // FwdArgs::num_splits: 0 the tail-split heuristic, 1 no split, n pieces per tile
  // FP8 only: v passed keys-contiguous (V^T in memory, keys padded to a multiple of 16), which the
  // kernel loads by TMA instead of transposing V.
  bool v_keys_contiguous = false;
  // k and v stored heads-major, (batch, heads_kv, keys, d) as PyTorch's SDPA takes them, and passed as a
  // (batch, keys, heads_kv, d) view through strides: each head's keys contiguous, where the ordinary
  // layout (flash-attention's) puts a key's heads side by side. Dense k and v only.
  bool kv_heads_major = false;
  // 16-bit only: the batch passed packed, (batch * seqlen, heads, d) with cu_seqlens_q / cu_seqlens_k
  // of equal lengths, so that the variable-length kernel's cost shows against the dense one.
  bool varlen = false;
  // 16-bit only, > 0: k and v passed as a paged cache of pages of this many keys (seqlen_k a multiple of
  // it), each sequence's pages in shuffled order (unless pages_in_order) through a page table.
  int page_size = 0;
  // With page_size: the page table hands out pages in storage order (page i of the batch is storage page
  // i), as a fresh cache does, so that a paged step can be timed against the same step from rows with the
  // pages' scatter taken out.
  bool pages_in_order = false;
  // 16-bit only, > 0: k and v allocated as a cache of this many keys per sequence (>= seqlen_k) of which
  // seqlen_k are in use, passed as seqused_k (flash-attention's cache_seqlens): the decoding call of a
  // serving engine whose cache has room to grow. FLOPs and bytes count the seqlen_k keys in use.
  int cache_seqlen_k = 0;
  // > 0: q, out, lse (and a backward's dout and dq) allocated with this many rows per sequence (>=
  // seqlen_q) of which seqlen_q are in use, passed as seqused_q: a serving engine's static, CUDA-graph
  // friendly batch whose tail rows are padding. FLOPs and bytes count the seqlen_q rows in use.
  int padded_seqlen_q = 0;
  // Times hopattn::backward (dq, dk, dv from q, k, v, out, dout and the forward's LSE) instead of the
  // forward: bf16/fp16, dense or varlen; KernelOptions and num_splits do not apply to it.
  bool backward = false;
  // Backward only: BwdArgs::deterministic (dq summed in a fixed order).
  bool deterministic = false;
  // FwdArgs::learnable_sink (one logit per q head, all 0.5); the backward also writes dsink.
  bool learnable_sink = false;
  // FwdArgs::qv (DeepSeek's MLA decoding with the projections absorbed, forward only): a second query
  // of v's head dim, scored against v; FLOPs count its GEMM too (2 * pairs * hdim_v more).
  bool qv = false;
  // Names the KernelOptions setting (ablation rows) or the descales; backward rows are "backward" or
  // "backward_<what the forward row would be called>" (backward_variant).
  std::string variant = "default";
};

// Short dtype names used on the command line and in the table: bf16, fp16, fp8.
const char* dtype_short_name(Dtype dtype);

// The grid called `name` (quick, paper, long, ablation, fp8, bwd, decode); false if there is no such grid.
bool make_grid(const std::string& name, std::vector<Shape>* shapes);
// The names make_grid accepts, for usage text and error messages.
const char* grid_names();

// Forward FLOPs as the FlashAttention papers count them: 4 * b * hq * sq * sk * d, halved when causal
// (2 * b * hq * sq * sk * (d + d_v) when v has a head dim of its own: QK^T and P V apart; with qv,
// 2 * b * hq * sq * sk * (d + 2 d_v): its QV^T too, as FlashMLA counts).
// For causal with sq != sk the halving is wrong, so the unmasked (i, j) pairs of the bottom-right
// aligned mask are counted instead.
double forward_flops(const Shape& shape);

// Backward FLOPs as the FlashAttention papers count them: 2.5 x forward_flops where v has q's head dim.
// The forward has 2 matmuls per (query, key) tile (S = QK^T, O = PV), the backward 5 (S = QK^T
// recomputed, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q); the recomputation counts, so that
// TFLOP/s of both passes (and of the peers, which count the same way) compare. With a head dim of v's
// own, dP and dV count at v's, the other three at q's.
double backward_flops(const Shape& shape);

// Keys allocated per sequence in k and v: cache_seqlen_k when given, else seqlen_k.
int allocated_keys(const Shape& shape);

// v's head dim: hdim_v when given, else hdim.
int head_dim_v(const Shape& shape);

// Query rows allocated per sequence in q, out and the LSE: padded_seqlen_q when given, else seqlen_q.
int allocated_rows_q(const Shape& shape);

// The FLOPs of the pass the shape times: backward_flops when shape.backward, else forward_flops.
double timed_flops(const Shape& shape);

// The bytes a forward call must move at the least: q (and qv), k and v read once, out written once (k and v: the
// seqlen_k keys in use; the LSE left out, as not every caller writes it). With few query rows that is
// nearly all K and V, the call is bound by memory bandwidth, and bytes / time against the HBM rate
// says how close it gets.
double forward_bytes(const Shape& shape);

// forward_bytes for a forward shape; 0 for a backward one (its traffic is not counted).
double timed_bytes(const Shape& shape);

// The variant name of a backward row: "backward" for "default", else "backward_" + forward_variant.
std::string backward_variant(const std::string& forward_variant);

// A (batch, pages_per_seq) page table's entries, row-major: the batch's pages in shuffled order (seeded),
// as a cache that has allocated and freed pages for a while hands them out, or in storage order.
std::vector<int> page_table_values(int batch, int pages_per_seq, bool in_order, std::uint64_t seed);

// `count` FP8 block descales as `kind` says (Fp8BlockScales; v_scales: v's, which kQuantized rounds up
// to a power of two), drawn from `seed`.
std::vector<float> fp8_block_descale_values(std::int64_t count, Fp8BlockScales kind, bool v_scales,
                                            std::uint64_t seed);

}  // namespace hopattn::bench
