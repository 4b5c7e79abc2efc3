// quantize_fp8(): every check of QuantizeArgs, then the CPU quantizer for host tensors or the GPU one
// for CUDA tensors. Messages name the argument and say what is allowed.
#include <cmath>
#include <cstdint>
#include <string>

#include "api/device.hpp"
#include "api/quantize_plan.hpp"
#include "api/validate_tensor.hpp"
#include "reference/fp8_quantize.hpp"
#ifdef HOPATTN_WITH_SM90
#include "sm90/quant/quantize.hpp"
#endif

namespace hopattn {
namespace {

Status invalid(const std::string& message) { return Status(StatusCode::kInvalidArgument, "quantize_fp8: " + message); }

std::string shape_string(const Tensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.rank && i < kMaxRank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + ")";
}

std::string device_string(const Tensor& t) {
  return t.device == DeviceType::kHost ? "host" : "cuda:" + std::to_string(t.device_index);
}

// Shape, dtype, layout and device of one tensor argument. expected_rank-many extents in `expected`.
Status check_tensor(const char* name, const Tensor& t, Dtype dtype, const std::int64_t* expected, int expected_rank,
                    const char* layout, const Tensor& device_model, bool contiguous_last) {
  const std::string n(name);
  if (t.data == nullptr) return invalid(n + " has no data (null pointer)");
  if (t.dtype != dtype) {
    return invalid(n + " must be " + dtype_name(dtype) + ", got " + dtype_name(t.dtype));
  }
  if (t.rank != expected_rank) {
    return invalid(n + " must have rank " + std::to_string(expected_rank) + " " + layout + ", got rank " +
                   std::to_string(t.rank));
  }
  for (int i = 0; i < expected_rank; ++i) {
    if (t.shape[i] != expected[i]) {
      std::string want = "(";
      for (int j = 0; j < expected_rank; ++j) want += (j ? ", " : "") + std::to_string(expected[j]);
      return invalid(n + " must have shape " + layout + " = " + want + "), got " + shape_string(t));
    }
    if (t.stride[i] < 0) return invalid(n + " has a negative stride in dimension " + std::to_string(i));
  }
  if (contiguous_last && t.stride[expected_rank - 1] != 1) {
    return invalid(n + " must be contiguous in its last dimension (stride 1), got stride " +
                   std::to_string(t.stride[expected_rank - 1]));
  }
  if (t.device != device_model.device || t.device_index != device_model.device_index) {
    return invalid(n + " is on " + device_string(t) + " but q is on " + device_string(device_model) +
                   "; all tensors must be on one device");
  }
  return Status::Ok();
}

Status check_input(const char* name, const Tensor& t) {
  const std::string n(name);
  if (t.data == nullptr) return invalid(n + " has no data (null pointer)");
  if (t.dtype != Dtype::kBFloat16 && t.dtype != Dtype::kFloat16) {
    return invalid(n + " must be bfloat16 or float16, got " + dtype_name(t.dtype));
  }
  if (t.rank != 4) {
    return invalid(n + " must have rank 4 (batch, seqlen, heads, d), got rank " + std::to_string(t.rank));
  }
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] < 1 || t.shape[i] > INT32_MAX) {
      return invalid(n + " has extent " + std::to_string(t.shape[i]) + " in dimension " + std::to_string(i) +
                     "; every extent must be in [1, 2^31 - 1], got shape " + shape_string(t));
    }
  }
  return Status::Ok();
}

