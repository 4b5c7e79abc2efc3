#include "shapes.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>

namespace hopattn::bench {
namespace {

// The FlashAttention papers' grid: 16k tokens per batch, hidden 2048, causal and not, at the given
// head dims and sequence lengths.
std::vector<Shape> flash_papers_grid(Dtype dtype, std::initializer_list<int> hdims,
                                     std::initializer_list<int> seqlens) {
  std::vector<Shape> shapes;
  for (int hdim : hdims) {
    for (bool causal : {false, true}) {
      for (int seqlen : seqlens) {
        Shape s;
        s.dtype = dtype;
        s.batch = 16384 / seqlen;
        s.heads_q = s.heads_kv = 2048 / hdim;
        s.seqlen_q = s.seqlen_k = seqlen;
        s.hdim = hdim;
        s.causal = causal;
        shapes.push_back(s);
      }
    }
  }
  return shapes;
}

// FlashAttention-3 grid in bf16.
std::vector<Shape> paper_grid() {
  return flash_papers_grid(Dtype::kBFloat16, {64, 128, 256}, {512, 1024, 2048, 4096, 8192, 16384});
}

// The papers' backward grid: the paper grid's shapes at the backward kernels' head dims (64, 128, 256),
// timing hopattn::backward.
std::vector<Shape> bwd_grid() {
  std::vector<Shape> shapes =
      flash_papers_grid(Dtype::kBFloat16, {64, 128, 256}, {512, 1024, 2048, 4096, 8192, 16384});
  for (Shape& s : shapes) {
    s.backward = true;
    s.variant = backward_variant(s.variant);
  }
  return shapes;
}

// Head dims other than the papers' 64, 128 and 256, forward, on the papers' grid at 2k and 8k: 80 and
// 96 (Phi models) in the d 128 kernel, 160 and 192 in the d 192 kernel.
std::vector<Shape> headdims_grid() {
  return flash_papers_grid(Dtype::kBFloat16, {80, 96, 160, 192}, {2048, 8192});
}

// DeepSeek's layers (q/k 192, v 128; bench/mla_peers.py times cuDNN on the same shapes), forward: the
// kernels of v's own width, dense and variable-length (1 x 128 heads at 4k and 16k and 4 x 128 at 4k,
// causal; 2 x 16 heads at 8k both ways; 8 x 16 heads at 2k causal packed).
std::vector<Shape> mla_grid() {
  struct Row {
    int batch, heads, seqlen;
    bool causal, varlen;
  };
  std::vector<Shape> shapes;
  for (const Row& r : {Row{1, 128, 4096, true, false}, Row{1, 128, 16384, true, false}, Row{4, 128, 4096, true, false},
                       Row{2, 16, 8192, true, false}, Row{2, 16, 8192, false, false}, Row{8, 16, 2048, true, true}}) {
    Shape s;
    s.batch = r.batch;
    s.heads_q = s.heads_kv = r.heads;
    s.seqlen_q = s.seqlen_k = r.seqlen;
    s.hdim = 192;
    s.hdim_v = 128;
    s.causal = r.causal;
    s.varlen = r.varlen;
    s.variant = r.varlen ? "v128_varlen" : "v128";  // the table's hdim column shows q's 192 only
    shapes.push_back(s);
  }
  return shapes;
}

// FP8 at head dims the 16-bit kernels have grids for, forward: 96 (in the 128-wide kernel) and 192 on
// the papers' grid at 2k and 8k, as headdims times them in bf16, then the mla grid's
// DeepSeek layers (q/k 192, v 128) in FP8.
std::vector<Shape> fp8_headdims_grid() {
  std::vector<Shape> shapes = flash_papers_grid(Dtype::kFloat8E4M3, {96, 192}, {2048, 8192});
  for (Shape s : mla_grid()) {
    s.dtype = Dtype::kFloat8E4M3;
    shapes.push_back(s);
  }
  return shapes;
}

// The backward of the mla grid's layers (bench/mla_peers.py --backward times cuDNN on them).
std::vector<Shape> mla_bwd_grid() {
  std::vector<Shape> shapes = mla_grid();
  for (Shape& s : shapes) {
    s.backward = true;
    s.variant = backward_variant(s.variant);
  }
  return shapes;
}

// DeepSeek V2/V3 decoding with MLA's projections absorbed (qv: q/k 64, v and qv 512, one K/V head):
// 128 query heads (a whole model's, or data-parallel attention) and 16 (tensor-parallel over 8 GPUs),
// one query row or two (a multi-token-prediction draft, causal), dense and from a paged cache of 64-key
// pages with room to grow (seqused_k).
std::vector<Shape> mla_decode_grid() {
  struct Row {
    int batch, heads, seqlen_q, seqlen_k, page_size;
  };
  std::vector<Shape> shapes;
  for (const Row& r : {Row{1, 128, 1, 4096, 0}, Row{1, 128, 1, 32768, 0}, Row{32, 128, 1, 4096, 0},
                       Row{8, 16, 1, 8192, 0}, Row{64, 16, 2, 4096, 0}, Row{32, 128, 1, 4096, 64},
                       Row{64, 16, 1, 8192, 64}}) {
    Shape s;
    s.batch = r.batch;
    s.heads_q = r.heads;
    s.heads_kv = 1;
    s.seqlen_q = r.seqlen_q;
    s.seqlen_k = r.seqlen_k;
    s.causal = r.seqlen_q > 1;
    s.hdim = 64;
    s.hdim_v = 512;
    s.qv = true;
    s.variant = "qv";
    if (r.page_size > 0) {
      s.page_size = r.page_size;
      s.cache_seqlen_k = r.seqlen_k + 2 * r.page_size;
      s.variant = "qv_paged";
    }
    shapes.push_back(s);
  }
  return shapes;
}

// One KernelOptions switch, for ablation rows.
struct Switch {
  const char* name;
  bool KernelOptions::*flag;
};

// Appends base with each switch off alone, named after the switch.
void append_each_switched_off(const Shape& base, std::initializer_list<Switch> switches,
                              std::vector<Shape>* shapes) {
  for (Switch sw : switches) {
    Shape s = base;
    s.options.*sw.flag = false;
    s.variant = sw.name;
    shapes->push_back(s);
  }
}

// The headline shape (batch 2, 16 heads, seqlen 8192, hdim 128) both ways, the other head dims at the
// same hidden size, then GQA, fp16 and a short query against a long key (bottom-right causal).
std::vector<Shape> quick_grid() {
  std::vector<Shape> shapes;
  Shape base;  // bf16, batch 2, 16 heads, seqlen 8192, hdim 128
  for (bool causal : {false, true}) {
    Shape s = base;
    s.causal = causal;
    shapes.push_back(s);
  }
  for (int hdim : {64, 256}) {
    Shape s = base;
    s.hdim = hdim;
    s.heads_q = s.heads_kv = 2048 / hdim;
    shapes.push_back(s);
  }
  Shape gqa = base;
  gqa.heads_q = 32;
  gqa.heads_kv = 8;
  gqa.causal = true;
  shapes.push_back(gqa);
  Shape half = base;
  half.dtype = Dtype::kFloat16;
  shapes.push_back(half);
  Shape short_query = base;
  short_query.seqlen_q = 1024;
  short_query.causal = true;
  shapes.push_back(short_query);
  return shapes;
}

std::vector<Shape> long_grid() {
  Shape s;
  s.batch = 1;
  s.heads_q = 64;
  s.heads_kv = 8;
  s.seqlen_q = s.seqlen_k = 131072;
  s.hdim = 128;
  s.causal = true;
  return {s};
}

// All speed techniques on, then each one switched off alone.
std::vector<Shape> ablation_grid() {
  Shape base;
  base.batch = 4;
  base.heads_q = base.heads_kv = 16;
  base.seqlen_q = base.seqlen_k = 8448;
  base.hdim = 128;
  base.variant = "all_on";
  std::vector<Shape> shapes{base};
  append_each_switched_off(base,
                           {Switch{"no_warp_specialized", &KernelOptions::warp_specialized},
                            Switch{"no_pingpong", &KernelOptions::pingpong},
                            Switch{"no_intra_wg_overlap", &KernelOptions::intra_wg_overlap},
                            Switch{"no_persistent", &KernelOptions::persistent}},
                           &shapes);
  return shapes;
}

// FP8 (e4m3, no descales) on the paper grid's long half; the 16k non-causal shapes of every head dim
// with per-block descales of 128 rows (the block quantization path: a q scale per tile, k and v
// scales per K block), with a softcap of 30 (the softcap kernels), and with v keys-contiguous (V^T
// loaded by TMA, no transpose; 8k too, and causal); then the d256 16k shape with each speed technique
// switched off alone (the FP8 kernel is always warp-specialized).
std::vector<Shape> fp8_grid() {
  std::vector<Shape> shapes = flash_papers_grid(Dtype::kFloat8E4M3, {64, 128, 256}, {2048, 4096, 8192, 16384});
  const std::size_t plain = shapes.size();
  std::vector<Shape> long_non_causal;
  for (std::size_t i = 0; i < plain; ++i) {
    if (shapes[i].seqlen_q == 16384 && !shapes[i].causal) long_non_causal.push_back(shapes[i]);
  }
  for (Shape s : long_non_causal) {
    s.fp8_block_rows = 128;
    s.variant = "block_scales";
    shapes.push_back(s);
  }
  for (Shape s : long_non_causal) {
    s.softcap = 30.0f;
    s.variant = "softcap";
    shapes.push_back(s);
  }
  for (std::size_t i = 0; i < plain; ++i) {
    Shape s = shapes[i];
    if (s.seqlen_q < 8192 || (s.causal && s.seqlen_q != 16384)) continue;
    s.v_keys_contiguous = true;
    s.variant = "v_keys_contiguous";
    shapes.push_back(s);
  }
  Shape base = shapes[plain - 1];
  base.causal = false;
  append_each_switched_off(base,
                           {Switch{"no_pingpong", &KernelOptions::pingpong},
                            Switch{"no_intra_wg_overlap", &KernelOptions::intra_wg_overlap},
                            Switch{"no_persistent", &KernelOptions::persistent}},
                           &shapes);
  return shapes;
}

// Decoding (inference): one query row per sequence against a KV cache of seqlen_k keys, bf16, d 128.
// Heads 32/8 (GQA 4, Llama-3-8B-like), 32/32 (MHA) and 28/4 (GQA 7, Qwen2-7B-like) over batch 1, 8, 32
// and 1k-64k keys (28/4 from 4k), skipping caches over kMaxDecodeKvBytes. Then, at batch 8 x 16k keys of
// 32/8: head dim 64 (also at 1 x 64k), 4 query rows causal (speculative decoding: bottom-right
// aligned, each draft token sees the keys before it), 1 row with causal set (the same math; callers
// of flash-attention pass it), a paged cache of 256-key pages, one of 16-key pages (vLLM's default) and
// one of 1-key pages (SGLang's; all three also at 32 x 4k, 16 and 1 also at d 64), and a cache with room
// for 32k keys of which 16k are used (seqused_k).
constexpr double kMaxDecodeKvBytes = 16.0 * (1 << 30);

std::vector<Shape> decode_grid() {
  Shape base;
  base.heads_q = 32;
  base.heads_kv = 8;
  base.seqlen_q = 1;
  base.hdim = 128;
  struct Heads {
    int q, kv, min_seqlen_k;
  };
  std::vector<Shape> shapes;
  for (Heads heads : {Heads{32, 8, 1024}, Heads{32, 32, 1024}, Heads{28, 4, 4096}}) {
    for (int batch : {1, 8, 32}) {
      for (int seqlen_k : {1024, 4096, 16384, 65536}) {
        Shape s = base;
        s.heads_q = heads.q;
        s.heads_kv = heads.kv;
        s.batch = batch;
        s.seqlen_k = seqlen_k;
        const double kv_bytes = 2.0 * batch * heads.kv * seqlen_k * s.hdim * dtype_size(s.dtype);
        if (seqlen_k >= heads.min_seqlen_k && kv_bytes <= kMaxDecodeKvBytes) shapes.push_back(s);
      }
    }
  }
  Shape mid = base;  // batch 8 x 16k keys, 32/8
  mid.batch = 8;
  mid.seqlen_k = 16384;
  Shape d64 = mid;
  d64.hdim = 64;
  Shape d64_long = d64;
  d64_long.batch = 1;
  d64_long.seqlen_k = 65536;
  Shape speculative = mid;
  speculative.seqlen_q = 4;
  speculative.causal = true;
  Shape causal = mid;
  causal.causal = true;
  Shape cache = mid;
  cache.cache_seqlen_k = 32768;
  cache.variant = "seqused_k";
  for (const Shape& s : {d64, d64_long, speculative, causal, cache}) shapes.push_back(s);
  // Paged: b 8 x 16k and b 32 x 4k in pages of page_size keys (and d 64 where asked).
  const auto add_paged = [&](int page_size, bool with_d64) {
    Shape paged = mid;
    paged.page_size = page_size;
    paged.variant = "paged_" + std::to_string(page_size);
    Shape wide = paged;
    wide.batch = 32;
    wide.seqlen_k = 4096;
    shapes.push_back(paged);
    shapes.push_back(wide);
    if (with_d64) {
      paged.hdim = 64;
      shapes.push_back(paged);
    }
  };
  add_paged(256, false);
  add_paged(16, true);
  add_paged(1, true);
  return shapes;
}

// Decoding at head dims above 128, bf16: Gemma 2 / 3's d 256 (16/8 heads as Gemma 3 12B's, 8/4 as 4B's,
// 4/1 as 1B's), one query row against 4k-64k cached keys at batch 1, 8 and 32, dense and from pages of
// 256 and 16 keys; 16/16 (MHA), two draft rows causal (speculative decoding); d 192 (32/8) and
// DeepSeek's 192 / 128 (16/16, one sequence); then FP8 (an e4m3 cache, per-head descales) at d 256:
// 1 x 16/8 x 16k, 1 x 8/4 x 32k and 8 x 16/8 x 16k.
std::vector<Shape> decode_wide_grid() {
  struct Row {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, hdim, hdim_v, page_size;
    Dtype dtype = Dtype::kBFloat16;
  };
  constexpr Dtype kFp8 = Dtype::kFloat8E4M3;
  std::vector<Shape> shapes;
  for (const Row& r : {Row{1, 16, 8, 1, 4096, 256, 0, 0}, Row{1, 16, 8, 1, 16384, 256, 0, 0},
                       Row{1, 16, 8, 1, 65536, 256, 0, 0}, Row{8, 16, 8, 1, 16384, 256, 0, 0},
                       Row{32, 16, 8, 1, 4096, 256, 0, 0}, Row{1, 8, 4, 1, 32768, 256, 0, 0},
                       Row{16, 4, 1, 1, 8192, 256, 0, 0}, Row{1, 16, 16, 1, 16384, 256, 0, 0},
                       Row{8, 16, 8, 2, 16384, 256, 0, 0}, Row{1, 16, 8, 1, 16384, 256, 0, 256},
                       Row{8, 16, 8, 1, 16384, 256, 0, 256}, Row{8, 16, 8, 1, 16384, 256, 0, 16},
                       Row{8, 32, 8, 1, 8192, 192, 0, 0}, Row{1, 16, 16, 1, 16384, 192, 128, 0},
                       Row{1, 16, 8, 1, 16384, 256, 0, 0, kFp8}, Row{1, 8, 4, 1, 32768, 256, 0, 0, kFp8},
                       Row{8, 16, 8, 1, 16384, 256, 0, 0, kFp8}}) {
    Shape s;
    s.dtype = r.dtype;
    s.batch = r.batch;
    s.heads_q = r.heads_q;
    s.heads_kv = r.heads_kv;
    s.seqlen_q = r.seqlen_q;
    s.seqlen_k = r.seqlen_k;
    s.causal = r.seqlen_q > 1;
    s.hdim = r.hdim;
    s.hdim_v = r.hdim_v;
    if (r.page_size > 0) {
      s.page_size = r.page_size;
      s.variant = "paged_" + std::to_string(r.page_size);
    }
    shapes.push_back(s);
  }
  return shapes;
}

}  // namespace

const char* dtype_short_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBFloat16: return "bf16";
    case Dtype::kFloat16: return "fp16";
    case Dtype::kFloat8E4M3: return "fp8";
    default: return dtype_name(dtype);
  }
}

