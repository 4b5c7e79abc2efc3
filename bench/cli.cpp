#include "cli.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace hopattn::bench {
namespace {

bool parse_positive_int(const std::string& flag, const std::string& text, int* value, std::string* error) {
  errno = 0;
  char* end = nullptr;
  const long parsed = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || parsed < 1 || parsed > std::numeric_limits<int>::max()) {
    *error = flag + " wants a positive integer, got '" + text + "'";
    return false;
  }
  *value = static_cast<int>(parsed);
  return true;
}

bool parse_dtype(const std::string& text, Dtype* dtype, std::string* error) {
  if (text == "bf16") *dtype = Dtype::kBFloat16;
  else if (text == "fp16") *dtype = Dtype::kFloat16;
  else if (text == "fp8") *dtype = Dtype::kFloat8E4M3;
  else {
    *error = "--dtype wants bf16, fp16 or fp8, got '" + text + "'";
    return false;
  }
  return true;
}

bool parse_fp8_scales(const std::string& text, Fp8BlockScales* scales, std::string* error) {
  if (text == "quantized") *scales = Fp8BlockScales::kQuantized;
  else if (text == "amax") *scales = Fp8BlockScales::kAmax;
  else if (text == "straddle") *scales = Fp8BlockScales::kStraddle;
  else if (text == "ones") *scales = Fp8BlockScales::kOnes;
  else {
    *error = "--fp8-scales wants quantized, amax, straddle or ones, got '" + text + "'";
    return false;
  }
  return true;
}

bool takes_value(const std::string& flag) {
  for (const char* known : {"--grid", "--batch", "--heads", "--heads-kv", "--seqlen-q", "--seqlen-k", "--hdim", "--hdim-v",
                            "--causal", "--dtype", "--softcap", "--fp8-block-rows", "--fp8-scales", "--num-splits",
                            "--page-size", "--cache-seqlen", "--padded-seqlen-q", "--window-left", "--chunk", "--iters", "--warmup",
                            "--json"}) {
    if (flag == known) return true;
  }
  return false;
}

// --backward times hopattn::backward, which takes bf16/fp16 dense or variable-length tensors and none of
// the forward's kernel switches: say which flag does not go with it rather than time something else.
bool check_backward_shape(const Shape& s, std::string* error) {
  const char* clash = nullptr;
  if (s.dtype == Dtype::kFloat8E4M3) clash = "--dtype fp8 (the backward takes bf16 or fp16)";
  else if (s.page_size > 0) clash = "--page-size (the backward takes dense k and v, no paged cache)";
  else if (s.cache_seqlen_k > 0) clash = "--cache-seqlen (a forward option)";
  else if (s.fp8_block_rows > 0) clash = "--fp8-block-rows (an fp8 forward option)";
  else if (s.v_keys_contiguous) clash = "--v-keys-contiguous (an fp8 forward option)";
  else if (s.num_splits != 0) clash = "--num-splits (a forward option)";
  else if (s.qv) clash = "--qv (forward only)";
  else if (!s.options.pingpong || !s.options.intra_wg_overlap || !s.options.persistent ||
           s.options.pack_gqa != KernelOptions::PackGqa::kAuto || s.options.kv_loads != KernelOptions::KvLoads::kAuto)
    clash = "--no-pingpong/--no-overlap/--no-persistent/--no-pack-gqa/--kv-* (forward kernel switches)";
  if (clash == nullptr) return true;
  *error = std::string("--backward is not supported with ") + clash;
  return false;
}

// --cache-seqlen: a cache at least as long as the keys in use, over dense k and v (the bench does not
// pack it with --varlen).
bool check_cache_shape(const Shape& s, std::string* error) {
  if (s.cache_seqlen_k < s.seqlen_k) {
    *error = "--cache-seqlen " + std::to_string(s.cache_seqlen_k) + " must be at least seqlen_k " +
             std::to_string(s.seqlen_k) + " (the keys in use)";
    return false;
  }
  if (s.varlen) {
    *error = "--cache-seqlen is not supported with --varlen (the cache is dense or --page-size paged)";
    return false;
  }
  return true;
}

// --padded-seqlen-q: at least the rows in use.
bool check_padded_q_shape(const Shape& s, std::string* error) {
  if (s.padded_seqlen_q >= s.seqlen_q) return true;
  *error = "--padded-seqlen-q " + std::to_string(s.padded_seqlen_q) + " must be at least seqlen_q " +
           std::to_string(s.seqlen_q) + " (the rows in use)";
  return false;
}

}  // namespace

