#include "gpu/forward_case.cuh"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "gpu/gpu_reference.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

constexpr int kMaxSeqlen = 4500;
constexpr int kRowPad = 8;  // elements added to each row by Layout::kPaddedRows (16 bytes in 16-bit types)

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kHeadMajor: return "head-major";
    case Layout::kPaddedRows: return "padded-rows";
  }
  return "?";
}

// Strides of a (b, s, h, d) view stored in `layout`.
void layout_strides(Layout layout, int s, int h, int d, std::int64_t (&stride)[4]) {
  switch (layout) {
    case Layout::kContiguous:
      stride[0] = std::int64_t(s) * h * d, stride[1] = std::int64_t(h) * d, stride[2] = d, stride[3] = 1;
      return;
    case Layout::kHeadMajor:
      stride[0] = std::int64_t(h) * s * d, stride[1] = d, stride[2] = std::int64_t(s) * d, stride[3] = 1;
      return;
    case Layout::kPaddedRows:
      stride[0] = std::int64_t(s) * h * (d + kRowPad), stride[1] = std::int64_t(h) * (d + kRowPad);
      stride[2] = d + kRowPad, stride[3] = 1;
      return;
  }
}

// A poisoned/filled allocation together with the view the test hands to forward().
struct ViewedBuffer {
  DeviceBuffer storage;
  std::int64_t storage_elements = 0;
  Tensor view;
};

ViewedBuffer make_viewed(Dtype dtype, const std::int64_t (&shape)[4], const std::int64_t (&stride)[4]) {
  ViewedBuffer b;
  b.view = strided_tensor(nullptr, dtype, shape, stride);
  b.storage_elements = storage_elements(b.view);
  b.storage = DeviceBuffer(b.storage_elements * dtype_size(dtype));
  b.view.data = b.storage.data();
  return b;
}

// "(b, i, h, c) out=.. ref=..": where the largest error sits, to tell a mask bug from a rounding one.
std::string locate_worst(const ForwardCase& c, const Tensor& out, const float* ref, std::int64_t worst) {
  if (worst < 0) return "";
  const std::int64_t ch = worst % c.head_dim, h = worst / c.head_dim % c.heads_q;
  const std::int64_t i = worst / (std::int64_t(c.head_dim) * c.heads_q) % c.seqlen_q;
  const std::int64_t b = worst / (std::int64_t(c.head_dim) * c.heads_q * c.seqlen_q);
  const std::int64_t offset = b * out.stride[0] + i * out.stride[1] + h * out.stride[2] + ch * out.stride[3];
  const float o = element_as_float(static_cast<const char*>(out.data) + offset * dtype_size(out.dtype), out.dtype);
  const float r = element_as_float(ref + worst, Dtype::kFloat32);
  std::ostringstream s;
  s << " at (b " << b << ", q " << i << ", head " << h << ", col " << ch << "): out " << o << " ref " << r;
  return s.str();
}

}  // namespace

std::string ForwardCase::describe() const {
  std::ostringstream s;
  s << AttentionProblem::describe() << (with_lse ? " lse" : " no-lse") << " amplitude " << amplitude << " "
    << layout_name(layout) << (packed_qkv ? " packed-qkv" : "");
  if (num_splits != 0) s << " num_splits " << num_splits;
  return s.str();
}

bool ForwardCase::in_first_supported_set() const {
  return (dtype == Dtype::kBFloat16 || dtype == Dtype::kFloat16) &&
         head_dim % 8 == 0 && head_dim >= 8 && head_dim <= 256 && window_left < 0 && window_right < 0 &&
         softcap == 0.0f;
}