const char* grid_names() {
  return "quick, paper, long, ablation, fp8, bwd, decode, decode_wide, headdims, fp8_headdims, mla, mla_bwd, mla_decode";
}

bool make_grid(const std::string& name, std::vector<Shape>* shapes) {
  if (name == "quick") *shapes = quick_grid();
  else if (name == "paper") *shapes = paper_grid();
  else if (name == "long") *shapes = long_grid();
  else if (name == "ablation") *shapes = ablation_grid();
  else if (name == "fp8") *shapes = fp8_grid();
  else if (name == "bwd") *shapes = bwd_grid();
  else if (name == "decode") *shapes = decode_grid();
  else if (name == "decode_wide") *shapes = decode_wide_grid();
  else if (name == "headdims") *shapes = headdims_grid();
  else if (name == "fp8_headdims") *shapes = fp8_headdims_grid();
  else if (name == "mla") *shapes = mla_grid();
  else if (name == "mla_bwd") *shapes = mla_bwd_grid();
  else if (name == "mla_decode") *shapes = mla_decode_grid();
  else return false;
  return true;
}

double forward_flops(const Shape& shape) {
  const double per_pair = 2.0 * shape.batch * shape.heads_q * (shape.hdim + (shape.qv ? 2 : 1) * head_dim_v(shape));
  const double sq = shape.seqlen_q, sk = shape.seqlen_k;
  const bool plain = shape.window_left < 0 && shape.attention_chunk <= 0;
  if (!shape.causal && plain) return per_pair * sq * sk;
  if (shape.causal && plain && shape.seqlen_q == shape.seqlen_k) return per_pair * sq * sk / 2.0;
  // Query i sees keys [i + sk - sq - window_left, i + sk - sq] (bottom-right aligned; each side
  // unbounded without causal / a window) of its diagonal's chunk, clipped to [0, sk).
  double pairs = 0.0;
  const std::int64_t chunk = shape.attention_chunk;
  for (std::int64_t i = 0; i < shape.seqlen_q; ++i) {
    const std::int64_t diagonal = i + shape.seqlen_k - shape.seqlen_q;
    std::int64_t last = shape.causal ? std::min<std::int64_t>(diagonal, shape.seqlen_k - 1) : shape.seqlen_k - 1;
    std::int64_t first = shape.window_left >= 0 ? std::max<std::int64_t>(diagonal - shape.window_left, 0) : 0;
    if (chunk > 0) {
      const std::int64_t chunk_first = (diagonal >= 0 ? diagonal / chunk : -((-diagonal + chunk - 1) / chunk)) * chunk;
      first = std::max(first, chunk_first);
      last = std::min(last, chunk_first + chunk - 1);
    }
    pairs += static_cast<double>(std::max<std::int64_t>(last - first + 1, 0));
  }
  return per_pair * pairs;
}