std::string usage_text() {
  return std::string(
             "usage: hopattn-bench [--grid NAME] [shape flags] [--iters N] [--warmup N] [--no-lse] [--queue-ahead]\n"
             "                     [--back-to-back] [--no-programmatic-launch] [--list] [--json PATH]\n"
             "Times hopattn::forward, or hopattn::backward with --backward / --grid bwd (CUDA events, median),\n"
             "and prints TFLOP/s and TB/s (the bytes a forward must move, over its time) per shape.\n"
             "  --grid NAME      one of: ") +
         grid_names() +
         " (default quick;\n"
         "                   bwd: the backward on the paper grid's shapes at head dims 64, 128 and 256;\n"
         "                   decode: decoding, one query row (one row of four) against 1k-64k cached keys,\n"
         "                   GQA and MHA, paged and seqused_k rows; timed with --queue-ahead and --no-lse;\n"
         "                   read its TB/s column against the HBM rate. With PyTorch's peers beside it on\n"
         "                   a GPU machine: bench/device_bench.sh --grid decode;\n"
         "                   decode_wide: decoding at head dims 192 and 256 (Gemma's d 256), timed as decode;\n"
         "                   headdims: the forward at head dims 80, 96, 160 and 192;\n"
         "                   fp8_headdims: FP8 at head dims 96 and 192, and the mla layers in FP8;\n"
         "                   mla: DeepSeek's layers, q/k 192 and v 128, forward; mla_bwd: their backward;\n"
         "                   cuDNN on them: bench/mla_peers.py [--backward];\n"
         "                   mla_decode: DeepSeek's decoding with MLA absorbed (qv: q/k 64, v and qv 512))\n"
         "  shape flags time one shape instead of a grid (defaults: bf16, batch 2, 16 heads, seqlen 8192, hdim 128):\n"
         "    --batch N --heads N --heads-kv N --seqlen-q N --seqlen-k N --hdim N --causal --dtype bf16|fp16|fp8\n"
         "    --hdim-v N (v, out, dout and dv of head dim N, flash-attention 3's headdim_v; DeepSeek: --hdim 192\n"
         "      --hdim-v 128; FLOPs count QK^T at hdim and P V at N)\n"
         "    --softcap X (scores -> X tanh(score / X); default 0: off)\n"
         "    --fp8-block-rows N (fp8: q, k and v descales per block of N rows, the block quantization path)\n"
         "    --fp8-scales quantized|amax|straddle|ones (with --fp8-block-rows: the descales' values;\n"
         "      quantized (default): amax / 448 for an amax per block drawn in [4, 5.5], v's rounded up to a\n"
         "      power of two, as quantize_fp8 writes them; amax: v's not rounded (quantize_fp8 before session\n"
         "      39); straddle: v's 2^-6 or 2^-7 at random; ones: all 1)\n"
         "    --v-keys-contiguous (fp8: v stored as V^T, keys contiguous; the kernel skips its V transpose)\n"
         "    --kv-heads-major (k and v stored (batch, heads_kv, keys, d), as PyTorch's SDPA takes them,\n"
         "      and passed through strides; default: (batch, keys, heads_kv, d), flash-attention's layout)\n"
         "    --varlen (the batch packed with cu_seqlens of equal lengths: the variable-length kernel)\n"
         "    --learnable-sink (a sink logit per q head, FwdArgs::learnable_sink; the backward writes dsink)\n"
         "    --qv (FwdArgs::qv, a second query of v's head dim scored against v: DeepSeek's MLA decoding,\n"
         "      with --hdim 64 --hdim-v 512 --heads-kv 1; forward only; FLOPs count its GEMM)\n"
         "    --window-left N (a sliding window: each query sees N keys before its diagonal; with --causal,\n"
         "      gpt-oss's and Mistral's local layers; FLOPs count the visible pairs)\n"
         "    --chunk N (attention_chunk: each query sees only the keys of its diagonal's N-key chunk; with\n"
         "      --causal, Llama 4's chunked local layers; FLOPs count the visible pairs)\n"
         "    --page-size N (k and v as a paged cache of N-key pages in shuffled order)\n"
         "    --pages-in-order (with --page-size: the page table hands out pages in storage order, as a\n"
         "      fresh cache does, instead of shuffled)\n"
         "    --cache-seqlen N (k and v a cache of N >= seqlen_k keys per sequence, of which\n"
         "               seqlen_k are used: passed as seqused_k, flash-attention's cache_seqlens)\n"
         "    --padded-seqlen-q N (q, out, lse, dout and dq of N >= seqlen_q rows per sequence, of which\n"
         "               seqlen_q are used: passed as seqused_q, a static batch padded for CUDA graphs;\n"
         "               forward and --backward, dense or --varlen)\n"
         "    --backward (bf16/fp16, dense or --varlen: time hopattn::backward (dq, dk, dv) after one forward\n"
         "               that writes out and the LSE; FLOPs 2.5x the forward's; not with fp8, --page-size,\n"
         "               --no-lse, --num-splits or the --no-* switches)\n"
         "    --deterministic (with --backward or --grid bwd: BwdArgs::deterministic, dq summed in a\n"
         "               fixed order)\n"
         "  --iters N        timed calls per shape (default 50; fewer when a shape takes seconds)\n"
         "  --warmup N       untimed calls first (default 10)\n"
         "  --no-lse         do not write the log-sum-exp (inference forward)\n"
         "  --queue-ahead    queue all of a shape's timed calls before the GPU starts them, so that each call's\n"
         "                   events time its GPU work alone, without the wait for its host-side launch (which\n"
         "                   can take longer than a decoding call); default for --grid decode and mla_decode\n"
         "  --back-to-back   --queue-ahead with events around groups of 10 calls instead of each call: the\n"
         "                   calls' kernels follow one another as in a model's stream (an event between two\n"
         "                   kernels keeps the second from launching early); time: a group's mean per call\n"
         "  --no-programmatic-launch   every shape's forward kernel launched as an ordinary kernel, not as a\n"
         "                   programmatic dependent of the call ahead (KernelOptions::programmatic_launch)\n"
         "  --list           print the shapes (and with --json write them, status not_run) and time nothing;\n"
         "                   runs on any machine (bench/decode_peers.py --shapes reads that JSON)\n"
         "  --no-pingpong, --no-overlap, --no-persistent   switch one speed technique off (single shape)\n"
         "  --no-pack-gqa    do not pack the query heads of a K/V head into one tile (single shape)\n"
         "  --kv-tma, --kv-copies   load K/V by TMA, or by the producer warpgroup's cp.async copies\n"
         "                   (single shape; default: copies for decoding steps of >= 64 MiB of K/V)\n"
         "  --num-splits N   key splits per tile (single shape): 1 = none, N >= 2 = N pieces; default: the\n"
         "                   launch splits the last rounds' tiles where that evens out the SMs' work\n"
         "  --json PATH      also write every row, the device, date and git commit as JSON (rows carry flops,\n"
         "                   bytes (forward: q, k, v read and out written once) and kv_tbps = bytes / time)\n"
         "Without a Hopper GPU it says so and times the CPU reference on a small problem (its backward with\n"
         "--backward or --grid bwd).\n";
}

