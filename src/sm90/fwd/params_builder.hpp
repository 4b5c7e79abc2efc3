// Host-side construction and sanity check of FwdParams, shared by the 16-bit and FP8 launchers and
// plain C++ (no CUDA runtime) so the CPU tests can check exactly what a launch would pass.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "api/problem.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/host/int_array.hpp"

namespace hopattn::sm90 {

// Whether a launch of block_m-row tiles packs GQA (FwdParams::pack_gqa): as the option says, and by
// default where packing needs fewer tiles and the queries fit in one unpacked tile (ratio >= 2, fewer
// query rows than block_m: decoding, speculative decoding, short prompts). Longer prompts keep their
// tiles: packing would save at most one tile in ratio, on kernels that take the whole K/V range of
// kBlockM rows for a causal tile of fewer (scheduler.cuh). Only the variable-length kernels pack
// (fwd/packed_gqa.cuh); the forward routes packed launches to them.
inline bool packs_gqa(KernelOptions::PackGqa option, const detail::Problem& pr, int block_m) {
  const int ratio = pr.heads_q / pr.heads_kv;
  if (option == KernelOptions::PackGqa::kOff || ratio > block_m) return false;
  if (option == KernelOptions::PackGqa::kOn) return true;
  if (ratio < 2 || pr.seqlen_q >= block_m) return false;
  const long long unpacked = static_cast<long long>(ratio) * ((pr.seqlen_q + block_m - 1) / block_m);
  const int packed_q_rows = block_m / ratio;
  const long long packed = (pr.seqlen_q + packed_q_rows - 1) / packed_q_rows;
  return packed < unpacked;
}

// The heads of a launch's tile grid, per batch entry: the K/V heads where GQA heads are packed into a
// tile (each tile holds a K/V head's query heads), else the query heads.
inline int tile_grid_heads(const detail::Problem& pr, bool pack_gqa) { return pack_gqa ? pr.heads_kv : pr.heads_q; }

// The most keys one tile of block_m query rows can see: seqlen_k, or fewer under a sliding window of
// both sides (causal counts as window_right 0): a tile's rows see window_left keys before the first
// row's diagonal, its block_m diagonals and window_right keys after the last; or under chunks, keys
// from the first row's chunk to the end of the last row's. The 16-bit d 64 and the
// FP8 forward pick their key blocks from this rather than from seqlen_k (shipped_configs.cuh,
// fwd_fp8/launch.cuh).
inline long long keys_per_tile(const detail::Problem& pr, int block_m) {
  long long keys = pr.seqlen_k;
  if (pr.window_left >= 0 && pr.window_right >= 0) {
    const long long span = static_cast<long long>(pr.window_left) + pr.window_right + block_m;
    keys = span < keys ? span : keys;
  }
  if (pr.attention_chunk > 0) {
    // From the first row's chunk to the end of the last row's: fewer than block_m + 2 chunks.
    const long long span = 2LL * pr.attention_chunk + block_m;
    keys = span < keys ? span : keys;
  }
  return keys;
}

// d 64's variable-length tiles take 128-key blocks up to this many keys a tile (keys_per_tile) and
// 192-key blocks past it (shipped_configs.cuh; H100, perf-notes v168, v169).
constexpr long long kMaxNarrowVarlenKeys = 4096;

// Whether a launch is a decoding step: each tile holds at most block_m / 2 live query rows, a query row
// counting rows_per_query times (its head ratio where GQA heads are packed into the tile, else 1).
// Such a step streams K/V from HBM with few rows to compute on: the K/V copies and the variable-length
// split's piece count (plan_varlen_split) both read it.
inline bool is_decoding_step(long long seqlen_q, int rows_per_query, int block_m) {
  return 2 * seqlen_q * rows_per_query <= block_m;
}

// The same for a validated call, its GQA heads packed where pack_gqa packs them (packs_gqa).
inline bool is_decoding_step(const FwdArgs& args, const detail::Problem& pr, int block_m) {
  const int rows_per_query = packs_gqa(args.options.pack_gqa, pr, block_m) ? pr.heads_q / pr.heads_kv : 1;
  return is_decoding_step(pr.seqlen_q, rows_per_query, block_m);
}

// Whether a variable-length decoding step at d 64 takes 192-key blocks rather than 128 (shipped_configs.cuh):
// where its tiles stream whole, in at most kWideDecodingWaves waves. Where begin_schedule (launch.cuh) splits
// the tiles over idle SMs (plan_varlen_split, planned as it will plan it, over block_n-key blocks) the narrow
// blocks cut finer pieces: 1-8% faster at batch 1-8 x 32/8 heads; at four waves (batch 64 x 32/8, 512
// tiles) they were 0.9% faster too; at batch 16-48 (128-384 tiles) the 192-key blocks were 1-1.6% faster
// (H100, perf-notes v176, v177).
constexpr long long kWideDecodingWaves = 3;
inline bool decoding_step_takes_wide_blocks(const FwdArgs& args, const detail::Problem& pr, int block_m, int block_n,
                                            int warpgroups, int sms) {
  // A decoding step's tile grid has one m-block: a tile per batch entry and tile grid head.
  const long long tiles =
      static_cast<long long>(pr.batch) * tile_grid_heads(pr, packs_gqa(args.options.pack_gqa, pr, block_m));
  if (tiles > kWideDecodingWaves * sms) return false;
  if (!args.options.persistent) return true;  // begin_schedule splits persistent launches only
  const int tile_blocks = (pr.seqlen_k + block_n - 1) / block_n;
  return plan_varlen_split(static_cast<int>(tiles), tile_blocks, sms, args.num_splits, warpgroups, true).units == 0;
}

// The decoding kernel of the head dims above 128 (FwdTraits::kDecodingOnly, Fp8FwdTraits' alike: the
// d 256 one, where 136-256 run) computes every tile transposed, with the query rows as the wgmma's N = 8
// (fwd/transposed_decode.cuh), so it takes launches whose tiles hold at most kTransposedRows live rows.
// It packs GQA where the packed rows fit (seqlen_q * heads_q / heads_kv <= 8): as pack_gqa = kOn says,
// and by default from a ratio of 2, but not over an FP8 q block descale (its entries are per query
// head); otherwise it takes steps of at most 8 query rows unpacked (pack_gqa = kOff, or a ratio above 8).
constexpr int kTransposedRows = 8;
inline bool decoding_kernel_packs(KernelOptions::PackGqa option, const detail::Problem& pr,
                                  bool q_block_descale = false) {
  const int ratio = pr.heads_q / pr.heads_kv;
  if (option == KernelOptions::PackGqa::kOff || q_block_descale ||
      static_cast<long long>(pr.seqlen_q) * ratio > kTransposedRows)
    return false;
  return option == KernelOptions::PackGqa::kOn || ratio >= 2;
}
inline bool fits_decoding_kernel(KernelOptions::PackGqa option, const detail::Problem& pr,
                                 bool q_block_descale = false) {
  if (decoding_kernel_packs(option, pr, q_block_descale)) return true;
  return option != KernelOptions::PackGqa::kOn && pr.seqlen_q <= kTransposedRows;
}

// Whether a forward call takes that kernel: head dims 136-256, warp-specialized, without attention_chunk
// or seqused_q (kernels of their own); in FP8 with v in the ordinary layout (keys-contiguous v keeps its
// kernels) and block descales, if any, of multiples of 64 rows (its 64-key blocks and 64-row warpgroups).
inline bool takes_decoding_kernel(const FwdArgs& args, const detail::Problem& pr) {
  const int head_dim = detail::widest_head_dim(pr);
  const bool block_descales = args.q_block_descale || args.k_block_descale || args.v_block_descale;
  const bool fp8_kernel_of_its_own =
      pr.v_keys_contiguous ||
      (block_descales && (args.descale_block_rows_q % 64 != 0 || args.descale_block_rows_kv % 64 != 0));
  return head_dim > 128 && head_dim <= 256 && args.options.warp_specialized && !detail::has_chunks_or_seqused_q(pr) &&
         !(pr.in_dtype == Dtype::kFloat8E4M3 && fp8_kernel_of_its_own) &&
         fits_decoding_kernel(args.options.pack_gqa, pr, args.q_block_descale.has_value());
}

// Whether a variable-length launch takes the kernels whose producer warpgroup copies K and V with
// cp.async (FwdTraits::kKvByCpAsync; head dims up to 128, from rows or a paged cache). kAuto: tiles of
// at most block_m / 2 query rows (a decoding step, bound by streaming K/V from HBM) with at least 64 MiB
// of K/V (or from rows at head dims up to 64: below): on the H200's decode grid the copies were 0-12%
// faster than TMA from there and 1-8% slower below it, where a step is short and latency-bound
// (perf-notes, session 21, without paging). A paged cache counts alike, seqlen_k being its table's
// capacity (pages_per_seq * page_size), whatever its page size: since the copies were unrolled (v80)
// they beat TMA at pages of 16-256 keys (1.26x at 16, 1.02-1.05x at 32-256 on b 8 x 32/8 x 16k d 128;
// d 64 pages of 64 level at 80.5 against 78 us).
// TMA loads a paged K/V block as a box per page, and small boxes keep prefill waiting on them: pages of at
// most kMaxCopiedPageBytes a tensor (1 KB: pages of 16 at head dims up to 32, unmeasured by TMA) take the
// copies in every launch, prefill too; pages of at most kMaxCopiedWideBlockPageBytes (2 KB: d 64's pages of
// 16) where the tiles take d 64's 192-key blocks (12 boxes of K and 12 of V a block); pages of at most
// kMaxCopiedDecodingPageBytes (4 KB: 16 keys at d 128, 16 and 32 at d 64) in decoding steps only. In
// prefill, with the page ids read a block ahead (v166) and V's boxes from a second thread (v171), TMA ran
// 3.1-5.6% faster than the copies at 2 KB with 128-key blocks (d 64's pages of 16, up to 4096 keys a tile)
// but 5.9-8.5% slower with 192-key blocks (past 4096 keys; H100, perf-notes v172, v174); at 4 KB 2-4%
// faster (v166; 1.28-1.68x slower before v166: v82); from 8 KB 2-8% faster (v82). In decoding
// steps the copies stayed 5-8% faster at d 64 from pages of 16 and 32, d 128 level (session 66).
// At head dims up to 64 every decoding step from rows takes the copies: since their split pieces share
// their tiles' blocks (v156) the d 64 copy kernels ran 2-15% faster than TMA from 1 x 2k keys (1 x 32/8 x
// 8k 14.4 against 16.7 us, 8 x 1k 11.9 against 13.5) and level at 1 x 1k, 8 x 4k and 32 x 1k; at d 128
// they stayed level or 4% slower below 64 MiB (H200). A paged cache's pieces keep fixed shares, and
// there the copies were 4% slower than TMA (1 x 8k, pages of 64, H100; 2026-12-06, perf-notes session 59).
constexpr int kMaxCopiedPageBytes = 1024;
constexpr int kMaxCopiedWideBlockPageBytes = 2048;
constexpr int kMaxCopiedDecodingPageBytes = 4096;
constexpr int kAlwaysCopiedDecodingHeadDim = 64;
inline bool takes_kv_copy_kernel(const FwdArgs& args, const detail::Problem& pr, int block_m) {
  const int head_dim = detail::widest_head_dim(pr);
  if (head_dim > 128) return false;
  if (args.options.kv_loads != KernelOptions::KvLoads::kAuto)
    return args.options.kv_loads == KernelOptions::KvLoads::kCopyThreads;
  if (pr.paged && !tma_takes_page_size(pr.page_size)) return true;  // pages TMA cannot load
  const long long page_bytes = static_cast<long long>(pr.page_size) * head_dim * dtype_size(pr.in_dtype);
  if (pr.paged && page_bytes <= kMaxCopiedPageBytes) return true;
  if (pr.paged && page_bytes <= kMaxCopiedWideBlockPageBytes && keys_per_tile(pr, block_m) > kMaxNarrowVarlenKeys) {
    return true;  // head dims up to 64 (a 2 KB page of 16 keys or more): d 64's 192-key blocks
  }
  if (!is_decoding_step(args, pr, block_m)) return false;
  if (pr.paged && page_bytes <= kMaxCopiedDecodingPageBytes) return true;
  const double kv_bytes =
      1.0 * pr.batch * pr.seqlen_k * pr.heads_kv * (pr.head_dim + pr.head_dim_v) * dtype_size(pr.in_dtype);
  return (head_dim <= kAlwaysCopiedDecodingHeadDim && !pr.paged) || kv_bytes >= 64.0 * (1 << 20);
}

// How a paged launch of the K/V copy kernels copies (kv_cp_async.cuh): a page size that is no power of
// two, kAnyPages (a page id a row, the row's page and place in it by a division); pages of 1-8 keys,
// kRowPages (a page id a row: only those copies take them); pages of exactly one pass of rows
// (rows_per_pass: d 64's pages of 16) also kRowPages in launches that are not decoding steps: there the
// whole-page loop, rolled at one pass a page, ran prefill 7-9% slower than the row copies (fewer
// instructions a copy leave the compute-bound consumers more issue slots), while decoding steps ran 3%
// faster with it (H100, perf-notes v162-v163); else kPages (a page id a page).
inline KvCopySource paged_kv_copy_source(const FwdArgs& args, const detail::Problem& pr, int block_m,
                                         int rows_per_pass) {
  if (!is_power_of_two(pr.page_size)) return KvCopySource::kAnyPages;
  if (pr.page_size <= kMaxRowPageSize) return KvCopySource::kRowPages;
  return pr.page_size == rows_per_pass && !is_decoding_step(args, pr, block_m)
             ? KvCopySource::kRowPages
             : KvCopySource::kPages;
}

// A (batch, rows, heads, d), packed (rows, heads, d) or paged (num_pages, page_size, heads, d) k or v as
// the cp.async loads read it; a paged cache's "batch entries" are its pages.
inline KvRowsView kv_rows_view(const Tensor& t) {
  const std::int64_t bytes = static_cast<std::int64_t>(dtype_size(t.dtype));
  const int dense = t.rank == 4 ? 1 : 0;
  return KvRowsView{static_cast<const std::uint8_t*>(t.data), dense ? t.stride[0] * bytes : 0,
                    t.stride[dense] * bytes, t.stride[dense + 1] * bytes, static_cast<int>(t.shape[dense]),
                    static_cast<int>(t.shape[t.rank - 1] * bytes)};
}

// Every field but the hand-out's (tile_counter, split and its memory), which the launch sets (fwd/launch.cuh
// begin_schedule). heads_per_group: launch.cuh's heads_per_group() for the device, a divisor of batch x
// the tile grid's heads (heads_kv when pack_gqa, which needs head_ratio <= block_m).
inline FwdParams make_fwd_params(const FwdArgs& args, const detail::Problem& pr, int block_m, int heads_per_group,
                                 bool pack_gqa = false) {
  FwdParams p{};
  p.batch = pr.batch;
  p.head_dim_v = pr.head_dim_v;
  p.heads_q = pr.heads_q;
  p.heads_kv = pr.heads_kv;
  p.seqlen_q = pr.seqlen_q;
  p.seqlen_k = pr.seqlen_k;
  p.head_ratio = pr.heads_q / pr.heads_kv;
  p.softcap = pr.softcap;
  p.softcap_input_scale = pr.softcap > 0.0f ? pr.softmax_scale / pr.softcap : 0.0f;
  p.logit_scale = pr.softcap > 0.0f ? 1.0f : pr.softmax_scale;
  p.scale_log2 = p.logit_scale * static_cast<float>(M_LOG2E);
  p.window_left = pr.window_left;
  p.window_right = pr.window_right;
  p.attention_chunk = pr.attention_chunk;
  p.chunk_divisor = ChunkDivisor(pr.attention_chunk, pr.seqlen_q);
  p.causal = pr.window_right >= 0;
  p.pingpong = args.options.pingpong;
  p.intra_wg_overlap = args.options.intra_wg_overlap;
  p.out = args.out.data;
  // A packed (varlen) out is (total_q, heads, d) and its LSE (heads, total_q): the kernels address
  // them by row in q's coordinates (sequence.cuh), with batch strides 0.
  const int dense_q = pr.varlen_q ? 0 : 1;
  p.out_batch_stride = pr.varlen_q ? 0 : args.out.stride[0];
  p.out_row_stride = args.out.stride[dense_q];
  p.out_head_stride = args.out.stride[dense_q + 1];
  if (args.lse) {
    p.lse = static_cast<float*>(args.lse->data);
    p.lse_batch_stride = pr.varlen_q ? 0 : args.lse->stride[0];
    p.lse_head_stride = args.lse->stride[dense_q];
    p.lse_row_stride = args.lse->stride[dense_q + 1];
  }
  if (args.learnable_sink) p.sink = static_cast<const float*>(args.learnable_sink->data);
  p.cu_seqlens_q = int_array_or_null(args.cu_seqlens_q);
  p.cu_seqlens_k = int_array_or_null(args.cu_seqlens_k);
  p.seqused_k = int_array_or_null(args.seqused_k);
  p.seqused_q = int_array_or_null(args.seqused_q);
  if (pr.paged) {
    set_page_table(p, *args.page_table, pr.page_size);
    p.page_divisor = FastDivisor(static_cast<std::uint32_t>(pr.page_size));
  }
  p.k_rows = kv_rows_view(args.k);
  p.v_rows = kv_rows_view(args.v);
  p.pack_gqa = pack_gqa;
  p.tile_q_rows = pack_gqa ? block_m / p.head_ratio : block_m;
  p.packed_rows = pack_gqa ? p.tile_q_rows * p.head_ratio : block_m;
  const int tile_heads = tile_grid_heads(pr, pack_gqa);
  p.num_m_blocks = (pr.seqlen_q + p.tile_q_rows - 1) / p.tile_q_rows;
  p.num_tiles = p.num_m_blocks * tile_heads * pr.batch;
  p.split = no_split_plan(p.num_tiles);  // the launch plans the split (fwd/launch.cuh begin_schedule)
  p.heads_per_group = heads_per_group;
  p.group_tiles_divisor = FastDivisor(static_cast<std::uint32_t>(p.num_m_blocks * heads_per_group));
  p.heads_per_group_divisor = FastDivisor(static_cast<std::uint32_t>(heads_per_group));
  p.tile_heads_divisor = FastDivisor(static_cast<std::uint32_t>(tile_heads));
  p.head_ratio_divisor = FastDivisor(static_cast<std::uint32_t>(p.head_ratio));
  return p;
}

// Empty when `p` describes a launchable schedule for tiles of block_m rows, else the first field
// that does not (a field left unset makes decode_tile divide by zero and the kernel write rows
// outside the output without any error: this turns that into a Status).
inline std::string fwd_params_error(const FwdParams& p, int block_m) {
  const auto bad = [](const char* field, long long value, const std::string& want) {
    return std::string("FwdParams::") + field + " is " + std::to_string(value) + ", expected " + want;
  };
  if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.seqlen_q < 1 || p.seqlen_k < 0)
    return "FwdParams shapes: batch, heads_q, heads_kv and seqlen_q must be positive to launch, seqlen_k >= 0";
  if (p.heads_q % p.heads_kv != 0 || p.head_ratio != p.heads_q / p.heads_kv)
    return bad("head_ratio", p.head_ratio, "heads_q / heads_kv with heads_kv dividing heads_q");
  if (p.pack_gqa && (p.head_ratio > block_m || p.tile_q_rows != block_m / p.head_ratio))
    return bad("tile_q_rows", p.tile_q_rows, "block_m / head_ratio (packing needs head_ratio <= block_m)");
  if (!p.pack_gqa && p.tile_q_rows != block_m) return bad("tile_q_rows", p.tile_q_rows, std::to_string(block_m));
  if (p.packed_rows != (p.pack_gqa ? p.tile_q_rows * p.head_ratio : block_m))
    return bad("packed_rows", p.packed_rows, "tile_q_rows * head_ratio packed, else block_m");
  const int m_blocks = (p.seqlen_q + p.tile_q_rows - 1) / p.tile_q_rows;
  if (p.num_m_blocks != m_blocks) return bad("num_m_blocks", p.num_m_blocks, std::to_string(m_blocks));
  const int tile_heads = p.pack_gqa ? p.heads_kv : p.heads_q;
  const long long tiles = static_cast<long long>(m_blocks) * tile_heads * p.batch;
  if (p.num_tiles != tiles) return bad("num_tiles", p.num_tiles, std::to_string(tiles));
  const long long pairs = static_cast<long long>(p.batch) * tile_heads;
  if (p.heads_per_group < 1 || p.heads_per_group > pairs || pairs % p.heads_per_group != 0)
    return bad("heads_per_group", p.heads_per_group,
               "a divisor of batch * the tile grid's heads = " + std::to_string(pairs));
  if (p.group_tiles_divisor.divisor != static_cast<std::uint32_t>(m_blocks * p.heads_per_group) ||
      p.heads_per_group_divisor.divisor != static_cast<std::uint32_t>(p.heads_per_group) ||
      p.tile_heads_divisor.divisor != static_cast<std::uint32_t>(tile_heads) ||
      p.head_ratio_divisor.divisor != static_cast<std::uint32_t>(p.head_ratio))
    return "FwdParams: a tile-decode divisor does not match its field";
  // The scales the kernels read; the running max of raw scores orders logits only for scale_log2 > 0.
  if (!std::isfinite(p.logit_scale) || !std::isfinite(p.softcap_input_scale) || !std::isfinite(p.scale_log2) ||
      !(p.scale_log2 > 0.0f))
    return "FwdParams::logit_scale / softcap_input_scale / scale_log2 must be finite, scale_log2 > 0";
  if (p.out == nullptr) return "FwdParams::out is null";
  return std::string();
}

}  // namespace hopattn::sm90