ForwardCase random_case(std::mt19937_64& rng, double max_work, bool extra_features, int forced_seqlen_q,
                        int forced_seqlen_k) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const auto seqlen = [&] {
    if (chance(0.25)) return kEdgeSeqlens[pick(0, static_cast<int>(std::size(kEdgeSeqlens)) - 1)];
    const double x = std::exp(std::uniform_real_distribution<double>(0.0, std::log(kMaxSeqlen))(rng));
    return std::clamp(static_cast<int>(std::lround(x)), 1, kMaxSeqlen);
  };
  constexpr int kRatios[] = {1, 2, 4, 8};

  ForwardCase c;
  c.batch = pick(1, 4);
  c.heads_kv = pick(1, 4);
  c.heads_q = c.heads_kv * kRatios[pick(0, 3)];
  c.head_dim = draw_head_dim(rng, 256);
  c.dtype = chance(0.5) ? Dtype::kBFloat16 : Dtype::kFloat16;
  c.seqlen_q = forced_seqlen_q > 0 ? forced_seqlen_q : seqlen();
  c.seqlen_k = forced_seqlen_k > 0 ? forced_seqlen_k : chance(0.25) ? c.seqlen_q : seqlen();
  c.causal = chance(0.5);
  if (chance(0.25)) c.softmax_scale = std::uniform_real_distribution<float>(0.02f, 0.5f)(rng);
  c.with_lse = chance(0.85);
  c.amplitude = std::uniform_real_distribution<float>(0.5f, 3.0f)(rng);
  const int layout = pick(0, 9);
  c.layout = layout < 7 ? Layout::kContiguous : layout < 9 ? Layout::kHeadMajor : Layout::kPaddedRows;
  if (extra_features && chance(0.2)) {
    if (chance(0.5)) c.softcap = std::uniform_real_distribution<float>(5.0f, 50.0f)(rng);
    if (chance(0.6)) {
      c.window_left = chance(0.8) ? pick(0, c.seqlen_k) : -1;
      c.window_right = c.causal ? 0 : pick(0, 64);
    }
    if (chance(0.3)) c.attention_chunk = pick(1, c.seqlen_k + 64);
  }

  // Shrink batch, then the GQA ratio, then heads_kv, then the longer drawn (not forced) sequence until
  // the work fits.
  while (c.work() > max_work) {
    if (!shrink_batch_or_heads(c)) {
      const bool shrink_q = forced_seqlen_q <= 0 && (c.seqlen_q >= c.seqlen_k || forced_seqlen_k > 0);
      if (!shrink_q && forced_seqlen_k > 0) break;  // both forced: accept the work
      int& longer = shrink_q ? c.seqlen_q : c.seqlen_k;
      longer = std::max(1, longer * 3 / 4);
    }
  }
  c.packed_qkv = c.seqlen_q == c.seqlen_k && chance(0.3);
  return c;
}

