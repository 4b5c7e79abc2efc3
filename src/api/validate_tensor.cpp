#include "api/validate_tensor.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace hopattn::detail {
namespace {

constexpr std::int64_t kTmaAlignBytes = 16;

bool is_known_dtype(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32:
    case Dtype::kFloat16:
    case Dtype::kBFloat16:
    case Dtype::kFloat8E4M3:
    case Dtype::kInt32:
      return true;
  }
  return false;
}

int clamped_rank(const Tensor& t) { return std::clamp(t.rank, 0, kMaxRank); }

std::string prefix(const Arg& arg) { return std::string(arg.name) + ": "; }

// Stride 1, or an extent that never steps along the dimension.
bool contiguous_dim(const Tensor& t, int d) { return t.stride[d] == 1 || t.shape[d] <= 1; }

bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.rank != b.rank) return false;
  for (int d = 0; d < clamped_rank(a); ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

}  // namespace

Status invalid(const std::string& message) { return Status(StatusCode::kInvalidArgument, message); }
Status unsupported(const std::string& message) { return Status(StatusCode::kUnsupported, message); }

std::string shape_string(const Tensor& t) {
  std::string s = "(";
  for (int d = 0; d < clamped_rank(t); ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + ")";
}

std::string device_string(const Tensor& t) {
  if (t.device == DeviceType::kHost) return "host";
  return "cuda:" + std::to_string(t.device_index);
}

Status check_well_formed(const Arg& arg, bool layout_checked_later) {
  const Tensor& t = *arg.tensor;
  if (t.rank < 1 || t.rank > kMaxRank)
    return invalid(prefix(arg) + "rank " + std::to_string(t.rank) + " is not allowed; tensors have rank 1.." +
                   std::to_string(kMaxRank));
  // An empty tensor addresses nothing, so it may come without a buffer (PyTorch's empty CPU tensors do).
  const bool empty = std::any_of(t.shape, t.shape + t.rank, [](std::int64_t e) { return e == 0; });
  if (t.data == nullptr && !empty)
    return invalid(prefix(arg) + "data is null; every non-empty tensor argument needs a buffer");
  if (!is_known_dtype(t.dtype))
    return invalid(prefix(arg) + "dtype code " + std::to_string(static_cast<int>(t.dtype)) +
                   " is not a hopattn::Dtype");
  if (t.device != DeviceType::kHost && t.device != DeviceType::kCuda)
    return invalid(prefix(arg) + "device code " + std::to_string(static_cast<int>(t.device)) +
                   " is not a hopattn::DeviceType (kHost or kCuda)");
  if (t.device == DeviceType::kCuda && t.device_index < 0)
    return invalid(prefix(arg) + "device_index " + std::to_string(t.device_index) + " is negative");
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > INT32_MAX)
      return invalid(prefix(arg) + "dimension " + std::to_string(d) + " has extent " + std::to_string(t.shape[d]) +
                     "; extents must be in [0, 2147483647]");
    if (t.stride[d] < 0)
      return invalid(prefix(arg) + "dimension " + std::to_string(d) + " has stride " + std::to_string(t.stride[d]) +
                     "; strides must be >= 0");
  }
  const int last = t.rank - 1;
  if (!layout_checked_later && !contiguous_dim(t, last))
    return invalid(prefix(arg) + "the last dimension has stride " + std::to_string(t.stride[last]) +
                   "; it must be contiguous (stride 1)");
  // The farthest element must be addressable in bytes without overflowing int64.
  std::int64_t max_offset = 0;
  bool overflow = false;
  for (int d = 0; d < t.rank && !empty; ++d) {
    std::int64_t span = 0;
    overflow |= __builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &span);
    overflow |= __builtin_add_overflow(max_offset, span, &max_offset);
  }
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(t.dtype));
  std::int64_t max_byte = 0;
  overflow |= __builtin_mul_overflow(max_offset, elem, &max_byte);
  if (overflow)
    return invalid(prefix(arg) + "shape " + shape_string(t) +
                   " with its strides addresses more bytes than int64 can count");
  if (reinterpret_cast<std::uintptr_t>(t.data) % static_cast<std::uintptr_t>(elem) != 0)
    return invalid(prefix(arg) + "data pointer is not aligned to its " + std::to_string(elem) + "-byte " +
                   dtype_name(t.dtype) + " elements");
  return Status::Ok();
}

Status check_dtype(const Arg& arg, Dtype expected) {
  if (arg.tensor->dtype == expected) return Status::Ok();
  return invalid(prefix(arg) + "dtype " + dtype_name(arg.tensor->dtype) + " is not allowed; it must be " +
                 dtype_name(expected));
}

Status check_rank(const Arg& arg, int rank, const char* layout) {
  if (arg.tensor->rank == rank) return Status::Ok();
  return invalid(prefix(arg) + "rank " + std::to_string(arg.tensor->rank) + " (shape " +
                 shape_string(*arg.tensor) + "); it must be rank " + std::to_string(rank) + " " + layout);
}

Status check_shape(const Arg& arg, std::initializer_list<std::int64_t> expected, const char* layout) {
  Tensor want;
  want.rank = static_cast<int>(expected.size());
  std::copy(expected.begin(), expected.end(), want.shape);
  if (same_shape(*arg.tensor, want)) return Status::Ok();
  return invalid(prefix(arg) + "shape " + shape_string(*arg.tensor) + " is not allowed; it must be " + layout +
                 " = " + shape_string(want));
}