bool parse_cli(int argc, char** argv, CliOptions* options, std::string* error) {
  Shape single;
  bool single_given = false, grid_given = false, heads_kv_given = false, seqlen_k_given = false;
  bool deterministic = false, fp8_scales_given = false, programmatic_launch = true;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    bool has_inline_value = false;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_inline_value = true;
    }
    // Flags without a value.
    if (flag == "-h" || flag == "--help") {
      options->help = true;
      continue;
    }
    if (flag == "--causal" && !has_inline_value) {
      single.causal = single_given = true;
      continue;
    }
    if (flag == "--v-keys-contiguous") {
      single.v_keys_contiguous = single_given = true;
      single.variant = "v_keys_contiguous";
      continue;
    }
    if (flag == "--kv-heads-major") {
      single.kv_heads_major = single_given = true;
      single.variant = "kv_heads_major";
      continue;
    }
    if (flag == "--pages-in-order") {
      single.pages_in_order = single_given = true;
      continue;
    }
    if (flag == "--varlen") {
      single.varlen = single_given = true;
      single.variant = "varlen";
      continue;
    }
    if (flag == "--qv") {
      single.qv = single_given = true;
      single.variant = "qv";
      continue;
    }
    if (flag == "--learnable-sink") {
      single.learnable_sink = single_given = true;
      single.variant = "learnable_sink";
      continue;
    }
    if (flag == "--no-lse") {
      options->write_lse = false;
      continue;
    }
    // Run-wide switches. --no-programmatic-launch: every shape's forward launched as an ordinary kernel
    // (KernelOptions::programmatic_launch off), to time what the overlap with the call ahead buys (with
    // --back-to-back: events keep it from happening).
    if (flag == "--queue-ahead" || flag == "--back-to-back" || flag == "--list" ||
        flag == "--no-programmatic-launch") {
      if (has_inline_value) {
        *error = flag + " takes no value; got '" + value + "'";
        return false;
      }
      if (flag == "--no-programmatic-launch") programmatic_launch = false;
      if (flag == "--list") options->list_only = true;
      if (flag == "--back-to-back") options->back_to_back = true;
      if (flag == "--queue-ahead" || flag == "--back-to-back") options->queue_ahead = true;
      continue;
    }
    if (flag == "--backward") {
      if (has_inline_value) {
        *error = "--backward takes no value; got '" + value + "'";
        return false;
      }
      single.backward = single_given = true;
      continue;
    }
    if (flag == "--deterministic") {
      if (has_inline_value) {
        *error = "--deterministic takes no value; got '" + value + "'";
        return false;
      }
      deterministic = true;  // a single backward shape's, or the bwd grid's (below)
      continue;
    }
    // One speed technique off for the single shape (the ablation grid does all of them at one shape).
    if (flag == "--no-pingpong" || flag == "--no-overlap" || flag == "--no-persistent") {
      bool KernelOptions::*field = flag == "--no-pingpong"  ? &KernelOptions::pingpong
                                   : flag == "--no-overlap" ? &KernelOptions::intra_wg_overlap
                                                            : &KernelOptions::persistent;
      single.options.*field = false;
      single.variant = flag.substr(2);
      single_given = true;
      continue;
    }
    // GQA packing off (KernelOptions::pack_gqa), to time what it buys a decoding step.
    if (flag == "--no-pack-gqa") {
      single.options.pack_gqa = KernelOptions::PackGqa::kOff;
      single.variant = "no-pack-gqa";
      single_given = true;
      continue;
    }
    // K/V by TMA or by copy threads (KernelOptions::kv_loads), to time one against the other.
    if (flag == "--kv-tma" || flag == "--kv-copies") {
      single.options.kv_loads =
          flag == "--kv-tma" ? KernelOptions::KvLoads::kTma : KernelOptions::KvLoads::kCopyThreads;
      single.variant = flag.substr(2);
      single_given = true;
      continue;
    }
    if (!takes_value(flag)) {
      *error = "unknown argument '" + flag + "' (see --help)";
      return false;
    }
    if (!has_inline_value) {
      if (i + 1 >= argc) {
        *error = flag + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    // Shape flags that take a positive integer.
    int* shape_int = nullptr;
    if (flag == "--batch") shape_int = &single.batch;
    else if (flag == "--fp8-block-rows") shape_int = &single.fp8_block_rows;
    else if (flag == "--heads") shape_int = &single.heads_q;
    else if (flag == "--heads-kv") shape_int = &single.heads_kv;
    else if (flag == "--seqlen-q") shape_int = &single.seqlen_q;
    else if (flag == "--seqlen-k") shape_int = &single.seqlen_k;
    else if (flag == "--hdim") shape_int = &single.hdim;
    else if (flag == "--hdim-v") shape_int = &single.hdim_v;
    else if (flag == "--page-size") shape_int = &single.page_size;
    else if (flag == "--cache-seqlen") shape_int = &single.cache_seqlen_k;
    else if (flag == "--padded-seqlen-q") shape_int = &single.padded_seqlen_q;
    else if (flag == "--window-left") shape_int = &single.window_left;
    else if (flag == "--chunk") shape_int = &single.attention_chunk;
    if (shape_int != nullptr) {
      if (!parse_positive_int(flag, value, shape_int, error)) return false;
      single_given = true;
      heads_kv_given = heads_kv_given || shape_int == &single.heads_kv;
      seqlen_k_given = seqlen_k_given || shape_int == &single.seqlen_k;
      if (shape_int == &single.fp8_block_rows) single.variant = "block_scales";
      if (shape_int == &single.page_size) single.variant = "paged_" + value;
      if (shape_int == &single.cache_seqlen_k) single.variant = "seqused_k";
      if (shape_int == &single.padded_seqlen_q) single.variant = "seqused_q";
      if (shape_int == &single.hdim_v) single.variant = "hdim_v_" + value;
      if (shape_int == &single.window_left) single.variant = "window_" + value;
      if (shape_int == &single.attention_chunk) single.variant = "chunk_" + value;
    } else if (flag == "--dtype") {
      if (!parse_dtype(value, &single.dtype, error)) return false;
      single_given = true;
    } else if (flag == "--fp8-scales") {
      if (!parse_fp8_scales(value, &single.fp8_block_scales, error)) return false;
      single_given = fp8_scales_given = true;
    } else if (flag == "--causal") {
      if (value != "0" && value != "1") {
        *error = "--causal takes no value, or 0 or 1; got '" + value + "'";
        return false;
      }
      single.causal = value == "1";
      single_given = true;
    } else if (flag == "--softcap") {
      char* end = nullptr;
      const float cap = std::strtof(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(cap >= 0.0f) || !std::isfinite(cap)) {
        *error = "--softcap wants a finite number >= 0 (0 = off), got '" + value + "'";
        return false;
      }
      single.softcap = cap;
      if (cap > 0.0f) single.variant = "softcap";
      single_given = true;
    } else if (flag == "--num-splits") {
      if (!parse_positive_int(flag, value, &single.num_splits, error)) return false;
      single.variant = single.num_splits == 1 ? "no_tail_split" : "num_splits_" + value;
      single_given = true;
    } else if (flag == "--grid") {
      std::vector<Shape> probe;
      if (!make_grid(value, &probe)) {
        *error = std::string("--grid wants one of ") + grid_names() + ", got '" + value + "'";
        return false;
      }
      options->grid = value;
      grid_given = true;
    } else if (flag == "--iters") {
      if (!parse_positive_int(flag, value, &options->iters, error)) return false;
    } else if (flag == "--warmup") {
      if (!parse_positive_int(flag, value, &options->warmup, error)) return false;
    } else {  // --json
      options->json_path = value;
    }
  }
  if (single_given && grid_given) {
    *error = single.backward
                 ? "--backward times one shape and excludes --grid (--grid bwd: the backward grid)"
                 : "--grid and the shape flags (--batch, --heads, --seqlen-q, ...) exclude each other: pick one";
    return false;
  }
  if (deterministic && !single.backward && !(grid_given && options->grid == "bwd")) {
    *error = "--deterministic applies to the backward only (add --backward, or use --grid bwd)";
    return false;
  }
  if (single_given) {
    // Unless given, heads_kv follows heads and seqlen_k follows seqlen_q (plain self-attention).
    if (!heads_kv_given) single.heads_kv = single.heads_q;
    if (!seqlen_k_given) single.seqlen_k = single.seqlen_q;
    if (single.backward) {
      if (!check_backward_shape(single, error)) return false;
      single.deterministic = deterministic;
      if (single.deterministic) single.variant = single.variant == "default" ? "deterministic" : single.variant + "_deterministic";
      single.variant = backward_variant(single.variant);
    }
    if (single.cache_seqlen_k > 0 && !check_cache_shape(single, error)) return false;
    if (single.padded_seqlen_q > 0 && !check_padded_q_shape(single, error)) return false;
    if (fp8_scales_given) {
      if (single.fp8_block_rows == 0) {
        *error = "--fp8-scales sets the values of per-block descales: add --fp8-block-rows N";
        return false;
      }
      const Fp8BlockScales kind = single.fp8_block_scales;
      if (single.variant == "block_scales" && kind != Fp8BlockScales::kQuantized) {
        single.variant += kind == Fp8BlockScales::kAmax       ? "_amax"
                          : kind == Fp8BlockScales::kStraddle ? "_straddle"
                                                              : "_ones";
      }
    }
    if (single.kv_heads_major && (single.varlen || single.page_size > 0 || single.v_keys_contiguous)) {
      *error = "--kv-heads-major lays out dense k and v; it does not go with --varlen, --page-size or "
               "--v-keys-contiguous";
      return false;
    }
    if (single.pages_in_order && single.page_size == 0) {
      *error = "--pages-in-order orders a paged cache's pages; it needs --page-size";
      return false;
    }
    if (single.pages_in_order) single.variant += "_in_order";
    if (single.page_size > 0 && allocated_keys(single) % single.page_size != 0) {
      *error = "--page-size " + std::to_string(single.page_size) + " must divide " +
               (single.cache_seqlen_k > 0 ? "--cache-seqlen " : "seqlen_k ") + std::to_string(allocated_keys(single)) +
               " (the bench fills every page)";
      return false;
    }
    options->shapes = {single};
    options->grid = "single";
  } else {
    make_grid(options->grid, &options->shapes);
    if (deterministic) {  // --grid bwd (checked above)
      for (Shape& s : options->shapes) {
        s.deterministic = true;
        s.variant = backward_variant("deterministic");
      }
    }
    // A decoding call can take less GPU time than its launch, and inference does not write the LSE.
    if (options->grid == "decode" || options->grid == "decode_wide" || options->grid == "mla_decode") {
      options->queue_ahead = true;
      options->write_lse = false;
    }
  }
  if (!options->write_lse &&
      std::any_of(options->shapes.begin(), options->shapes.end(), [](const Shape& s) { return s.backward; })) {
    *error = "--no-lse does not apply to the backward (--backward, --grid bwd): it needs the forward's LSE";
    return false;
  }
  if (!programmatic_launch) {
    for (Shape& s : options->shapes) s.options.programmatic_launch = false;
  }
  return true;
}

}  // namespace hopattn::bench
