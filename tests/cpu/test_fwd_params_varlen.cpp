// The parameters launch_forward passes to the variable-length 16-bit kernels (sm90/fwd/params_builder.hpp),
// built on the CPU from a validated problem: the packed out and LSE are addressed by row (batch strides
// 0, row and head strides from their rank-3 / rank-2 views), the cu_seqlens / seqused_k arrays reach
// the kernel, and the grid counts max_seqlen_q's tiles for every sequence (the producer skips the
// empty ones, scheduler.cuh); a paged cache passes its table's strides and page size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "api/problem.hpp"
#include "common/host_tensor.hpp"
#include "cpu/sequence_arrays.hpp"
#include "hopattn/hopattn.hpp"
#include "sm90/fwd/params_builder.hpp"

namespace hopattn::sm90 {
namespace {

using test::HostTensor;
using test::int_array;
using test::prefix_sums;

constexpr int kBlockM = 128;
constexpr int kCopyProducerThreads = 128;  // the K/V copy kernels' producer warpgroup

TEST(VarlenParams, PackedOutputsAreAddressedByRowAndTheArraysReachTheKernel) {
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 20; ++trial) {
    const int batch = pick(1, 5), heads_kv = pick(1, 3), heads_q = heads_kv * pick(1, 4), d = 64 << pick(0, 2);
    const bool varlen_k = pick(0, 1), with_seqused = !varlen_k || pick(0, 1), with_lse = pick(0, 1);
    std::vector<int> len_q, len_k;
    for (int b = 0; b < batch; ++b) len_q.push_back(pick(0, 300)), len_k.push_back(pick(0, 300));
    // At least one row on each side, as CUDA tensors have.
    if (prefix_sums(len_q).back() == 0) len_q[0] = 1;
    if (prefix_sums(len_k).back() == 0) len_k[0] = 1;
    const std::vector<int> cu_q = prefix_sums(len_q), cu_k = prefix_sums(len_k);
    const int total_q = cu_q.back(), max_q = std::max(1, *std::max_element(len_q.begin(), len_q.end()));
    const int dense_k = 300;

    HostTensor q(Dtype::kBFloat16, {total_q, heads_q, d});
    // out with rows padded by 8 columns and lse with 3 spare columns, so no stride is dense by luck
    HostTensor out_buffer(Dtype::kBFloat16, {total_q, heads_q, d + 8});
    HostTensor lse_buffer(Dtype::kFloat32, {heads_q, total_q + 3});
    HostTensor k = varlen_k ? HostTensor(Dtype::kBFloat16, {cu_k.back(), heads_kv, d})
                            : HostTensor(Dtype::kBFloat16, {batch, dense_k, heads_kv, d});
    HostTensor v = varlen_k ? HostTensor(Dtype::kBFloat16, {cu_k.back(), heads_kv, d})
                            : HostTensor(Dtype::kBFloat16, {batch, dense_k, heads_kv, d});
    HostTensor cu_q_t = int_array(cu_q), cu_k_t = int_array(cu_k), used_t = int_array(len_k);

    FwdArgs a;
    a.q = q.tensor(), a.k = k.tensor(), a.v = v.tensor();
    a.out = out_buffer.tensor();
    a.out.shape[2] = d;
    if (with_lse) {
      a.lse = lse_buffer.tensor();
      a.lse->shape[1] = total_q;
    }
    a.cu_seqlens_q = cu_q_t.tensor();
    a.max_seqlen_q = max_q;
    if (varlen_k) a.cu_seqlens_k = cu_k_t.tensor(), a.max_seqlen_k = 300;
    if (with_seqused) a.seqused_k = used_t.tensor();
    a.causal = pick(0, 1);

    const std::string where = "seed " + std::to_string(seed) + " trial " + std::to_string(trial);
    detail::Problem pr;
    const Status st = detail::validate_forward(a, &pr);
    ASSERT_TRUE(st.ok()) << where << ": " << st.message();
    const FwdParams p = make_fwd_params(a, pr, kBlockM, /*heads_per_group=*/heads_q);
    EXPECT_EQ(fwd_params_error(p, kBlockM), "") << where;

    EXPECT_EQ(p.cu_seqlens_q, static_cast<const int*>(cu_q_t.data())) << where;
    EXPECT_EQ(p.cu_seqlens_k, varlen_k ? static_cast<const int*>(cu_k_t.data()) : nullptr) << where;
    EXPECT_EQ(p.seqused_k, with_seqused ? static_cast<const int*>(used_t.data()) : nullptr) << where;
    EXPECT_EQ(p.seqlen_q, max_q) << where;
    EXPECT_EQ(p.seqlen_k, varlen_k ? 300 : dense_k) << where;
    EXPECT_EQ(p.num_m_blocks, (max_q + kBlockM - 1) / kBlockM) << where;
    EXPECT_EQ(p.num_tiles, p.num_m_blocks * heads_q * batch) << where;

    EXPECT_EQ(p.out_batch_stride, 0) << where;
    EXPECT_EQ(p.out_row_stride, std::int64_t(heads_q) * (d + 8)) << where;
    EXPECT_EQ(p.out_head_stride, d + 8) << where;
    if (with_lse) {
      EXPECT_EQ(p.lse, static_cast<float*>(lse_buffer.data())) << where;
      EXPECT_EQ(p.lse_batch_stride, 0) << where;
      EXPECT_EQ(p.lse_head_stride, total_q + 3) << where;
      EXPECT_EQ(p.lse_row_stride, 1) << where;
    } else {
      EXPECT_EQ(p.lse, nullptr) << where;
    }
  }
}

TEST(VarlenParams, PagedCachesPassTheirTableAndPageSize) {
  const int batch = 3, pages_per_seq = 5, page_size = 32, num_pages = 20;
  HostTensor q(Dtype::kFloat16, {batch, 7, 4, 128}), out(Dtype::kFloat16, {batch, 7, 4, 128});
  HostTensor k(Dtype::kFloat16, {num_pages, page_size, 2, 128}), v(Dtype::kFloat16, {num_pages, page_size, 2, 128});
  HostTensor table_buffer(Dtype::kInt32, {batch, pages_per_seq + 3});  // rows padded: a strided view
  for (int i = 0; i < batch * (pages_per_seq + 3); ++i) static_cast<int*>(table_buffer.data())[i] = i % num_pages;
  HostTensor used = int_array({1, 160, 77});
  FwdArgs a;
  a.q = q.tensor(), a.k = k.tensor(), a.v = v.tensor(), a.out = out.tensor();
  a.page_table = table_buffer.tensor();
  a.page_table->shape[1] = pages_per_seq;
  a.seqused_k = used.tensor();
  detail::Problem pr;
  const Status st = detail::validate_forward(a, &pr);
  ASSERT_TRUE(st.ok()) << st.message();
  const FwdParams p = make_fwd_params(a, pr, kBlockM, 4);
  EXPECT_EQ(fwd_params_error(p, kBlockM), "");
  EXPECT_EQ(p.page_table, static_cast<const int*>(table_buffer.data()));
  EXPECT_EQ(p.page_table_batch_stride, pages_per_seq + 3);
  EXPECT_EQ(p.page_table_page_stride, 1);
  EXPECT_EQ(p.page_size, page_size);
  EXPECT_EQ(p.seqlen_k, pages_per_seq * page_size);  // the table's capacity; seqused_k the keys in use
  EXPECT_EQ(p.seqused_k, static_cast<const int*>(used.data()));
  EXPECT_EQ(p.cu_seqlens_k, nullptr);
  // The copy kernels' view of the pool: its "batch entries" are the pages (bytes, fp16).
  for (const KvRowsView& view : {p.k_rows, p.v_rows}) {
    EXPECT_EQ(view.batch_stride, page_size * 2 * 128 * 2);
    EXPECT_EQ(view.row_stride, 2 * 128 * 2);
    EXPECT_EQ(view.head_stride, 128 * 2);
    EXPECT_EQ(view.rows, page_size);
  }
  EXPECT_EQ(p.k_rows.data, static_cast<const std::uint8_t*>(k.data()));
  EXPECT_EQ(p.v_rows.data, static_cast<const std::uint8_t*>(v.data()));
}

TEST(VarlenParams, DenseLaunchesPassNoArrays) {
  HostTensor q(Dtype::kBFloat16, {2, 100, 4, 64}), k(Dtype::kBFloat16, {2, 70, 2, 64}),
      v(Dtype::kBFloat16, {2, 70, 2, 64}), out(Dtype::kBFloat16, {2, 100, 4, 64});
  FwdArgs a;
  a.q = q.tensor(), a.k = k.tensor(), a.v = v.tensor(), a.out = out.tensor();
  detail::Problem pr;
  ASSERT_TRUE(detail::validate_forward(a, &pr).ok());
  const FwdParams p = make_fwd_params(a, pr, kBlockM, 8);
  EXPECT_EQ(p.cu_seqlens_q, nullptr);
  EXPECT_EQ(p.cu_seqlens_k, nullptr);
  EXPECT_EQ(p.seqused_k, nullptr);
  EXPECT_EQ(p.page_table, nullptr);
  EXPECT_EQ(p.out_batch_stride, 100 * 4 * 64);
  EXPECT_EQ(p.out_row_stride, 4 * 64);
}

// A batch of 3 sequences of seqlen_q query rows against 5000 keys.
detail::Problem step_problem(int heads_q, int heads_kv, int seqlen_q, int head_dim) {
  detail::Problem pr;
  pr.batch = 3, pr.heads_q = heads_q, pr.heads_kv = heads_kv, pr.seqlen_q = seqlen_q, pr.seqlen_k = 5000;
  pr.head_dim = head_dim;
  return pr;
}

// The decoding kernel of the wide head dims takes tiles of at most 8 live rows: packed where the packed
// rows fit (by default from a ratio of 2; not over a q block descale), else unpacked steps of at most 8
// query rows; pack_gqa = kOn takes only the packed ones.
TEST(DecodingKernelRouting, TilesOfAtMostEightRows) {
  const auto problem = [](int heads_q, int heads_kv, int seqlen_q) {
    return step_problem(heads_q, heads_kv, seqlen_q, 256);
  };
  using Pack = KernelOptions::PackGqa;
  EXPECT_EQ(kTransposedRows, 8);
  EXPECT_TRUE(decoding_kernel_packs(Pack::kAuto, problem(16, 8, 1)));    // Gemma 3 12B: 2 rows a K/V head
  EXPECT_TRUE(decoding_kernel_packs(Pack::kAuto, problem(16, 2, 1)));    // 8 rows: the limit
  EXPECT_TRUE(decoding_kernel_packs(Pack::kAuto, problem(16, 8, 4)));    // 4 draft rows x 2
  EXPECT_FALSE(decoding_kernel_packs(Pack::kAuto, problem(16, 8, 5)));   // 10 rows
  EXPECT_FALSE(decoding_kernel_packs(Pack::kAuto, problem(16, 1, 1)));   // ratio 16
  EXPECT_FALSE(decoding_kernel_packs(Pack::kAuto, problem(8, 8, 1)));    // no GQA
  EXPECT_TRUE(decoding_kernel_packs(Pack::kOn, problem(8, 8, 8)));       // forced, 8 rows
  EXPECT_FALSE(decoding_kernel_packs(Pack::kOff, problem(16, 8, 1)));

  EXPECT_TRUE(fits_decoding_kernel(Pack::kAuto, problem(16, 8, 1)));
  EXPECT_TRUE(fits_decoding_kernel(Pack::kAuto, problem(16, 1, 1)));     // unpacked: 1 row a tile
  EXPECT_TRUE(fits_decoding_kernel(Pack::kAuto, problem(16, 8, 5)));     // unpacked: 5 rows a tile
  EXPECT_TRUE(fits_decoding_kernel(Pack::kOff, problem(16, 16, 8)));
  EXPECT_FALSE(fits_decoding_kernel(Pack::kAuto, problem(16, 16, 9)));   // 9 rows
  EXPECT_FALSE(fits_decoding_kernel(Pack::kOn, problem(16, 8, 5)));      // packed: 10 rows
  EXPECT_FALSE(fits_decoding_kernel(Pack::kAuto, problem(16, 8, 4096))); // a prompt
  // An FP8 q block descale (per query head) leaves the rows unpacked.
  EXPECT_FALSE(decoding_kernel_packs(Pack::kAuto, problem(16, 8, 1), /*q_block_descale=*/true));
  EXPECT_TRUE(fits_decoding_kernel(Pack::kAuto, problem(16, 8, 1), true));
  EXPECT_FALSE(fits_decoding_kernel(Pack::kOn, problem(16, 8, 1), true));
}

// GQA packing: by default where it needs fewer tiles for queries shorter than a tile; the packed grid counts tiles per K/V head, with
// kBlockM / ratio query rows each (a ratio that does not divide kBlockM leaves rows idle).
TEST(PackedGqaParams, PackingWhereItSavesTilesAndTheGridItMakes) {
  const auto problem = [](int heads_q, int heads_kv, int seqlen_q) {
    return step_problem(heads_q, heads_kv, seqlen_q, 128);
  };
  using Pack = KernelOptions::PackGqa;
  EXPECT_TRUE(packs_gqa(Pack::kAuto, problem(32, 8, 1), kBlockM));    // decoding
  EXPECT_TRUE(packs_gqa(Pack::kAuto, problem(28, 4, 5), kBlockM));    // ratio 7: 18 rows x 7
  EXPECT_TRUE(packs_gqa(Pack::kAuto, problem(32, 8, 90), kBlockM));    // 3 packed tiles against 4
  EXPECT_FALSE(packs_gqa(Pack::kAuto, problem(32, 8, 100), kBlockM));  // 4 packed tiles against 4
  EXPECT_FALSE(packs_gqa(Pack::kAuto, problem(32, 8, 200), kBlockM));  // a prompt longer than a tile
  EXPECT_FALSE(packs_gqa(Pack::kAuto, problem(8, 8, 1), kBlockM));    // no GQA
  EXPECT_FALSE(packs_gqa(Pack::kOff, problem(32, 8, 1), kBlockM));
  EXPECT_TRUE(packs_gqa(Pack::kOn, problem(8, 8, 4000), kBlockM));
  EXPECT_FALSE(packs_gqa(Pack::kOn, problem(256, 1, 1), kBlockM));  // more heads than tile rows

  HostTensor q(Dtype::kBFloat16, {3, 5, 28, 128}), k(Dtype::kBFloat16, {3, 900, 4, 128}),
      v(Dtype::kBFloat16, {3, 900, 4, 128}), out(Dtype::kBFloat16, {3, 5, 28, 128});
  FwdArgs a;
  a.q = q.tensor(), a.k = k.tensor(), a.v = v.tensor(), a.out = out.tensor();
  a.causal = true;
  detail::Problem pr;
  ASSERT_TRUE(detail::validate_forward(a, &pr).ok());
  FwdParams p = make_fwd_params(a, pr, kBlockM, /*heads_per_group=*/4, /*pack_gqa=*/true);
  EXPECT_TRUE(p.pack_gqa);
  EXPECT_EQ(p.tile_q_rows, 18);
  EXPECT_EQ(p.packed_rows, 126);
  EXPECT_EQ(p.num_m_blocks, 1);
  EXPECT_EQ(p.num_tiles, 3 * 4);
  EXPECT_EQ(p.tile_heads_divisor.divisor, 4u);
  EXPECT_EQ(fwd_params_error(p, kBlockM), "");
  p.tile_q_rows = kBlockM;  // a packed launch with unpacked tiles would address rows of other heads
  EXPECT_NE(fwd_params_error(p, kBlockM).find("tile_q_rows"), std::string::npos);

  const FwdParams unpacked = make_fwd_params(a, pr, kBlockM, 4);
  EXPECT_FALSE(unpacked.pack_gqa);
  EXPECT_EQ(unpacked.tile_q_rows, kBlockM);
  EXPECT_EQ(unpacked.packed_rows, kBlockM);
  EXPECT_EQ(unpacked.num_tiles, 3 * 28);
  EXPECT_EQ(fwd_params_error(unpacked, kBlockM), "");
}

// keys_per_tile (the d 64 and FP8 kernels' key block choice): the span of keys from the first row's
// first visible key to the last row's last, over every tile of kBlockM rows, never exceeds it, and
// reaches it wherever some tile lies wholly inside the key range (window_left + window_right + kBlockM
// under a two-sided window, seqlen_k otherwise).
TEST(KeyBlockChoice, KeysPerTileBoundsTheKeysATileSees) {
  std::mt19937 rng(std::random_device{}());
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 2000; ++trial) {
    detail::Problem pr;
    pr.seqlen_q = pick(1, 3000), pr.seqlen_k = pick(1, 3000);
    const int kind = pick(0, 3);  // full, causal, two-sided window, causal window
    pr.window_left = kind >= 2 ? pick(0, 1500) : -1;
    pr.window_right = kind == 1 || kind == 3 ? 0 : (kind == 2 ? pick(0, 1500) : -1);
    const long long bound = keys_per_tile(pr, kBlockM);
    long long widest = 0;
    bool interior_tile = false;
    for (int m0 = 0; m0 < pr.seqlen_q; m0 += kBlockM) {
      const int last = std::min(m0 + kBlockM, pr.seqlen_q) - 1;
      const long long diagonal0 = m0 + pr.seqlen_k - pr.seqlen_q, diagonal1 = last + pr.seqlen_k - pr.seqlen_q;
      const long long begin = pr.window_left < 0 ? 0 : diagonal0 - pr.window_left;
      const long long end = pr.window_right < 0 ? pr.seqlen_k : diagonal1 + pr.window_right + 1;
      const long long seen = std::min<long long>(end, pr.seqlen_k) - std::max<long long>(begin, 0);
      widest = std::max(widest, seen);
      interior_tile |= last == m0 + kBlockM - 1 && begin >= 0 && end <= pr.seqlen_k;
    }
    const std::string what = "sq " + std::to_string(pr.seqlen_q) + " sk " + std::to_string(pr.seqlen_k) +
                             " window (" + std::to_string(pr.window_left) + ", " + std::to_string(pr.window_right) + ")";
    ASSERT_LE(widest, bound) << what;
    if (interior_tile || pr.window_left < 0 || pr.window_right < 0) ASSERT_EQ(widest, bound) << what;
  }
}

