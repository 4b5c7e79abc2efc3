#include "gpu/paged_case.cuh"

#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace hopattn::test {
namespace {

constexpr int kTablePad = 3;  // entries after each row of a padded page table (outside its view)

void check_case_shape(const PagedCase& c) {
  if (c.batch() < 1 || c.len_k.size() != c.len_q.size())
    throw std::invalid_argument("test case: one length per sequence on each side");
  if (c.page_size < 1 || c.spare_pages < 0 || c.extra_columns < 0)
    throw std::invalid_argument("test case: page_size >= 1, spare_pages and extra_columns >= 0");
  if (!c.varlen_q && (!all_equal(c.len_q) || c.len_q[0] < 1))
    throw std::invalid_argument("test case: dense q needs equal lengths >= 1");
  if (std::accumulate(c.len_q.begin(), c.len_q.end(), 0) < 1)
    throw std::invalid_argument("test case: CUDA tensors need at least one query row");
  if (*std::min_element(c.len_k.begin(), c.len_k.end()) < 0) throw std::invalid_argument("test case: len_k < 0");
  if (!c.with_seqused_k && (!all_equal(c.len_k) || c.len_k[0] < c.page_size || c.len_k[0] % c.page_size != 0 ||
                            c.extra_columns != 0))
    throw std::invalid_argument("test case: without seqused_k every sequence fills its pages_per_seq pages");
}

// dst row r = src row pages[r / page_size] * page_size + r % page_size, for the `rows` rows of one
// sequence (16-bit elements, row_elements per row, padding included).
__global__ void gather_pages_kernel(const std::uint16_t* src, std::uint16_t* dst, const std::int32_t* pages,
                                    int page_size, std::int64_t row_elements, std::int64_t rows) {
  const std::int64_t n = rows * row_elements;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / row_elements, col = i % row_elements;
    const std::int64_t src_row = std::int64_t(pages[r / page_size]) * page_size + r % page_size;
    dst[i] = src[src_row * row_elements + col];
  }
}