// Five GEMMs a pair against the forward's two: S = Q K^T, dK = dS^T Q and dQ = dS K over q/k's head dim,
// dP = dO V^T and dV = P^T dO over v's (2.5x the forward's where the two are equal, as the papers count).
double backward_flops(const Shape& shape) {
  const double d = shape.hdim, d_v = head_dim_v(shape);
  return forward_flops(shape) * (3.0 * d + 2.0 * d_v) / (d + d_v);
}

double timed_flops(const Shape& shape) { return shape.backward ? backward_flops(shape) : forward_flops(shape); }

int allocated_keys(const Shape& shape) { return shape.cache_seqlen_k > 0 ? shape.cache_seqlen_k : shape.seqlen_k; }

int head_dim_v(const Shape& shape) { return shape.hdim_v > 0 ? shape.hdim_v : shape.hdim; }

int allocated_rows_q(const Shape& shape) { return shape.padded_seqlen_q > 0 ? shape.padded_seqlen_q : shape.seqlen_q; }

double forward_bytes(const Shape& shape) {
  const double in = dtype_size(shape.dtype);
  const double out = shape.dtype == Dtype::kFloat8E4M3 ? 2.0 : in;  // fp8 attention writes bf16
  const double q_rows = 1.0 * shape.batch * shape.seqlen_q * shape.heads_q;
  const double kv_rows = 1.0 * shape.batch * shape.seqlen_k * shape.heads_kv;
  const double d = shape.hdim, d_v = head_dim_v(shape);
  return q_rows * ((d + (shape.qv ? d_v : 0.0)) * in + d_v * out) + kv_rows * (d + d_v) * in;
}