Status check_same_shape(const Arg& arg, const Arg& model) {
  if (same_shape(*arg.tensor, *model.tensor)) return Status::Ok();
  return invalid(prefix(arg) + "shape " + shape_string(*arg.tensor) + " does not match " + model.name + "'s " +
                 shape_string(*model.tensor) + "; " + arg.name + " must have " + model.name + "'s shape");
}

// v has k's shape but for its head dim, which may differ (flash-attention 3's headdim_v).
Status check_v_shape(const Arg& v, const Tensor& k) {
  const Tensor& t = *v.tensor;
  bool same = t.rank == k.rank;
  for (int d = 0; same && d + 1 < k.rank; ++d) same = t.shape[d] == k.shape[d];
  if (!same)
    return invalid(prefix(v) + "shape " + shape_string(t) + " does not match k's " + shape_string(k) +
                   "; v must have k's shape, but for its head dim (the last), which may differ");
  return Status::Ok();
}

// out (and dout) have q's shape with v's head dim last.
Status check_out_shape(const Arg& out, const Arg& q, int head_dim_v) {
  Tensor want = *q.tensor;
  want.shape[want.rank - 1] = head_dim_v;
  if (same_shape(*out.tensor, want)) return Status::Ok();
  return invalid(prefix(out) + "shape " + shape_string(*out.tensor) + " does not match q's " +
                 shape_string(*q.tensor) + " with v's head_dim " + std::to_string(head_dim_v) + " last; " + out.name +
                 " must be " + shape_string(want));
}

Status check_same_dtype(const Arg& arg, const Arg& model, const char* rule) {
  if (arg.tensor->dtype == model.tensor->dtype) return Status::Ok();
  return invalid(prefix(arg) + "dtype " + dtype_name(arg.tensor->dtype) + " does not match " + model.name + "'s " +
                 dtype_name(model.tensor->dtype) + "; " + rule);
}

Status check_same_device(const Arg& arg, const Arg& model) {
  const Tensor& t = *arg.tensor;
  const Tensor& m = *model.tensor;
  // A host tensor's device_index means nothing, so only CUDA tensors compare it.
  const bool same = t.device == m.device && (t.device == DeviceType::kHost || t.device_index == m.device_index);
  if (same) return Status::Ok();
  return invalid(prefix(arg) + "is on " + device_string(t) + " but " + model.name + " is on " + device_string(m) +
                 "; all tensors of one call must be on one device");
}

bool keys_contiguous(const Tensor& t) {
  return t.rank == 4 && !contiguous_dim(t, 3) && contiguous_dim(t, 1);
}

Status check_v_layout(const Arg& v, const char* forbidden, bool* keys_contiguous_out) {
  const Tensor& t = *v.tensor;
  *keys_contiguous_out = false;
  const int last = t.rank - 1, keys = t.rank - 3;  // (..., seqlen_k or total_k, heads_kv, head_dim)
  if (contiguous_dim(t, last)) return Status::Ok();
  const std::string name(v.name);
  const std::string last_stride = "stride[" + std::to_string(last) + "] is " + std::to_string(t.stride[last]);
  if (keys < 0 || !contiguous_dim(t, keys))
    return invalid(prefix(v) + "neither its last dimension (" + last_stride + ") nor its keys' dimension is " +
                   "contiguous; " + name + " needs stride[" + std::to_string(last) +
                   "] == 1, or stride[1] == 1 (keys contiguous: V^T in memory), which only float8_e4m3 dense "
                   "(batch, seqlen_k, heads_kv, head_dim) inputs take");
  if (forbidden == nullptr && t.rank != 4) forbidden = "it is not rank 4 (batch, seqlen_k, heads_kv, head_dim)";
  if (forbidden != nullptr)
    return invalid(prefix(v) + "has its keys contiguous (stride[" + std::to_string(keys) + "] == 1, " + last_stride +
                   ") but " + forbidden + "; only float8_e4m3 dense inputs (no cu_seqlens_k, no page_table) take " +
                   "that layout, any other " + name + " needs stride[" + std::to_string(last) + "] == 1");
  *keys_contiguous_out = true;
  return Status::Ok();
}

Status check_tma_compatible(const Arg& arg) {
  if (reinterpret_cast<std::uintptr_t>(arg.tensor->data) % kTmaAlignBytes != 0)
    return invalid(prefix(arg) + "data pointer is not 16-byte aligned; CUDA tensors need 16-byte aligned data (TMA)");
  return check_tma_strides(arg);
}

Status check_tma_strides(const Arg& arg) {
  const Tensor& t = *arg.tensor;
  const bool keys = keys_contiguous(t);
  const int contiguous = keys ? 1 : t.rank - 1;
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(t.dtype));
  for (int d = 0; d < t.rank; ++d) {
    // Reduced first so a huge stride of an extent-1 dimension cannot overflow.
    if (d != contiguous && (t.stride[d] % kTmaAlignBytes) * elem % kTmaAlignBytes != 0)
      return invalid(prefix(arg) + "dimension " + std::to_string(d) + " has stride " + std::to_string(t.stride[d]) +
                     " (elements of " + std::to_string(elem) + " bytes); CUDA tensors need every stride but the " +
                     (keys ? "keys' (dimension 1 of a keys-contiguous " + std::string(arg.name) + ")" : "last") +
                     " to be a multiple of 16 bytes (TMA)");
  }
  return Status::Ok();
}

}  // namespace hopattn::detail