// Which launches take the kernels that copy K/V with cp.async (takes_kv_copy_kernel): decoding steps
// (at most 64 query rows a tile, GQA heads packed) of at least 64 MiB of K/V, dense or from a paged
// cache of any page size (its table's capacity counting as its keys), or from rows of any size at head
// dims up to 64, every launch from pages of at most 1 KB a tensor or from 2 KB pages past 4096 keys a
// tile, and decoding steps from 4 KB pages, unless kv_loads says otherwise;
// never at head dims above 128.
// One validated bf16 call of one sequence, seqlen_q rows and heads_q heads over 8 K/V heads: k and v
// dense (seqlen_k keys) where page_size is 0, else a paged cache of seqlen_k / page_size pages, all in
// the sequence's table row.
struct OneSequenceCall {
  static constexpr int kHeadsKv = 8;
  HostTensor q, out, k, v, table;
  FwdArgs args;
  detail::Problem pr;

  OneSequenceCall(int seqlen_q, int seqlen_k, int heads_q, int d, KernelOptions::KvLoads loads, int page_size)
      : q(Dtype::kBFloat16, {1, seqlen_q, heads_q, d}),
        out(Dtype::kBFloat16, {1, seqlen_q, heads_q, d}),
        k(Dtype::kBFloat16, {pages(seqlen_k, page_size), rows(seqlen_k, page_size), kHeadsKv, d}),
        v(Dtype::kBFloat16, {pages(seqlen_k, page_size), rows(seqlen_k, page_size), kHeadsKv, d}),
        table(Dtype::kInt32, {1, pages(seqlen_k, page_size)}) {
    args.q = q.tensor(), args.k = k.tensor(), args.v = v.tensor(), args.out = out.tensor();
    if (page_size > 0) args.page_table = table.tensor();
    args.options.kv_loads = loads;
    const Status st = detail::validate_forward(args, &pr);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(pr.paged, page_size > 0);
  }
  static int pages(int seqlen_k, int page_size) { return page_size > 0 ? seqlen_k / page_size : 1; }
  static int rows(int seqlen_k, int page_size) { return page_size > 0 ? page_size : seqlen_k; }
};