double timed_bytes(const Shape& shape) { return shape.backward ? 0.0 : forward_bytes(shape); }

std::string backward_variant(const std::string& forward_variant) {
  return forward_variant == "default" ? "backward" : "backward_" + forward_variant;
}

std::vector<int> page_table_values(int batch, int pages_per_seq, bool in_order, std::uint64_t seed) {
  std::vector<int> table(static_cast<std::size_t>(batch) * pages_per_seq);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int>(i);
  if (!in_order) std::shuffle(table.begin(), table.end(), std::mt19937_64(seed));
  return table;
}

std::vector<float> fp8_block_descale_values(std::int64_t count, Fp8BlockScales kind, bool v_scales,
                                            std::uint64_t seed) {
  std::vector<float> scales(static_cast<std::size_t>(count), 1.0f);
  if (kind == Fp8BlockScales::kOnes) return scales;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> amax(4.0f, 5.5f);
  for (float& scale : scales) {
    scale = amax(rng) / 448.0f;
    if (v_scales && kind == Fp8BlockScales::kQuantized) scale = std::exp2(std::ceil(std::log2(scale)));
    if (v_scales && kind == Fp8BlockScales::kStraddle) scale = rng() % 2 ? 1.0f / 64 : 1.0f / 128;
  }
  return scales;
}

}  // namespace hopattn::bench