CaseResult run_forward_case(const ForwardCase& c, const KernelOptions& options, std::uint64_t seed) {
  CaseResult result;
  const auto fail = [&](const std::string& why) {
    result.kind = CaseResult::kFailed;
    result.detail = why;
    return result;
  };
  try {
    const int b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
    if (c.packed_qkv && sq != sk) throw std::invalid_argument("packed_qkv needs seqlen_q == seqlen_k");

    // Inputs: fresh normal data in the case's layout (or one packed qkv buffer).
    ViewedBuffer q, k, v, packed;
    if (c.packed_qkv) {
      const int heads = hq + 2 * hkv;
      const std::int64_t stride[4] = {std::int64_t(sk) * heads * d, std::int64_t(heads) * d, d, 1};
      packed = make_viewed(c.dtype, {b, sk, heads, d}, stride);
      fill_normal(packed.storage.data(), c.dtype, packed.storage_elements, splitmix64(seed ^ 1), c.amplitude);
      char* base = packed.storage.as<char>();
      const std::size_t elem = dtype_size(c.dtype);
      q.view = strided_tensor(base, c.dtype, {b, sq, hq, d}, stride);
      k.view = strided_tensor(base + std::size_t(hq) * d * elem, c.dtype, {b, sk, hkv, d}, stride);
      v.view = strided_tensor(base + std::size_t(hq + hkv) * d * elem, c.dtype, {b, sk, hkv, d}, stride);
    } else {
      std::int64_t stride_q[4], stride_kv[4];
      layout_strides(c.layout, sq, hq, d, stride_q);
      layout_strides(c.layout, sk, hkv, d, stride_kv);
      q = make_viewed(c.dtype, {b, sq, hq, d}, stride_q);
      k = make_viewed(c.dtype, {b, sk, hkv, d}, stride_kv);
      v = make_viewed(c.dtype, {b, sk, hkv, d}, stride_kv);
      fill_normal(q.storage.data(), c.dtype, q.storage_elements, splitmix64(seed ^ 1), c.amplitude);
      fill_normal(k.storage.data(), c.dtype, k.storage_elements, splitmix64(seed ^ 2));
      fill_normal(v.storage.data(), c.dtype, v.storage_elements, splitmix64(seed ^ 3));
    }

    // Outputs, poisoned with NaN over their whole storage (padding included).
    std::int64_t stride_out[4];
    layout_strides(c.packed_qkv ? Layout::kContiguous : c.layout, sq, hq, d, stride_out);
    ViewedBuffer out = make_viewed(c.dtype, {b, sq, hq, d}, stride_out);
    poison_nan(out.storage.data(), c.dtype, out.storage_elements);
    const std::int64_t lse_row = c.layout == Layout::kPaddedRows ? (sq + 3) / 4 * 4 + 4 : sq;
    ViewedBuffer lse;
    if (c.with_lse) {
      // The LSE is (b, hq, sq); a leading unit dimension makes it a rank-4 view for the helpers.
      lse = make_viewed(Dtype::kFloat32, {1, b, hq, sq}, {0, std::int64_t(hq) * lse_row, lse_row, 1});
      poison_nan(lse.storage.data(), Dtype::kFloat32, lse.storage_elements);
    }

    FwdArgs args;
    args.q = q.view, args.k = k.view, args.v = v.view, args.out = out.view;
    if (c.with_lse) {
      Tensor lse3 = lse.view;
      lse3.rank = 3;
      for (int i = 0; i < 3; ++i) lse3.shape[i] = lse.view.shape[i + 1], lse3.stride[i] = lse.view.stride[i + 1];
      args.lse = lse3;
    }
    args.softmax_scale = c.softmax_scale;
    set_mask(args, c);
    args.options = options;
    args.num_splits = c.num_splits;
    const Status status = forward(args);
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
    if (status.code() == StatusCode::kUnsupported) {
      result.kind = CaseResult::kUnsupported;
      result.detail = status.message();
      return result;
    }
    if (!status.ok()) return fail("forward returned code " + std::to_string(int(status.code())) + ": " + status.message());

    // The float32 reference on the same (already rounded) inputs, exact and naive.
    const std::int64_t out_numel = out.view.numel();
    DeviceBuffer ref(out_numel * sizeof(float)), naive(out_numel * sizeof(float));
    DeviceBuffer lse_ref(std::int64_t(b) * hq * sq * sizeof(float));
    GpuReferenceArgs ra;
    ra.q = q.view, ra.k = k.view, ra.v = v.view;
    ra.softmax_scale = c.resolved_scale();
    set_mask(ra, c);
    ra.out = ref.as<float>(), ra.out_naive = naive.as<float>(), ra.lse = lse_ref.as<float>();
    if (Status s = gpu_reference_forward(ra); !s.ok()) return fail("reference: " + s.message());
    HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());

    std::ostringstream problems;
    const OutputDiff diff = output_diff(out.view, ref.as<float>(), naive.as<float>());
    const float bound = output_bound(diff, out.view.dtype, ref.as<float>());
    if (diff.nan_count) problems << diff.nan_count << " NaN in out; ";
    if (!(diff.max_err <= bound))
      problems << "max|out-ref| " << diff.max_err << " > 2*max|naive-ref| + 1e-5 + half a rounding step = " << bound
               << locate_worst(c, out.view, ref.as<float>(), diff.worst) << "; ";
    const std::int64_t written = count_unpoisoned(out.storage.data(), c.dtype, out.storage_elements);
    if (written != out_numel)
      problems << "out: " << written << " elements of its storage changed, expected the " << out_numel
               << " of the view; ";
    if (c.with_lse) {
      const LseDiff ld = lse_diff(lse.view, lse_ref.as<float>());
      if (ld.nan_count) problems << ld.nan_count << " NaN in lse; ";
      if (ld.inf_mismatch) problems << ld.inf_mismatch << " lse rows disagree on -inf; ";
      if (!(ld.max_err <= 1e-3f)) problems << "max|lse-ref| " << ld.max_err << " > 1e-3; ";
      const std::int64_t lse_written = count_unpoisoned(lse.storage.data(), Dtype::kFloat32, lse.storage_elements);
      if (lse_written != lse.view.numel())
        problems << "lse: " << lse_written << " elements of its storage changed, expected " << lse.view.numel()
                 << "; ";
    }
    if (!problems.str().empty()) return fail(problems.str());
    result.kind = CaseResult::kPassed;
    return result;
  } catch (const std::exception& e) {
    return fail(std::string("exception: ") + e.what());
  }
}

}  // namespace hopattn::test