TEST(VarlenParams, KvCopiesForLargeDecodingSteps) {
  const auto takes = [](int seqlen_q, int seqlen_k, int heads_q, int d, KernelOptions::KvLoads loads,
                        int page_size = 0) {
    const OneSequenceCall call(seqlen_q, seqlen_k, heads_q, d, loads, page_size);
    return takes_kv_copy_kernel(call.args, call.pr, kBlockM);
  };
  using Loads = KernelOptions::KvLoads;
  // 1 x 16384 keys x 8 heads x d 128 x 2 bytes, K and V: 64 MiB.
  EXPECT_TRUE(takes(1, 16384, 32, 128, Loads::kAuto));
  EXPECT_FALSE(takes(1, 16383, 32, 128, Loads::kAuto));  // just below 64 MiB
  EXPECT_FALSE(takes(17, 16384, 32, 128, Loads::kAuto));  // 17 x 4 packed rows: more than 64 a tile
  EXPECT_TRUE(takes(16, 16384, 32, 128, Loads::kAuto));
  EXPECT_FALSE(takes(1, 16384, 32, 128, Loads::kTma));
  EXPECT_TRUE(takes(1, 64, 8, 64, Loads::kCopyThreads));
  EXPECT_FALSE(takes(1, 64, 8, 256, Loads::kCopyThreads));
  // Head dims up to 64 (a padded 40 too): every decoding step from rows, short caches included; not prefill.
  EXPECT_TRUE(takes(1, 1024, 32, 64, Loads::kAuto));
  EXPECT_TRUE(takes(1, 7, 8, 40, Loads::kAuto));
  EXPECT_TRUE(takes(16, 4096, 32, 64, Loads::kAuto));
  EXPECT_FALSE(takes(17, 4096, 32, 64, Loads::kAuto));
  EXPECT_FALSE(takes(1, 1024, 32, 64, Loads::kTma));
  EXPECT_FALSE(takes(1, 1024, 32, 72, Loads::kAuto));  // the 128-wide kernels: 64 MiB
  // Paged: the decoding rule at every page size, pages of at most 1 KB a tensor in every launch (prefill,
  // short caches), of 2 KB past 4096 keys a tile (d 64's 192-key blocks) and of 4 KB in decoding steps
  // (short caches), up to d 128.
  struct PagedCase {
    int seqlen_q, seqlen_k, heads_q, d;
    Loads loads;
    int page_size;
    bool copies;
  };
  const PagedCase paged_cases[] = {
      {1, 16384, 32, 128, Loads::kAuto, 256, true},
      {1, 16384, 32, 128, Loads::kAuto, 128, true},
      {1, 16256, 32, 128, Loads::kAuto, 128, false},  // one page of 128 short of 64 MiB
      {1, 16384, 32, 128, Loads::kAuto, 64, true},
      {1, 16320, 32, 128, Loads::kAuto, 64, false},  // one page of 64 short of 64 MiB
      {1, 16384, 32, 128, Loads::kAuto, 16, true},
      {17, 16384, 32, 128, Loads::kAuto, 256, false},
      {1, 16384, 32, 128, Loads::kTma, 256, false},
      {1, 16384, 32, 128, Loads::kTma, 16, false},
      {1, 64, 8, 128, Loads::kAuto, 16, true},  // 4 KB pages: a short cache
      {4096, 4096, 8, 128, Loads::kAuto, 16, false},  // but prefill by TMA
      {4096, 4096, 8, 128, Loads::kAuto, 32, false},  // 8 KB
      {4096, 4096, 8, 64, Loads::kAuto, 16, false},  // 2 KB: prefill by TMA up to 4096 keys a tile,
      {4112, 4112, 8, 64, Loads::kAuto, 16, true},    // by the copies past (d 64's 192-key blocks)
      {512, 8192, 32, 64, Loads::kAuto, 16, true},
      {4096, 4096, 8, 64, Loads::kAuto, 32, false},  // 4 KB: prefill by TMA at any length
      {8192, 8192, 8, 64, Loads::kAuto, 32, false},
      {17, 4096, 32, 64, Loads::kAuto, 16, false},
      {1, 4096, 8, 64, Loads::kAuto, 16, true},  // but decoding steps by the copies
      {4096, 4096, 8, 32, Loads::kAuto, 16, true},  // 1 KB: prefill too
      {17, 4096, 32, 64, Loads::kAuto, 32, false},  // 17 x 4 packed rows: no decoding step
      {4096, 4096, 8, 64, Loads::kAuto, 64, false},
      {4096, 4096, 8, 64, Loads::kTma, 16, false},
      {1, 4096, 8, 64, Loads::kAuto, 64, false},  // d 64 from pages of 64: 64 MiB as at d 128
      {1, 4096, 8, 64, Loads::kAuto, 32, true},  // 4 KB pages
      {1, 64, 8, 256, Loads::kAuto, 16, false},
      {1, 64, 8, 64, Loads::kCopyThreads, 16, true},
      {1, 64, 8, 256, Loads::kCopyThreads, 16, false},
      // Pages of 1-8 keys, which only the copies load (forward.cu refuses them with kTma): every launch.
      {4096, 4096, 8, 128, Loads::kAuto, 1, true},
      {1, 64, 8, 64, Loads::kAuto, 8, true},
      {1, 4096, 8, 128, Loads::kAuto, 4, true},
  };
  for (const PagedCase& c : paged_cases) {
    SCOPED_TRACE("sq " + std::to_string(c.seqlen_q) + " sk " + std::to_string(c.seqlen_k) + " hq " +
                 std::to_string(c.heads_q) + " d " + std::to_string(c.d) + " page " + std::to_string(c.page_size));
    EXPECT_EQ(takes(c.seqlen_q, c.seqlen_k, c.heads_q, c.d, c.loads, c.page_size), c.copies);
  }
}

