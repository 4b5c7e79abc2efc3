// Everything the forward kernel needs besides the TMA tensor maps; built on the host by
// src/sm90/fwd/launch.cuh from the validated Problem.
#pragma once

#include <cstdint>

#include "sm90/fwd/attention_chunk.hpp"
#include "sm90/fwd/split_plan.hpp"
#include "sm90/tile/fast_divisor.hpp"

namespace hopattn::sm90 {

// One of k, v by bytes: row r of head h of batch entry b starts at data + b * batch_stride + r *
// row_stride + h * head_stride and holds row_bytes (its head dim's); a batch entry holds `rows` rows (a
// packed variable-length tensor is one entry of all its rows), and loads of rows or columns past them
// read zeros, as TMA's do.
struct KvRowsView {
  const std::uint8_t* data;
  std::int64_t batch_stride;
  std::int64_t row_stride;
  std::int64_t head_stride;
  int rows;
  int row_bytes;
};

struct FwdParams {
  int batch;
  int heads_q;
  int heads_kv;
  int seqlen_q;
  int seqlen_k;
  int head_ratio;  // heads_q / heads_kv
  // Columns of out (v's head dim): the kernel's kHeadDim or fewer (forward.cu runs a head dim in the
  // next wider kernel, and q/k and v of different head dims in the kernel of the wider); the register
  // stores leave out the columns past it.
  int head_dim_v;
  // Scores reach the softmax as raw q.k, or as softcap * tanh(q.k * softmax_scale / softcap) when
  // softcap > 0; logit_scale turns them into logits (softmax_scale, or 1 after the softcap) and
  // scale_log2 = logit_scale * log2(e) is what the exp2 softmax multiplies by.
  float softcap;
  float softcap_input_scale;  // softmax_scale / softcap
  float logit_scale;
  float scale_log2;
  // Visible keys of row i: [i + seqlen_k - seqlen_q - window_left, i + seqlen_k - seqlen_q +
  // window_right], -1 = unbounded on that side (causal is window_right = 0).
  int window_left;
  int window_right;
  int attention_chunk;  // 0 = off; else also only the keys of the diagonal's chunk (attention_chunk.hpp)
  ChunkDivisor chunk_divisor;  // the per-element masks' division by attention_chunk
  bool causal;  // window_right >= 0: later rows see more keys (the scheduler puts them first)
  bool pingpong;
  bool intra_wg_overlap;
  bool store_o_by_tma;  // O staged in shared memory and written by TMA (out's layout allows it)

  void* out;
  std::int64_t out_batch_stride;  // elements
  std::int64_t out_row_stride;
  std::int64_t out_head_stride;
  float* lse;  // nullptr when not requested
  std::int64_t lse_batch_stride;
  std::int64_t lse_head_stride;
  std::int64_t lse_row_stride;
  // FwdArgs::learnable_sink, one per q head (contiguous: the API takes rank-1 tensors with stride 1);
  // nullptr without (sink.cuh).
  const float* sink;

  int num_m_blocks;
  int num_tiles;
  int heads_per_group;  // (batch, head) pairs whose tiles are interleaved; divides batch * heads_q
  FastDivisor group_tiles_divisor;      // num_m_blocks * heads_per_group
  FastDivisor heads_per_group_divisor;  // heads_per_group
  FastDivisor tile_heads_divisor;       // heads per batch entry in the tile grid: heads_q (heads_kv packed)
  FastDivisor head_ratio_divisor;       // head_ratio: q head -> K/V head, packed tile row -> query row
  int* tile_counter;    // {next item, CTAs finished}, zero at launch; nullptr: one CTA per tile
  // The tail split (split_plan.hpp): the hand-out runs over split.first_tile whole tiles, then
  // split.units units. Partials: per slot, consumer warpgroup and thread, O and the row state
  // (split_merge.cuh); counters: per split tile and consumer warpgroup, its pieces finished so far,
  // zero at launch and left zero.
  SplitPlan split;
  float* split_partials;
  int* split_counters;