// q, k, v: dtypes, ranks, matching batch/heads and q/k's d (v's may differ), one device.
Status check_inputs(const QuantizeArgs& a) {
  if (Status s = check_input("q", a.q); !s.ok()) return s;
  if (Status s = check_input("k", a.k); !s.ok()) return s;
  if (Status s = check_input("v", a.v); !s.ok()) return s;
  const std::int64_t q_shape[4] = {a.q.shape[0], a.q.shape[1], a.q.shape[2], a.q.shape[3]};
  const std::int64_t k_shape[4] = {a.q.shape[0], a.k.shape[1], a.k.shape[2], a.q.shape[3]};
  if (Status s = check_tensor("q", a.q, a.q.dtype, q_shape, 4, "(batch, seqlen_q, heads_q, d)", a.q, true); !s.ok()) {
    return s;
  }
  if (a.k.dtype != a.q.dtype) {
    return invalid(std::string("k must have q's dtype ") + dtype_name(a.q.dtype) + ", got " + dtype_name(a.k.dtype));
  }
  if (Status s = check_tensor("k", a.k, a.q.dtype, k_shape, 4, "(batch of q, seqlen_k, heads_kv, d of q)", a.q, true);
      !s.ok()) {
    return s;
  }
  if (a.v.dtype != a.q.dtype) {
    return invalid(std::string("v must have q's dtype ") + dtype_name(a.q.dtype) + ", got " + dtype_name(a.v.dtype));
  }
  // v may have a head dim of its own (DeepSeek's q/k 192 with v 128): it is quantized on its own and
  // never transformed.
  const std::int64_t v_shape[4] = {a.q.shape[0], a.k.shape[1], a.k.shape[2], a.v.shape[3]};
  return check_tensor("v", a.v, a.q.dtype, v_shape, 4, "(batch, seqlen_k, heads_kv) of k with its own d_v", a.q,
                      true);
}

Status check_options(const QuantizeArgs& a) {
  const int g = static_cast<int>(a.granularity);
  if (g < 0 || g > static_cast<int>(QuantGranularity::kPerBlock)) {
    return invalid("granularity " + std::to_string(g) + " is unknown; use kPerTensor, kPerHead or kPerBlock");
  }
  if (a.granularity == QuantGranularity::kPerBlock) {
    if (a.block_rows_q < 1) return invalid("block_rows_q must be >= 1, got " + std::to_string(a.block_rows_q));
    if (a.block_rows_kv < 1) return invalid("block_rows_kv must be >= 1, got " + std::to_string(a.block_rows_kv));
  }
  const std::int64_t d = a.q.shape[3];
  if (a.hadamard && (d % 16 != 0 || d > detail::kMaxHadamardDim)) {
    return invalid("hadamard (incoherent processing) needs head dim d a multiple of 16 from 16 to 256 (the "
                   "Walsh-Hadamard transform runs over blocks of the largest power of two dividing d), got d = " +
                   std::to_string(d));
  }
  return Status::Ok();
}

Status check_descale(const char* name, const Tensor& t, QuantGranularity g, const Tensor& in, int block_rows,
                     const Tensor& q) {
  const std::int64_t batch = in.shape[0], seqlen = in.shape[1], heads = in.shape[2];
  switch (g) {
    case QuantGranularity::kPerTensor: {
      const std::int64_t shape[1] = {1};
      return check_tensor(name, t, Dtype::kFloat32, shape, 1, "(1) for kPerTensor", q, false);
    }
    case QuantGranularity::kPerHead: {
      const std::int64_t shape[2] = {batch, heads};
      return check_tensor(name, t, Dtype::kFloat32, shape, 2, "(batch, heads) for kPerHead", q, false);
    }
    case QuantGranularity::kPerBlock: {
      const std::int64_t shape[3] = {batch, heads, scale_blocks(g, seqlen, block_rows)};
      return check_tensor(name, t, Dtype::kFloat32, shape, 3, "(batch, heads, ceil(seqlen / block_rows)) for kPerBlock",
                          q, false);
    }
  }
  return invalid(std::string(name) + ": unknown granularity");
}

// v8 may have its keys contiguous instead of its last dimension, under forward's rules for v
// (validate_tensor.hpp), so that it can go to forward() as it is; the detail messages name v8 already.
Status check_v8_layout(const QuantizeArgs& a) {
  const detail::Arg v8{"v8", &a.v8};
  bool keys_contiguous = false;
  Status s = detail::check_v_layout(v8, nullptr, &keys_contiguous);
  if (s.ok() && keys_contiguous && a.v8.device == DeviceType::kCuda) s = detail::check_tma_strides(v8);
  return s.ok() ? s : invalid(s.message());
}