// How paged copy launches copy (paged_kv_copy_source): page sizes that are no power of two by kAnyPages,
// pages of 1-8 keys by kRowPages, and so pages of one pass of rows (16 keys at d 64, whose 128 copy threads
// copy 16 rows a pass; 8 at d 128) in launches that are not decoding steps (more than 64 query rows a
// tile, GQA heads packed); the rest by kPages. Page sizes TMA cannot load take the copies under kAuto.
TEST(VarlenParams, PagedCopySources) {
  using Source = KvCopySource;
  struct Case {
    int seqlen_q, heads_q, d, page_size;
    Source source;
  };
  const Case cases[] = {
      {1, 32, 64, 1, Source::kRowPages},     {1, 32, 128, 8, Source::kRowPages},
      {2048, 8, 128, 4, Source::kRowPages},  {2048, 8, 64, 16, Source::kRowPages},
      {17, 32, 64, 16, Source::kRowPages},   {16, 32, 64, 16, Source::kPages},  // 16 x 4 packed rows
      {1, 32, 64, 16, Source::kPages},       {2048, 8, 128, 16, Source::kPages},
      {2048, 8, 64, 32, Source::kPages},     {1, 32, 64, 24, Source::kAnyPages},
      {2048, 8, 128, 3, Source::kAnyPages},  {1, 32, 128, 1024 + 512, Source::kAnyPages},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("sq " + std::to_string(c.seqlen_q) + " hq " + std::to_string(c.heads_q) + " d " +
                 std::to_string(c.d) + " page " + std::to_string(c.page_size));
    const int keys = (4096 + c.page_size - 1) / c.page_size * c.page_size;
    const OneSequenceCall call(c.seqlen_q, keys, c.heads_q, c.d, KernelOptions::KvLoads::kAuto, c.page_size);
    const int rows_per_pass = kCopyProducerThreads / (c.d * 2 / 16);
    EXPECT_EQ(paged_kv_copy_source(call.args, call.pr, kBlockM, rows_per_pass), c.source);
    if (!tma_takes_page_size(c.page_size)) EXPECT_TRUE(takes_kv_copy_kernel(call.args, call.pr, kBlockM));
  }
}