  // Variable-length batches (read only by FwdTraits::kVarlen kernels; sequence.cuh): int32 device
  // arrays, nullptr when absent. Sequence b's queries are rows [cu_seqlens_q[b], cu_seqlens_q[b + 1])
  // of the packed q and out, its keys likewise of k and v, of which it uses the first seqused_k[b],
  // and of its queries the first seqused_q[b] (the rows past them are neither read nor written).
  // seqlen_q / seqlen_k then hold the longest sequence's lengths (max_seqlen_q / max_seqlen_k).
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  const int* seqused_k;
  const int* seqused_q;
  // Paged KV cache (kVarlen kernels): k and v are (num_pages, page_size, heads_kv, d) and key j of
  // sequence b is row j % page_size of page page_table[b * batch stride + j / page_size * page stride];
  // seqlen_k is pages_per_seq * page_size (seqused_k gives the keys in use). nullptr: not paged.
  const int* page_table;
  std::int64_t page_table_batch_stride;
  std::int64_t page_table_page_stride;
  int page_size;
  FastDivisor page_divisor;  // page_size, for the copies from pages of any size (KvCopySource::kAnyPages)

  // GQA packing (variable-length kernels; KernelOptions::pack_gqa, fwd/packed_gqa.cuh): a tile's
  // rows are the head_ratio query heads of one K/V head, row r of tile m_block being query row
  // m_block * tile_q_rows + r / head_ratio of head kv_head * head_ratio + r % head_ratio. Tile
  // coordinates (TileCoord::head) then name the K/V head. Unpacked: tile_q_rows = packed_rows = kBlockM.
  bool pack_gqa;
  int tile_q_rows;  // query rows per tile: kBlockM, or kBlockM / head_ratio packed
  int packed_rows;  // tile rows with a (row, head): tile_q_rows * head_ratio; the rest of the tile is idle

  // k and v as the variable-length kernels' cp.async loads address them (FwdTraits::kKvByCpAsync,
  // kv_cp_async.cuh; the TMA loads use the tensor maps instead).
  KvRowsView k_rows;
  KvRowsView v_rows;
};

// Page sizes of a paged cache: where K/V come by TMA, powers of two from kMinPageSize (a box of whole
// pages starts a swizzle atom); the K/V copy kernels take any, copied row by row below a pass's rows or
// where the size is no power of two (kv_cp_async.cuh, copy_row_paged_block).
constexpr int kMinPageSize = 16;
constexpr int kMaxRowPageSize = 8;  // the powers of two below kMinPageSize go row by row everywhere

HOPATTN_HOST_DEVICE constexpr bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }
HOPATTN_HOST_DEVICE constexpr bool tma_takes_page_size(int page_size) {
  return page_size >= kMinPageSize && is_power_of_two(page_size);
}

// Where a kKvByCpAsync kernel's producer copies K/V from, a kernel each (kernel.cuh), so that each keeps
// its code and registers (the two paged loops in one kernel spilled the producer's 48 registers): packed
// or dense rows; a paged cache's pages of at least kMinPageSize keys (page ids a page); its pages of at
// most a pass's rows, a power of two (page ids a row); its pages of a size that is no power of two (page
// ids a row, each row's page and place in it by page_divisor). paged_kv_copy_source (params_builder.hpp)
// picks among the paged ones.
enum class KvCopySource { kRows, kPages, kRowPages, kAnyPages };

// Rows of one TMA box of a paged cache's K/V block: a whole page, or the whole block where pages are
// longer. load_paged_chunks loads a block in boxes of this many rows, and the launches make their
// paged tensor maps' boxes this tall.
HOPATTN_HOST_DEVICE constexpr int paged_chunk_rows(int page_size, int block_n) {
  return page_size < block_n ? page_size : block_n;
}

}  // namespace hopattn::sm90