Status check_outputs(const QuantizeArgs& a) {
  const Tensor* ins[3] = {&a.q, &a.k, &a.v};
  const Tensor* outs[3] = {&a.q8, &a.k8, &a.v8};
  const Tensor* descales[3] = {&a.q_descale, &a.k_descale, &a.v_descale};
  const char* out_names[3] = {"q8", "k8", "v8"};
  const char* descale_names[3] = {"q_descale", "k_descale", "v_descale"};
  const char* layouts[3] = {"of q", "of k", "of v"};
  for (int i = 0; i < 3; ++i) {
    const std::int64_t shape[4] = {ins[i]->shape[0], ins[i]->shape[1], ins[i]->shape[2], ins[i]->shape[3]};
    const bool contiguous_last = i != 2;  // v8: check_v8_layout
    if (Status s = check_tensor(out_names[i], *outs[i], Dtype::kFloat8E4M3, shape, 4, layouts[i], a.q, contiguous_last);
        !s.ok()) {
      return s;
    }
    if (i == 2) {
      if (Status s = check_v8_layout(a); !s.ok()) return s;
    }
    const int block_rows = i == 0 ? a.block_rows_q : a.block_rows_kv;
    if (Status s = check_descale(descale_names[i], *descales[i], a.granularity, *ins[i], block_rows, a.q); !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

detail::QuantizePlan make_plan(const QuantizeArgs& a) {
  detail::QuantizePlan plan;
  plan.granularity = a.granularity;
  plan.signs = detail::hadamard_signs(a.seed);
  plan.device = a.q.device;
  plan.device_index = a.q.device_index;
  const Tensor* ins[3] = {&a.q, &a.k, &a.v};
  const Tensor* outs[3] = {&a.q8, &a.k8, &a.v8};
  const Tensor* descales[3] = {&a.q_descale, &a.k_descale, &a.v_descale};
  for (int i = 0; i < 3; ++i) {
    detail::QuantizeJob& job = plan.jobs[i];
    job.in = ins[i];
    job.out = outs[i];
    job.descale = descales[i];
    job.batch = static_cast<int>(ins[i]->shape[0]);
    job.seqlen = static_cast<int>(ins[i]->shape[1]);
    job.heads = static_cast<int>(ins[i]->shape[2]);
    job.head_dim = static_cast<int>(ins[i]->shape[3]);
    job.block_rows = a.granularity != QuantGranularity::kPerBlock ? detail::kDefaultTileRows
                     : i == 0                                      ? a.block_rows_q
                                                                   : a.block_rows_kv;
    job.hadamard = a.hadamard && i < 2;  // v is never transformed: P V needs V itself
    // v per block: hopattn/quantize.hpp says why
    job.power_of_two_scales = i == 2 && a.granularity == QuantGranularity::kPerBlock;
    job.out_keys_contiguous = detail::keys_contiguous(*outs[i]);
    job.hadamard_norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(detail::hadamard_block(job.head_dim))));
  }
  return plan;
}

}  // namespace

const char* granularity_name(QuantGranularity granularity) {
  switch (granularity) {
    case QuantGranularity::kPerTensor: return "per-tensor";
    case QuantGranularity::kPerHead: return "per-head";
    case QuantGranularity::kPerBlock: return "per-block";
  }
  return "unknown";
}

std::int64_t scale_blocks(QuantGranularity granularity, std::int64_t seqlen, int block_rows) {
  if (granularity != QuantGranularity::kPerBlock || block_rows < 1) return 1;
  return (seqlen + block_rows - 1) / block_rows;
}

namespace detail {

HadamardSigns hadamard_signs(std::uint64_t seed) {
  HadamardSigns signs;
  std::uint64_t state = seed;
  for (std::uint64_t& word : signs.bits) {  // splitmix64
    state += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    word = z ^ (z >> 31);
  }
  return signs;
}

}  // namespace detail

Status quantize_fp8(const QuantizeArgs& args) {
  if (Status s = check_inputs(args); !s.ok()) return s;
  if (Status s = check_options(args); !s.ok()) return s;
  if (Status s = check_outputs(args); !s.ok()) return s;
  const detail::QuantizePlan plan = make_plan(args);
  if (plan.device == DeviceType::kHost) return reference::quantize_fp8(plan);
  if (Status s = detail::require_hopper(plan.device_index); !s.ok()) return s;
#ifdef HOPATTN_WITH_SM90
  return sm90::quantize_fp8(plan, args.stream);
#else
  return Status(StatusCode::kUnsupported, "quantize_fp8: this build has no sm_90a kernels (HOPATTN_SM90=OFF)");
#endif
}

}  // namespace hopattn