// Sequence b's keys (or values) out of the pool into rows [start, start + len) of `dst`.
void gather_sequence(const RowView& pool, const RowView& dst, int start, int len, const std::int32_t* pages,
                     int page_size) {
  if (len == 0) return;
  gather_pages_kernel<<<grid_for(std::int64_t(len) * pool.row_stride), 256>>>(
      reinterpret_cast<const std::uint16_t*>(pool.base), reinterpret_cast<std::uint16_t*>(dst.row(start)), pages,
      page_size, pool.row_stride, len);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

std::string PagedCase::describe() const {
  std::ostringstream s;
  s << (varlen_q ? "varlen q " : "dense q ") << join(len_q) << (with_seqused_k ? " seqused_k " : " full pages ")
    << join(len_k) << " page_size " << page_size << " pages_per_seq " << pages_per_seq() << " num_pages "
    << num_pages() << (padded_table ? " padded-table" : "");
  if (non_key_value) s << " non-key rows " << *non_key_value;
  if (unused_entry) s << " unused table entries " << *unused_entry;
  describe_to(s);
  if (!options.warp_specialized) s << " no-warp-specialized";
  return s.str();
}

PagedCall::PagedCall(const PagedCase& c, std::uint64_t seed) {
  check_case_shape(c);
  const int batch = c.batch(), hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim, ps = c.page_size;
  const int pages_per_seq = c.pages_per_seq(), num_pages = c.num_pages();
  starts_q = prefix_sums(c.len_q);

  // Pages: every id once, shuffled; sequence b takes the next pages_for(b) of them, in that order.
  // Every other entry, past a sequence's used pages or in a padded row's spare columns, is a valid
  // id drawn at random (often a garbage page, sometimes another sequence's), or unused_entry: never
  // to be used.
  std::mt19937_64 rng(splitmix64(seed ^ 4));
  std::vector<int> order(num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> any_page(0, num_pages - 1);
  table_stride = pages_per_seq + (c.padded_table ? kTablePad : 0);
  table.assign(std::size_t(batch) * table_stride, 0);
  std::vector<std::uint8_t> garbage(std::size_t(num_pages) * ps, 1);  // per pool row: not a key of anyone
  int next = 0;
  for (int b = 0; b < batch; ++b) {
    for (int p = 0; p < table_stride; ++p) {
      const bool used = p < c.pages_for(b);
      const int page = used ? order[next++] : c.unused_entry ? *c.unused_entry : any_page(rng);
      table[std::size_t(b) * table_stride + p] = page;
      if (!used) continue;
      const int keys_here = std::min(ps, c.len_k[b] - p * ps);
      std::fill_n(garbage.begin() + std::int64_t(page) * ps, keys_here, std::uint8_t{0});
    }
  }

  // Inputs: fresh normal values, then +-kGarbage (or non_key_value) in every pool row that is no key.
  q = make_rows(c.dtype, starts_q.back(), hq, d, c.padded_rows, 0);
  k = make_rows(c.dtype, std::int64_t(num_pages) * ps, hkv, d, c.padded_rows, 0);
  v = make_rows(c.dtype, std::int64_t(num_pages) * ps, hkv, d, c.padded_rows, 0);
  fill_inputs(q, k, v, seed, c.amplitude);
  const DeviceBuffer flags = upload(garbage);
  fill_flagged_rows(k, flags, c.non_key_value.value_or(kGarbage));
  fill_flagged_rows(v, flags, c.non_key_value.value_or(-kGarbage));

  outputs = PoisonedOutputs(c.dtype, starts_q, c.varlen_q, hq, d, c.padded_rows, c.with_lse);

  table_dev = upload(table);
  if (c.varlen_q) cu_q = upload(starts_q);
  if (c.with_seqused_k) seqused = upload(c.len_k);
  args.q = q.view.api_tensor(starts_q, c.varlen_q);
  args.k = k.view.pages(num_pages, ps);
  args.v = v.view.pages(num_pages, ps);
  outputs.set_args(args, starts_q, c.varlen_q);
  args.page_table = cuda_view(table_dev.data(), Dtype::kInt32, {batch, pages_per_seq}, {table_stride, 1});
  if (cu_q) args.cu_seqlens_q = make_tensor(cu_q->data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
  if (seqused) args.seqused_k = make_tensor(seqused->data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
  // The true maxima (validation takes seqlen_q from a dense q and pages_per_seq * page_size for k).
  args.max_seqlen_q = *std::max_element(c.len_q.begin(), c.len_q.end());
  args.max_seqlen_k = *std::max_element(c.len_k.begin(), c.len_k.end());
  c.set_args(args);
  args.options.warp_specialized = c.options.warp_specialized;
}

std::string run_paged_case(const PagedCase& c, std::uint64_t seed) {
  try {
    PagedCall call(c, seed);
    if (std::string why = forward_problem(call.args); !why.empty()) return why;

    const int batch = c.batch(), d = c.head_dim;

    // Each sequence's keys and values gathered out of the pool through its table row, one sequence
    // after the other (rows laid out like the pool's, padding included).
    const std::vector<int> starts_k = prefix_sums(c.len_k);
    const RowBuffer keys = make_rows(c.dtype, starts_k.back(), c.heads_kv, d, c.padded_rows, 0);
    const RowBuffer values = make_rows(c.dtype, starts_k.back(), c.heads_kv, d, c.padded_rows, 0);
    for (int b = 0; b < batch; ++b) {
      gather_sequence(call.k.view, keys.view, starts_k[b], c.len_k[b], call.device_pages(b), c.page_size);
      gather_sequence(call.v.view, values.view, starts_k[b], c.len_k[b], call.device_pages(b), c.page_size);
    }

    SequenceRows rows;
    rows.len_q = c.len_q, rows.starts_q = call.starts_q, rows.len_k = c.len_k, rows.starts_k = starts_k;
    rows.q = call.q.view, rows.k = keys.view, rows.v = values.view;
    return check_sequences(c, rows, call.outputs);
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

PagedCase paged(std::vector<int> len_q, std::vector<int> len_k, int page_size, int heads_q, int heads_kv,
                int head_dim, Dtype dtype) {
  PagedCase c;
  c.len_q = std::move(len_q);
  c.len_k = std::move(len_k);
  c.page_size = page_size;
  c.heads_q = heads_q, c.heads_kv = heads_kv, c.head_dim = head_dim, c.dtype = dtype;
  return c;
}

}  // namespace hopattn::test
