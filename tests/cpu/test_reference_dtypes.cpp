// Input dtypes: bf16/fp16 inputs give the float64 math of their rounded values, correctly rounded to the
// output dtype; e4m3 inputs are multiplied by their descale factors and give bf16 output.
#include <gtest/gtest.h>

#include "test_reference_support.hpp"

namespace hopattn::test {
namespace {

// Expects every got[i] to be want[i] rounded to nearest in `dtype` (slack only for the ~1e-15
// difference between two float64 summation orders).
void expect_correctly_rounded(const std::vector<double>& got, const std::vector<double>& want, Dtype dtype) {
  ASSERT_EQ(got.size(), want.size());
  const int mantissa_bits = dtype == Dtype::kFloat16 ? 10 : 7;
  const int min_exponent = dtype == Dtype::kFloat16 ? -14 : -126;
  int failures = 0;
  for (std::size_t i = 0; i < got.size() && failures < 5; ++i) {
    int binade = min_exponent + 1;
    if (want[i] != 0.0) std::frexp(want[i], &binade);
    const double half_ulp = std::ldexp(1.0, std::max(binade - 1, min_exponent) - mantissa_bits - 1);
    const bool ok = std::fabs(got[i] - want[i]) <= half_ulp * (1.0 + 1e-9);
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << dtype_name(dtype) << " element " << i << ": got " << got[i] << ", exact " << want[i];
  }
}

TEST(ReferenceDtypes, SixteenBitInputsGiveCorrectlyRoundedFloat64Math) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int batch = 2, sq = 9, sk = 17, hq = 4, hkv = 2, d = 32;
  for (const Dtype dtype : {Dtype::kBFloat16, Dtype::kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor q(dtype, {batch, sq, hq, d}), k(dtype, {batch, sk, hkv, d}), v(dtype, {batch, sk, hkv, d});
    q.fill_random(seed, -2.0, 2.0);
    k.fill_random(seed + 1, -2.0, 2.0);
    v.fill_random(seed + 2);
    HostTensor out(dtype, {batch, sq, hq, d}), lse(Dtype::kFloat32, {batch, hq, sq});
    out.poison();
    lse.poison();
    FwdArgs args = forward_args(q, k, v, out, lse);
    args.causal = true;
    args.softcap = 2.0f;
    const Status status = hopattn::forward(args);
    ASSERT_TRUE(status.ok()) << status.message();

    MaskSpec mask;
    mask.scale = default_scale(d);
    mask.causal = true;
    mask.softcap = 2.0;
    std::vector<double> want_out, want_lse;
    naive_batch(Packing::dense(batch, sq, sk), q.to_double(), k.to_double(), v.to_double(), hq, hkv, d, mask,
                &want_out, &want_lse);
    expect_correctly_rounded(out.to_double(), want_out, dtype);
    EXPECT_ALL_CLOSE(dense_lse_to_packed(lse.to_double(), batch, hq, sq), want_lse, 1e-6, 1e-6);
  }
}

TEST(ReferenceDtypes, E4m3InputsUseDescalesPerKvHeadAndGiveBf16) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int batch = 2, sq = 7, sk = 33, hq = 4, hkv = 2, d = 16, group = hq / hkv;
  HostTensor q(Dtype::kFloat8E4M3, {batch, sq, hq, d}), k(Dtype::kFloat8E4M3, {batch, sk, hkv, d}),
      v(Dtype::kFloat8E4M3, {batch, sk, hkv, d});
  q.fill_random(seed, -3.0, 3.0);
  k.fill_random(seed + 1, -3.0, 3.0);
  v.fill_random(seed + 2, -3.0, 3.0);
  HostTensor q_descale(Dtype::kFloat32, {batch, hkv}), k_descale(Dtype::kFloat32, {batch, hkv}),
      v_descale(Dtype::kFloat32, {batch, hkv});
  q_descale.fill_random(seed + 3, 0.25, 2.0);
  k_descale.fill_random(seed + 4, 0.25, 2.0);
  v_descale.fill_random(seed + 5, 0.25, 2.0);

  for (const bool with_descales : {true, false}) {
    SCOPED_TRACE(with_descales ? "with descales" : "without descales");
    HostTensor out(Dtype::kBFloat16, {batch, sq, hq, d}), lse(Dtype::kFloat32, {batch, hq, sq});
    out.poison();
    lse.poison();
    FwdArgs args = forward_args(q, k, v, out, lse);
    args.window_left = 10;
    if (with_descales) {
      args.q_descale = q_descale.tensor();
      args.k_descale = k_descale.tensor();
      args.v_descale = v_descale.tensor();
    }
    const Status status = hopattn::forward(args);
    ASSERT_TRUE(status.ok()) << status.message();

    // Scale the decoded values by hand: q's factor belongs to the kv head its q head reads.
    std::vector<double> qs = q.to_double(), ks = k.to_double(), vs = v.to_double();
    if (with_descales) {
      for (std::size_t e = 0; e < qs.size(); ++e) {
        const std::size_t b = e / (static_cast<std::size_t>(sq) * hq * d), h = e / d % hq;
        qs[e] *= q_descale.get(static_cast<std::int64_t>(b * hkv + h / group));
      }
      for (std::size_t e = 0; e < ks.size(); ++e) {
        const std::size_t b = e / (static_cast<std::size_t>(sk) * hkv * d), h = e / d % hkv;
        ks[e] *= k_descale.get(static_cast<std::int64_t>(b * hkv + h));
        vs[e] *= v_descale.get(static_cast<std::int64_t>(b * hkv + h));
      }
    }
    MaskSpec mask;
    mask.scale = default_scale(d);
    mask.window_left = 10;
    std::vector<double> want_out, want_lse;
    naive_batch(Packing::dense(batch, sq, sk), qs, ks, vs, hq, hkv, d, mask, &want_out, &want_lse);
    expect_correctly_rounded(out.to_double(), want_out, Dtype::kBFloat16);
    EXPECT_ALL_CLOSE(dense_lse_to_packed(lse.to_double(), batch, hq, sq), want_lse, 1e-6, 1e-6);
  }
}

}  // namespace
}  // namespace hopattn::test