// Which decoding steps take d 64's 192-key blocks (decoding_step_takes_wide_blocks): those whose tiles
// stream whole in at most two waves. A tile is a sequence and K/V head where GQA heads are packed (32 / 8
// here), a query head where not; the tiles are split by the heuristic where they fill at most half of the
// SMs, or as num_splits asks.
TEST(VarlenParams, DecodingStepsTakeWideBlocksWhereTilesStreamWhole) {
  struct Case {
    int batch, heads_q, seqlen_k, num_splits;
    KernelOptions::PackGqa pack;
    bool persistent, wide;
  };
  using Pack = KernelOptions::PackGqa;
  constexpr int kSms = 132, kBlockN = 128, kWarpgroups = 2;
  const Case cases[] = {
      {1, 32, 2048, 0, Pack::kAuto, true, false},    {8, 32, 4096, 0, Pack::kAuto, true, false},  // split
      {8, 32, 65536, 0, Pack::kAuto, true, false},   {32, 32, 2048, 4, Pack::kAuto, true, false},
      {16, 32, 2048, 0, Pack::kAuto, true, true},    {32, 32, 2048, 0, Pack::kAuto, true, true},  // 128, 256 tiles
      {48, 32, 2048, 0, Pack::kAuto, true, true},    {12, 32, 2048, 0, Pack::kOff, true, true},  // 384 tiles
      {50, 32, 2048, 0, Pack::kAuto, true, false},   {64, 32, 2048, 0, Pack::kAuto, true, false},  // 400, 512 tiles
      {13, 32, 2048, 0, Pack::kOff, true, false},                                                 // 416 tiles
      {1, 32, 2048, 1, Pack::kAuto, true, true},     {8, 32, 4096, 0, Pack::kOff, true, true},  // 256 tiles
      {8, 32, 4096, 0, Pack::kAuto, false, true},    {1, 32, 128, 0, Pack::kAuto, true, true},  // one block
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " hq " + std::to_string(c.heads_q) + " sk " +
                 std::to_string(c.seqlen_k) + " splits " + std::to_string(c.num_splits));
    detail::Problem pr;
    pr.batch = c.batch, pr.heads_q = c.heads_q, pr.heads_kv = 8, pr.head_dim = pr.head_dim_v = 64;
    pr.seqlen_q = 1, pr.seqlen_k = c.seqlen_k;
    FwdArgs args;
    args.num_splits = c.num_splits;
    args.options.pack_gqa = c.pack;
    args.options.persistent = c.persistent;
    ASSERT_TRUE(is_decoding_step(args, pr, kBlockM));
    EXPECT_EQ(decoding_step_takes_wide_blocks(args, pr, kBlockM, kBlockN, kWarpgroups, kSms), c.wide);
  }
}

}  // namespace
}  // namespace hopattn::sm90
