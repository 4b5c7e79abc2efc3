// Every argument check of forward() and backward(), and the normalized Problem they produce. The
// order is: each tensor well-formed, one device, dtypes, layout and shapes, scalars, what the CUDA
// kernels need, then (host only) the values inside the int32 tensors. CUDA int32 tensors (cu_seqlens,
// seqused_k, seqused_q, page_table) are trusted: checking their values would need a device sync.
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "api/problem.hpp"
#include "api/validate_tensor.hpp"
#include "api/validate_values.hpp"

namespace hopattn::detail {
namespace {

constexpr int kHostMaxHeadDim = 512;
constexpr int kMaxCudaHeadDim = 256;  // the widest sm_90a forward kernel
constexpr const char* kQkvRule = "q, k and v must share one dtype";

// The arguments forward and backward share.
struct Common {
  Arg q, k, v;
  std::optional<Arg> cu_seqlens_q, cu_seqlens_k, seqused_k, seqused_q, page_table;
  int max_seqlen_q, max_seqlen_k;
  std::optional<float> softmax_scale;
  bool causal;
  int window_left, window_right;
  float softcap;
  int attention_chunk;
  bool has_qv;  // FwdArgs::qv given (the backward takes none)
};

std::optional<Arg> optional_arg(const char* name, const std::optional<Tensor>& t) {
  if (!t) return std::nullopt;
  return Arg{name, &*t};
}

// Every tensor given, q first.
std::vector<Arg> present(const Common& c, std::initializer_list<Arg> more,
                         std::initializer_list<std::optional<Arg>> optional_more) {
  std::vector<Arg> args = {c.q, c.k, c.v};
  args.insert(args.end(), more.begin(), more.end());
  for (const auto& a : {c.cu_seqlens_q, c.cu_seqlens_k, c.seqused_k, c.seqused_q, c.page_table})
    if (a) args.push_back(*a);
  for (const auto& a : optional_more)
    if (a) args.push_back(*a);
  return args;
}

// v's layout is checked once k and v are resolved (check_v_layout): it may have its keys contiguous.
Status check_tensors(const std::vector<Arg>& args, const Arg& v) {
  for (const Arg& a : args)
    HOPATTN_RETURN_IF_ERROR(check_well_formed(a, /*layout_checked_later=*/a.tensor == v.tensor));
  for (const Arg& a : args) HOPATTN_RETURN_IF_ERROR(check_same_device(a, args.front()));
  return Status::Ok();
}

Status check_input_dtypes(const Common& c, bool backward) {
  const Tensor& q = *c.q.tensor;
  const bool cuda = q.device == DeviceType::kCuda;
  switch (q.dtype) {
    case Dtype::kFloat16:
    case Dtype::kBFloat16:
      break;
    case Dtype::kFloat8E4M3:
      if (backward)
        return unsupported("q: dtype float8_e4m3 is not supported by backward; backward takes float16, bfloat16 "
                           "or float32 (host tensors only)");
      break;
    case Dtype::kFloat32:
      if (cuda)
        return unsupported("q: dtype float32 runs only on host tensors; CUDA tensors take float16, bfloat16 or "
                           "float8_e4m3");
      break;
    default:
      return invalid(std::string("q: dtype ") + dtype_name(q.dtype) +
                     " is not allowed; q, k and v must be float16, bfloat16, float8_e4m3 or float32 (host only)");
  }
  HOPATTN_RETURN_IF_ERROR(check_same_dtype(c.k, c.q, kQkvRule));
  HOPATTN_RETURN_IF_ERROR(check_same_dtype(c.v, c.q, kQkvRule));
  for (const auto& a : {c.cu_seqlens_q, c.cu_seqlens_k, c.seqused_k, c.seqused_q, c.page_table})
    if (a) HOPATTN_RETURN_IF_ERROR(check_dtype(*a, Dtype::kInt32));
  return Status::Ok();
}

std::string str(std::int64_t v) { return std::to_string(v); }

// cu_seqlens_*: int32 (batch + 1). `batch` < 0 means this tensor defines the batch.
Status check_cu_seqlens_shape(const Arg& cu, std::int64_t batch) {
  HOPATTN_RETURN_IF_ERROR(check_rank(cu, 1, "(batch + 1)"));
  const std::int64_t entries = cu.tensor->shape[0];
  if (batch < 0 && entries < 2)
    return invalid(std::string(cu.name) + ": has " + str(entries) + " entries; it needs batch + 1 >= 2");
  if (batch >= 0 && entries != batch + 1)
    return invalid(std::string(cu.name) + ": has " + str(entries) + " entries; it must have batch + 1 = " +
                   str(batch + 1));
  return Status::Ok();
}

// seqused_q: int32 (batch), the query rows each sequence uses (its values: check_host_values).
Status resolve_seqused_q(const Common& c, Problem* p) {
  if (!c.seqused_q) return Status::Ok();
  HOPATTN_RETURN_IF_ERROR(check_shape(*c.seqused_q, {p->batch}, "(batch)"));
  p->has_seqused_q = true;
  return Status::Ok();
}

// q (dense or varlen) fixes batch, heads_q, head_dim and seqlen_q.
Status resolve_q(const Common& c, Problem* p) {
  const Tensor& q = *c.q.tensor;
  if (c.max_seqlen_q < 0) return invalid("max_seqlen_q: " + str(c.max_seqlen_q) + " is negative; it must be >= 0");
  if (c.cu_seqlens_q) {
    HOPATTN_RETURN_IF_ERROR(check_rank(c.q, 3, "(total_q, heads_q, head_dim) because cu_seqlens_q is given"));
    HOPATTN_RETURN_IF_ERROR(check_cu_seqlens_shape(*c.cu_seqlens_q, -1));
    if (c.max_seqlen_q < 1)
      return invalid("max_seqlen_q: " + str(c.max_seqlen_q) +
                     "; with cu_seqlens_q it must be >= 1, the length of the longest query sequence");
    p->varlen_q = true;
    p->batch = static_cast<int>(c.cu_seqlens_q->tensor->shape[0] - 1);
    p->seqlen_q = c.max_seqlen_q;
    p->heads_q = static_cast<int>(q.shape[1]);
    p->head_dim = static_cast<int>(q.shape[2]);
    return resolve_seqused_q(c, p);
  }
  HOPATTN_RETURN_IF_ERROR(check_rank(c.q, 4, "(batch, seqlen_q, heads_q, head_dim)"));
  if (q.shape[0] < 1) return invalid("q: batch is 0; it must be >= 1");
  p->batch = static_cast<int>(q.shape[0]);
  p->seqlen_q = static_cast<int>(q.shape[1]);
  p->heads_q = static_cast<int>(q.shape[2]);
  p->head_dim = static_cast<int>(q.shape[3]);
  return resolve_seqused_q(c, p);
}

// k and v (dense, varlen or paged) fix heads_kv, seqlen_k and the paging fields.
Status resolve_kv(const Common& c, Problem* p) {
  const Tensor& k = *c.k.tensor;
  if (c.max_seqlen_k < 0) return invalid("max_seqlen_k: " + str(c.max_seqlen_k) + " is negative; it must be >= 0");
  if (c.page_table) {
    if (c.cu_seqlens_k)
      return invalid("cu_seqlens_k: cannot be combined with page_table; a paged KV cache takes its key counts "
                     "from seqused_k");
    HOPATTN_RETURN_IF_ERROR(check_rank(c.k, 4, "(num_pages, page_size, heads_kv, head_dim) because page_table is given"));
    const Arg& table = *c.page_table;
    HOPATTN_RETURN_IF_ERROR(check_rank(table, 2, "(batch, pages_per_seq)"));
    if (table.tensor->shape[0] != p->batch)
      return invalid("page_table: has " + str(table.tensor->shape[0]) + " rows; it must have one per sequence, batch = " +
                     str(p->batch));
    if (table.tensor->shape[1] < 1) return invalid("page_table: pages_per_seq is 0; it must be >= 1");
    if (k.shape[0] < 1 || k.shape[1] < 1)
      return invalid("k: shape " + shape_string(k) + " has no pages; num_pages and page_size must be >= 1");
    const std::int64_t capacity = table.tensor->shape[1] * k.shape[1];
    if (capacity > INT32_MAX)
      return invalid("page_table: pages_per_seq * page_size = " + str(capacity) + " keys; it must be <= 2147483647");
    p->paged = true;
    p->num_pages = static_cast<int>(k.shape[0]);
    p->page_size = static_cast<int>(k.shape[1]);
    p->pages_per_seq = static_cast<int>(table.tensor->shape[1]);
    p->seqlen_k = static_cast<int>(capacity);
  } else if (c.cu_seqlens_k) {
    HOPATTN_RETURN_IF_ERROR(check_rank(c.k, 3, "(total_k, heads_kv, head_dim) because cu_seqlens_k is given"));
    HOPATTN_RETURN_IF_ERROR(check_cu_seqlens_shape(*c.cu_seqlens_k, p->batch));
    p->varlen_k = true;
    p->seqlen_k = c.max_seqlen_k;
  } else {
    HOPATTN_RETURN_IF_ERROR(check_rank(c.k, 4, "(batch, seqlen_k, heads_kv, head_dim)"));
    if (k.shape[0] != p->batch)
      return invalid("k: batch " + str(k.shape[0]) + " does not match q's " + str(p->batch) +
                     "; k and v need one entry per sequence");
    p->seqlen_k = static_cast<int>(k.shape[1]);
  }
  HOPATTN_RETURN_IF_ERROR(check_v_shape(c.v, k));
  p->heads_kv = static_cast<int>(k.shape[k.rank - 2]);
  const std::int64_t k_dim = k.shape[k.rank - 1];
  if (k_dim != p->head_dim)
    return invalid("k: head_dim " + str(k_dim) + " does not match q's " + str(p->head_dim) +
                   "; q and k share one head_dim (v may have its own)");
  p->head_dim_v = static_cast<int>(c.v.tensor->shape[k.rank - 1]);
  if (c.seqused_k) {
    HOPATTN_RETURN_IF_ERROR(check_shape(*c.seqused_k, {p->batch}, "(batch)"));
    p->has_seqused_k = true;
  }
  return Status::Ok();
}

// Keys-contiguous v (V^T in memory) only where the FP8 kernel can load it as such: e4m3, dense k/v.
Status resolve_v_layout(const Common& c, Problem* p) {
  const std::string dtype_reason = std::string("its dtype is ") + dtype_name(p->in_dtype);
  const char* forbidden = p->in_dtype != Dtype::kFloat8E4M3 ? dtype_reason.c_str()
                          : p->paged                        ? "k and v are paged (page_table)"
                          : p->varlen_k                     ? "k and v are varlen (cu_seqlens_k)"
                                                            : nullptr;
  return check_v_layout(c.v, forbidden, &p->v_keys_contiguous);
}

// q's and v's head dims against a CUDA kernel rule: multiples of `multiple` up to 256; `rule` finishes
// the message ("head_dim N is not supported " + rule).
Status check_cuda_head_dims(const Problem& p, int multiple, const char* rule) {
  for (const auto& [name, head_dim] : {std::pair{"q", p.head_dim}, std::pair{"v", p.head_dim_v}}) {
    if (head_dim % multiple != 0 || head_dim > kMaxCudaHeadDim)
      return unsupported(std::string(name) + ": head_dim " + str(head_dim) + " is not supported " + rule);
  }
  return Status::Ok();
}

// has_qv: FwdArgs::qv given.
Status check_heads_and_head_dim(const Problem& p, bool has_qv) {
  if (p.heads_q < 1) return invalid("q: heads_q is 0; it must be >= 1");
  if (p.heads_kv < 1) return invalid("k: heads_kv is 0; it must be >= 1");
  if (p.heads_q % p.heads_kv != 0)
    return invalid("k: heads_kv " + str(p.heads_kv) + " does not divide q's heads_q " + str(p.heads_q) +
                   "; heads_q must be a multiple of heads_kv (GQA/MQA)");
  if (p.head_dim < 1 || p.head_dim > kHostMaxHeadDim)
    return invalid("q: head_dim " + str(p.head_dim) + " is not allowed; head_dim must be in 1..512");
  if (p.head_dim_v < 1 || p.head_dim_v > kHostMaxHeadDim)
    return invalid("v: head_dim " + str(p.head_dim_v) + " is not allowed; v's head_dim must be in 1..512");
  if (p.device != DeviceType::kCuda) return Status::Ok();
  // The kernels run a head dim in the next wider kernel, whose TMA loads zero-fill the columns past it,
  // and a v of its own head dim in the kernel of the wider. Rows of whole 16-byte units keep every
  // stride a multiple of the 16 bytes TMA requires: multiples of 8 columns at 16 bits, of 16 in FP8
  // (whose kernels are 64, 128, 192 and 256 wide).
  if (p.in_dtype == Dtype::kFloat8E4M3) {
    return check_cuda_head_dims(p, 16,
                                "for FP8 CUDA tensors; the sm_90a FP8 kernels take a head_dim that is a multiple of "
                                "16 from 16 to 256, for q and k and for v (bf16/fp16 take any multiple of 8 from 8 "
                                "to 256; host tensors 1..512)");
  }
  // qv's MLA kernel (DeepSeek's latent attention decoding) takes q/k 64 with v 512.
  if (has_qv && p.head_dim == 64 && p.head_dim_v == 512) return Status::Ok();
  return check_cuda_head_dims(p, 8,
                              "on CUDA tensors; the sm_90a kernels take a head_dim that is a multiple of 8 from 8 to "
                              "256, for q and k and for v, or with qv q/k 64 and v 512 (host tensors take 1..512)");
}

// Checks the masking and scaling scalars and stores them normalized: causal folded into the window
// (flash-attention's rule: causal is exactly the window (-1, 0)), and windows wide enough to cover
// every key replaced by -1 so that no backend adds a huge window to a position.
Status resolve_scalars(const Common& c, Problem* p) {
  if (c.softmax_scale && !std::isfinite(*c.softmax_scale))
    return invalid("softmax_scale: " + std::to_string(*c.softmax_scale) + " is not finite; it must be a finite number");
  if (!std::isfinite(c.softcap) || c.softcap < 0.0f)
    return invalid("softcap: " + std::to_string(c.softcap) + " is not allowed; it must be finite and >= 0 (0 = off)");
  if (c.window_left < -1)
    return invalid("window_left: " + str(c.window_left) + " is not allowed; it must be >= 0, or -1 for unbounded");
  if (c.window_right < -1)
    return invalid("window_right: " + str(c.window_right) + " is not allowed; it must be >= 0, or -1 for unbounded");
  if (c.attention_chunk < 0)
    return invalid("attention_chunk: " + str(c.attention_chunk) +
                   " is not allowed; it must be >= 0 (0 = off: no chunks)");
  if (c.causal && c.window_right > 0)
    return invalid("causal: contradicts window_right " + str(c.window_right) +
                   "; causal means window_right = 0, so pass causal = false with window_right, or window_right "
                   "0 or -1 with causal");
  p->softmax_scale = c.softmax_scale ? *c.softmax_scale : 1.0f / std::sqrt(static_cast<float>(p->head_dim));
  p->softcap = c.softcap;
  int left = c.window_left;
  int right = c.causal ? 0 : c.window_right;
  // Query i of a sequence sees every key to its left once left >= len_k - 1, and to its right once
  // right >= len_q - 1; seqlen_k and seqlen_q bound those lengths.
  if (left > p->seqlen_k) left = -1;
  if (right > p->seqlen_q) right = -1;
  p->window_left = left;
  p->window_right = right;
  p->causal = left == -1 && right == 0;
  // A row's diagonal lies in (-len_q, len_k): chunks of len_q + len_k or more put every such diagonal
  // in chunk 0 (keys [0, ...) cover all of the sequence's) or chunk -1 (no key), so the chunk is capped
  // there (no backend adds a huge chunk to a position). Where every sequence has exactly seqlen_q and
  // seqlen_k (dense, no seqused_k or seqused_q), no diagonal is negative when seqlen_q <= seqlen_k, and
  // a chunk of seqlen_k or more masks nothing: it is turned off.
  const long long chunk_cap = static_cast<long long>(p->seqlen_q) + p->seqlen_k;
  long long chunk = c.attention_chunk < chunk_cap ? c.attention_chunk : chunk_cap;
  const bool exact_lengths = !p->varlen_q && !p->varlen_k && !p->has_seqused_k && !p->has_seqused_q;
  if (exact_lengths && p->seqlen_q <= p->seqlen_k && chunk >= p->seqlen_k) chunk = 0;
  p->attention_chunk = static_cast<int>(chunk);
  return Status::Ok();
}

// TMA-loaded tensors must be aligned and non-empty; only CUDA calls get here.
Status check_cuda_tensors(const std::vector<Arg>& tma_tensors) {
  for (const Arg& a : tma_tensors) {
    HOPATTN_RETURN_IF_ERROR(check_tma_compatible(a));
    for (int d = 0; d < a.tensor->rank; ++d)
      if (a.tensor->shape[d] == 0)
        return unsupported(std::string(a.name) + ": dimension " + str(d) + " is empty (shape " +
                           shape_string(*a.tensor) + "); CUDA tensors must have every extent >= 1 (host tensors "
                           "may be empty)");
  }
  return Status::Ok();
}

Status check_host_values(const Common& c, const Problem& p) {
  if (c.cu_seqlens_q)
    HOPATTN_RETURN_IF_ERROR(check_cu_seqlens(*c.cu_seqlens_q, "q", c.q.tensor->shape[0], c.max_seqlen_q, "max_seqlen_q"));
  if (c.cu_seqlens_k)
    HOPATTN_RETURN_IF_ERROR(check_cu_seqlens(*c.cu_seqlens_k, "k", c.k.tensor->shape[0], c.max_seqlen_k, "max_seqlen_k"));
  if (c.seqused_k)
    HOPATTN_RETURN_IF_ERROR(
        check_seqused(*c.seqused_k, c.cu_seqlens_k ? c.cu_seqlens_k->tensor : nullptr, p.seqlen_k, "keys"));
  if (c.seqused_q)
    HOPATTN_RETURN_IF_ERROR(
        check_seqused(*c.seqused_q, c.cu_seqlens_q ? c.cu_seqlens_q->tensor : nullptr, p.seqlen_q, "query rows"));
  if (c.page_table) HOPATTN_RETURN_IF_ERROR(check_page_table(*c.page_table, p.num_pages));
  return Status::Ok();
}

// float32 (batch, heads_q, seqlen_q), or (heads_q, total_q) for varlen q.
Status check_lse(const Arg& lse, const Common& c, const Problem& p) {
  HOPATTN_RETURN_IF_ERROR(check_dtype(lse, Dtype::kFloat32));
  if (p.varlen_q) return check_shape(lse, {p.heads_q, c.q.tensor->shape[0]}, "(heads_q, total_q)");
  return check_shape(lse, {p.batch, p.heads_q, p.seqlen_q}, "(batch, heads_q, seqlen_q)");
}

// float32 (heads_q): learnable_sink, and the backward's dsink beside it.
Status check_sink(const Arg& sink, const Problem& p) {
  HOPATTN_RETURN_IF_ERROR(check_dtype(sink, Dtype::kFloat32));
  return check_shape(sink, {p.heads_q}, "(heads_q)");
}

// Layout, heads, scalars: everything both directions resolve from the shared arguments.
Status resolve_common(const Common& c, Problem* p) {
  const Tensor& q = *c.q.tensor;
  p->device = q.device;
  p->device_index = q.device == DeviceType::kCuda ? q.device_index : 0;
  p->in_dtype = q.dtype;
  HOPATTN_RETURN_IF_ERROR(resolve_q(c, p));
  HOPATTN_RETURN_IF_ERROR(resolve_kv(c, p));
  HOPATTN_RETURN_IF_ERROR(resolve_v_layout(c, p));
  HOPATTN_RETURN_IF_ERROR(check_heads_and_head_dim(*p, c.has_qv));
  return resolve_scalars(c, p);
}

Common common_of(const FwdArgs& a) {
  return {{"q", &a.q},
          {"k", &a.k},
          {"v", &a.v},
          optional_arg("cu_seqlens_q", a.cu_seqlens_q),
          optional_arg("cu_seqlens_k", a.cu_seqlens_k),
          optional_arg("seqused_k", a.seqused_k),
          optional_arg("seqused_q", a.seqused_q),
          optional_arg("page_table", a.page_table),
          a.max_seqlen_q,
          a.max_seqlen_k,
          a.softmax_scale,
          a.causal,
          a.window_left,
          a.window_right,
          a.softcap,
          a.attention_chunk,
          a.qv.has_value()};
}

// BwdArgs has no page_table: a paged KV cache cannot reach the backward pass.
Common common_of(const BwdArgs& a) {
  return {{"q", &a.q},
          {"k", &a.k},
          {"v", &a.v},
          optional_arg("cu_seqlens_q", a.cu_seqlens_q),
          optional_arg("cu_seqlens_k", a.cu_seqlens_k),
          optional_arg("seqused_k", a.seqused_k),
          optional_arg("seqused_q", a.seqused_q),
          std::nullopt,
          a.max_seqlen_q,
          a.max_seqlen_k,
          a.softmax_scale,
          a.causal,
          a.window_left,
          a.window_right,
          a.softcap,
          a.attention_chunk,
          false};
}

Status check_descales(const FwdArgs& a, const Problem& p) {
  for (const auto& d : {optional_arg("q_descale", a.q_descale), optional_arg("k_descale", a.k_descale),
                        optional_arg("v_descale", a.v_descale)}) {
    if (!d) continue;
    if (p.in_dtype != Dtype::kFloat8E4M3)
      return invalid(std::string(d->name) + ": given with " + dtype_name(p.in_dtype) +
                     " inputs; descale factors apply only to float8_e4m3 inputs");
    HOPATTN_RETURN_IF_ERROR(check_dtype(*d, Dtype::kFloat32));
    HOPATTN_RETURN_IF_ERROR(check_shape(*d, {p.batch, p.heads_kv}, "(batch, heads_kv)"));
  }
  return Status::Ok();
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Per-block scales (quantize_fp8's kPerBlock descales): float32 (batch, heads, blocks of rows).
Status check_block_descales(const FwdArgs& a, const Problem& p) {
  const bool any = a.q_block_descale || a.k_block_descale || a.v_block_descale;
  if (!any) return Status::Ok();
  if (a.descale_block_rows_q < 1)
    return invalid("descale_block_rows_q: " + str(a.descale_block_rows_q) + " is not allowed; it must be >= 1");
  if (a.descale_block_rows_kv < 1)
    return invalid("descale_block_rows_kv: " + str(a.descale_block_rows_kv) + " is not allowed; it must be >= 1");
  const std::int64_t blocks_q = ceil_div(p.seqlen_q, a.descale_block_rows_q);
  const std::int64_t blocks_kv = ceil_div(p.seqlen_k, a.descale_block_rows_kv);
  struct Expected {
    std::optional<Arg> arg;
    std::int64_t heads, blocks;
    const char* layout;
  };
  const Expected expected[] = {
      {optional_arg("q_block_descale", a.q_block_descale), p.heads_q, blocks_q,
       "(batch, heads_q, ceil(seqlen_q / descale_block_rows_q))"},
      {optional_arg("k_block_descale", a.k_block_descale), p.heads_kv, blocks_kv,
       "(batch, heads_kv, ceil(seqlen_k / descale_block_rows_kv))"},
      {optional_arg("v_block_descale", a.v_block_descale), p.heads_kv, blocks_kv,
       "(batch, heads_kv, ceil(seqlen_k / descale_block_rows_kv))"},
  };
  for (const Expected& e : expected) {
    if (!e.arg) continue;
    if (p.in_dtype != Dtype::kFloat8E4M3)
      return invalid(std::string(e.arg->name) + ": given with " + dtype_name(p.in_dtype) +
                     " inputs; descale factors apply only to float8_e4m3 inputs");
    HOPATTN_RETURN_IF_ERROR(check_dtype(*e.arg, Dtype::kFloat32));
    HOPATTN_RETURN_IF_ERROR(check_shape(*e.arg, {p.batch, e.heads, e.blocks}, e.layout));
  }
  return Status::Ok();
}

// qv (flash-attention 3's): out's shape and q's dtype, 16/32-bit tensors (the sm_90a forward says which
// CUDA calls its MLA kernel takes); without an explicit softmax_scale the default becomes
// 1/sqrt(d + d_v), as in FA3 (the scores sum over both head dims).
Status resolve_qv(const FwdArgs& a, const Arg& qv, const Arg& q, Problem* p) {
  if (p->in_dtype == Dtype::kFloat8E4M3)
    return unsupported("qv: given with float8_e4m3 inputs; qv is supported with float32, float16 and bfloat16 "
                       "host tensors and float16 and bfloat16 CUDA tensors");
  HOPATTN_RETURN_IF_ERROR(check_same_dtype(qv, q, "qv must have q's dtype"));
  HOPATTN_RETURN_IF_ERROR(check_out_shape(qv, q, p->head_dim_v));
  if (!a.softmax_scale) p->softmax_scale = 1.0f / std::sqrt(static_cast<float>(p->head_dim + p->head_dim_v));
  return Status::Ok();
}

}  // namespace

Status validate_forward(const FwdArgs& a, Problem* problem) {
  Problem p;
  const Common c = common_of(a);
  const Arg out{"out", &a.out};
  const std::optional<Arg> lse = optional_arg("lse", a.lse);
  const std::optional<Arg> sink = optional_arg("learnable_sink", a.learnable_sink);
  const std::optional<Arg> qv = optional_arg("qv", a.qv);
  const std::vector<Arg> tensors =
      present(c, {out}, {lse, sink, qv, optional_arg("q_descale", a.q_descale),
                         optional_arg("k_descale", a.k_descale), optional_arg("v_descale", a.v_descale),
                         optional_arg("q_block_descale", a.q_block_descale),
                         optional_arg("k_block_descale", a.k_block_descale),
                         optional_arg("v_block_descale", a.v_block_descale)});
  HOPATTN_RETURN_IF_ERROR(check_tensors(tensors, c.v));
  HOPATTN_RETURN_IF_ERROR(check_input_dtypes(c, /*backward=*/false));
  if (a.q.dtype == Dtype::kFloat8E4M3) {
    if (a.out.dtype != Dtype::kBFloat16)
      return invalid(std::string("out: dtype ") + dtype_name(a.out.dtype) +
                     " is not allowed; with float8_e4m3 inputs out must be bfloat16");
  } else {
    HOPATTN_RETURN_IF_ERROR(check_same_dtype(out, c.q, "out must have q's dtype (bfloat16 for float8_e4m3 inputs)"));
  }
  HOPATTN_RETURN_IF_ERROR(resolve_common(c, &p));
  HOPATTN_RETURN_IF_ERROR(check_out_shape(out, c.q, p.head_dim_v));
  if (qv) HOPATTN_RETURN_IF_ERROR(resolve_qv(a, *qv, c.q, &p));
  if (lse) HOPATTN_RETURN_IF_ERROR(check_lse(*lse, c, p));
  if (sink) HOPATTN_RETURN_IF_ERROR(check_sink(*sink, p));
  HOPATTN_RETURN_IF_ERROR(check_descales(a, p));
  HOPATTN_RETURN_IF_ERROR(check_block_descales(a, p));
  if (a.num_splits < 0)
    return invalid("num_splits: " + str(a.num_splits) + " is negative; it must be 0 (heuristic), 1 (no split) or more");
  if (p.device == DeviceType::kCuda) {
    std::vector<Arg> cuda_tensors{c.q, c.k, c.v, out};
    if (qv) cuda_tensors.push_back(*qv);
    HOPATTN_RETURN_IF_ERROR(check_cuda_tensors(cuda_tensors));
  }
  if (p.device == DeviceType::kHost) HOPATTN_RETURN_IF_ERROR(check_host_values(c, p));
  p.out_dtype = a.out.dtype;
  p.has_lse = a.lse.has_value();
  *problem = p;
  return Status::Ok();
}

Status validate_backward(const BwdArgs& a, Problem* problem) {
  Problem p;
  const Common c = common_of(a);
  const Arg out{"out", &a.out}, dout{"dout", &a.dout}, lse{"lse", &a.lse};
  const Arg dq{"dq", &a.dq}, dk{"dk", &a.dk}, dv{"dv", &a.dv};
  const std::optional<Arg> sink = optional_arg("learnable_sink", a.learnable_sink);
  const std::optional<Arg> dsink = optional_arg("dsink", a.dsink);
  HOPATTN_RETURN_IF_ERROR(check_tensors(present(c, {out, dout, lse, dq, dk, dv}, {sink, dsink}), c.v));
  HOPATTN_RETURN_IF_ERROR(check_input_dtypes(c, /*backward=*/true));
  for (const Arg& t : {out, dout, dq, dk, dv})
    HOPATTN_RETURN_IF_ERROR(check_same_dtype(t, c.q, "out, dout, dq, dk and dv must have q's dtype"));
  HOPATTN_RETURN_IF_ERROR(resolve_common(c, &p));
  for (const Arg& t : {out, dout}) HOPATTN_RETURN_IF_ERROR(check_out_shape(t, c.q, p.head_dim_v));
  HOPATTN_RETURN_IF_ERROR(check_same_shape(dq, c.q));
  HOPATTN_RETURN_IF_ERROR(check_same_shape(dk, c.k));
  HOPATTN_RETURN_IF_ERROR(check_same_shape(dv, c.v));
  HOPATTN_RETURN_IF_ERROR(check_lse(lse, c, p));
  if (dsink && !sink)
    return invalid("dsink: given without learnable_sink; the gradient of a sink needs the sink the forward took");
  for (const auto& t : {sink, dsink})
    if (t) HOPATTN_RETURN_IF_ERROR(check_sink(*t, p));
  if (p.device == DeviceType::kCuda)
    HOPATTN_RETURN_IF_ERROR(check_cuda_tensors({c.q, c.k, c.v, out, dout, dq, dk, dv}));
  if (p.device == DeviceType::kHost) HOPATTN_RETURN_IF_ERROR(check_host_values(c, p));
  p.out_dtype = a.q.dtype;
  p.has_lse = true;
  *problem = p;
  return Status::Ok();
}

}  // namespace hopattn::detail
