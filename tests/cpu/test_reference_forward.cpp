// Reference forward vs an independent materialized softmax: random shapes, every mask, softcap, GQA.
#include <gtest/gtest.h>

#include "test_reference_support.hpp"

namespace hopattn::test {
namespace {

struct Dims {
  int batch, sq, sk, hq, hkv, d;
  int dv = 0;  // v's head dim; 0: d
  int v_dim() const { return dv > 0 ? dv : d; }
};

std::string describe(const Dims& s) {
  return "batch=" + std::to_string(s.batch) + " sq=" + std::to_string(s.sq) + " sk=" + std::to_string(s.sk) +
         " hq=" + std::to_string(s.hq) + " hkv=" + std::to_string(s.hkv) + " d=" + std::to_string(s.d) +
         " dv=" + std::to_string(s.v_dim());
}

struct Inputs {
  HostTensor q, k, v;
};

Inputs random_inputs(const Dims& s, std::uint64_t seed) {
  Inputs in{HostTensor(Dtype::kFloat32, {s.batch, s.sq, s.hq, s.d}),
            HostTensor(Dtype::kFloat32, {s.batch, s.sk, s.hkv, s.d}),
            HostTensor(Dtype::kFloat32, {s.batch, s.sk, s.hkv, s.v_dim()})};
  in.q.fill_random(seed, -2.0, 2.0);  // wide enough that the softmax is far from uniform
  in.k.fill_random(seed + 1, -2.0, 2.0);
  in.v.fill_random(seed + 2);
  return in;
}

// Packed out (batch * sq, hq, dv) and lse (hq, batch * sq).
struct Result {
  std::vector<double> out, lse;
};

// Public forward on dense float32 tensors with options' mask fields; out and lse poisoned first.
Result run_dense(const Dims& s, const Inputs& in, FwdArgs options) {
  HostTensor out(Dtype::kFloat32, {s.batch, s.sq, s.hq, s.v_dim()});
  HostTensor lse(Dtype::kFloat32, {s.batch, s.hq, s.sq});
  out.poison();
  lse.poison();
  options.q = in.q.tensor();
  options.k = in.k.tensor();
  options.v = in.v.tensor();
  options.out = out.tensor();
  options.lse = lse.tensor();
  const Status status = hopattn::forward(options);
  EXPECT_TRUE(status.ok()) << status.message();
  return {out.to_double(), dense_lse_to_packed(lse.to_double(), s.batch, s.hq, s.sq)};
}

MaskSpec mask_of(const FwdArgs& options, int d) {
  MaskSpec m;
  m.scale = options.softmax_scale ? *options.softmax_scale : default_scale(d);
  m.causal = options.causal;
  m.window_left = options.window_left;
  m.window_right = options.window_right;
  m.attention_chunk = options.attention_chunk;
  m.softcap = options.softcap;
  if (options.learnable_sink) m.sinks = read_tensor(*options.learnable_sink);
  return m;
}

Result naive_dense(const Dims& s, const Inputs& in, const FwdArgs& options) {
  Result r;
  naive_batch(Packing::dense(s.batch, s.sq, s.sk), in.q.to_double(), in.k.to_double(), in.v.to_double(), s.hq,
              s.hkv, s.d, mask_of(options, s.d), &r.out, &r.lse, s.v_dim());
  return r;
}

// float32 outputs of float64 math: a few float32 ulps.
void expect_matches_naive(const Dims& s, const FwdArgs& options, std::uint64_t seed) {
  const Inputs in = random_inputs(s, seed);
  const Result got = run_dense(s, in, options);
  const Result want = naive_dense(s, in, options);
  EXPECT_ALL_CLOSE(got.out, want.out, 1e-6, 1e-6);
  EXPECT_ALL_CLOSE(got.lse, want.lse, 1e-6, 1e-6);
}

TEST(ReferenceForward, RandomShapesMatchMaterializedSoftmax) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int lengths[] = {1, 7, 33, 65};
  const int dims[] = {1, 8, 33, 64};
  const int heads[][2] = {{1, 1}, {2, 1}, {3, 3}, {4, 2}};
  auto pick = [&](const auto& options) { return options[rng() % std::size(options)]; };
  for (int trial = 0; trial < 16; ++trial) {
    const auto h = pick(heads);
    // v's head dim: q's, or (every other trial) one of its own (FA3's headdim_v), smaller or larger.
    const Dims s{1 + static_cast<int>(rng() % 3), pick(lengths), pick(lengths), h[0], h[1], pick(dims),
                 trial % 2 ? pick(dims) + 3 : 0};
    SCOPED_TRACE(describe(s));
    expect_matches_naive(s, FwdArgs{}, rng());
  }
  // The corner of everything at size 1.
  expect_matches_naive(Dims{1, 1, 1, 1, 1, 1}, FwdArgs{}, rng());
}

struct MaskCase {
  const char* name;
  int sq, sk;
  bool causal;
  int window_left, window_right;
  int chunk = 0;
};

TEST(ReferenceForward, EveryMaskMatchesMaterializedSoftmax) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const MaskCase cases[] = {
      {"causal sq<sk", 7, 33, true, -1, -1},      {"causal sq>sk", 33, 7, true, -1, -1},
      {"causal sq=sk", 33, 33, true, -1, -1},     {"window left only", 33, 33, false, 5, -1},
      {"window right only", 17, 33, false, -1, 3}, {"window both", 33, 17, false, 4, 2},
      {"causal + window left", 33, 65, true, 8, -1}, {"window 0,0 (diagonal only)", 9, 9, false, 0, 0},
      {"chunks of 5", 33, 33, false, -1, -1, 5},      {"chunks of 8 + causal sq<sk", 17, 40, true, -1, -1, 8},
      {"chunks of 4 sq>sk (rows before key 0)", 33, 10, false, -1, -1, 4},
      {"chunks of 1 (diagonal only)", 9, 12, false, -1, -1, 1},
      {"chunks of 7 + window (3, 2)", 30, 30, false, 3, 2, 7},
      {"chunk past every key, sq>sk", 20, 8, false, -1, -1, 1000},
  };
  for (const MaskCase& c : cases) {
    SCOPED_TRACE(c.name);
    FwdArgs options;
    options.causal = c.causal;
    options.window_left = c.window_left;
    options.window_right = c.window_right;
    options.attention_chunk = c.chunk;
    expect_matches_naive(Dims{2, c.sq, c.sk, 2, 1, 16}, options, seed + c.sq * 100 + c.sk);
  }
}

TEST(ReferenceForward, RowsThatSeeNoKeyGiveZeroOutputAndMinusInfinityLse) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  // causal with sq > sk: query i sees keys j <= i - (sq - sk), so the first sq - sk rows see nothing.
  const Dims s{2, 9, 4, 2, 2, 8};
  FwdArgs options;
  options.causal = true;
  const Result got = run_dense(s, random_inputs(s, seed), options);
  const int total_q = s.batch * s.sq;
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.sq; ++i)
      for (int h = 0; h < s.hq; ++h) {
        const double lse = got.lse[static_cast<std::size_t>(h) * total_q + b * s.sq + i];
        const bool empty = i < s.sq - s.sk;
        if (empty) {
          EXPECT_TRUE(std::isinf(lse) && lse < 0) << "b=" << b << " i=" << i << " lse=" << lse;
        } else {
          EXPECT_TRUE(std::isfinite(lse)) << "b=" << b << " i=" << i << " lse=" << lse;
        }
        for (int c = 0; c < s.d; ++c) {
          const double o = got.out[((static_cast<std::size_t>(b) * s.sq + i) * s.hq + h) * s.d + c];
          if (empty) EXPECT_EQ(o, 0.0) << "b=" << b << " i=" << i;
          else EXPECT_TRUE(std::isfinite(o));
        }
      }
}

TEST(ReferenceForward, SoftcapAndExplicitScaleMatchMaterializedSoftmax) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  FwdArgs options;
  options.softcap = 0.7f;  // small cap so tanh is far from linear
  options.softmax_scale = 0.9f;
  expect_matches_naive(Dims{2, 13, 21, 4, 2, 33}, options, seed);
  options.causal = true;
  options.window_left = 6;
  expect_matches_naive(Dims{1, 21, 13, 3, 1, 8}, options, seed + 1);
}

// v with a head dim of its own (FA3's headdim_v) is exact: out's columns depend on v's alone, so a
// narrower v gives the first columns of a wider one's out, and a wider v equals q and k padded with
// zero columns (their scores unchanged).
TEST(ReferenceForward, VHeadDimOfItsOwnIsExact) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  FwdArgs options;
  options.causal = true;
  options.softmax_scale = 0.3f;  // the default depends on d, which the padding below changes
  const Dims narrow{2, 9, 13, 4, 2, 40, 24}, wide{2, 9, 13, 4, 2, 40, 40};
  const Inputs wide_in = random_inputs(wide, seed);
  Inputs narrow_in{wide_in.q, wide_in.k, HostTensor(Dtype::kFloat32, {2, 13, 2, 24})};
  for (std::int64_t e = 0; e < narrow_in.v.numel(); ++e) narrow_in.v.set(e, wide_in.v.get(e / 24 * 40 + e % 24));
  const Result got = run_dense(narrow, narrow_in, options), want = run_dense(wide, wide_in, options);
  for (std::size_t e = 0; e < got.out.size(); ++e) ASSERT_EQ(got.out[e], want.out[e / 24 * 40 + e % 24]) << e;
  EXPECT_EQ(got.lse, want.lse);

  const Dims small_qk{2, 9, 13, 4, 2, 16, 40}, padded_qk{2, 9, 13, 4, 2, 40, 40};
  Inputs small_in{HostTensor(Dtype::kFloat32, {2, 9, 4, 16}), HostTensor(Dtype::kFloat32, {2, 13, 2, 16}),
                  wide_in.v};
  Inputs padded_in{HostTensor(Dtype::kFloat32, {2, 9, 4, 40}), HostTensor(Dtype::kFloat32, {2, 13, 2, 40}),
                   wide_in.v};
  for (auto [small, padded] : {std::pair{&small_in.q, &padded_in.q}, std::pair{&small_in.k, &padded_in.k}}) {
    small->fill_random(seed + 7, -2.0, 2.0);
    for (std::int64_t e = 0; e < padded->numel(); ++e)
      padded->set(e, e % 40 < 16 ? small->get(e / 40 * 16 + e % 40) : 0.0);
  }
  const Result got_wide_v = run_dense(small_qk, small_in, options);
  const Result want_padded = run_dense(padded_qk, padded_in, options);
  EXPECT_EQ(got_wide_v.out, want_padded.out);
  EXPECT_EQ(got_wide_v.lse, want_padded.lse);
}

// qv (FA3's; MLA decoding): the scores take qv_i . v_j beside q_i . k_j, which is attention with q and qv
// concatenated over k and v concatenated (same summation order: bit for bit); the default scale is
// then 1/sqrt(d + d_v).
TEST(ReferenceForward, QvEqualsConcatenatedQueriesAndKeys) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int d = 12, dv = 20;
  const Dims with_qv{2, 7, 11, 4, 2, d, dv}, joined{2, 7, 11, 4, 2, d + dv, dv};
  const Inputs in = random_inputs(with_qv, seed);
  HostTensor qv(Dtype::kFloat32, {2, 7, 4, dv});
  qv.fill_random(seed + 9, -2.0, 2.0);
  Inputs cat{HostTensor(Dtype::kFloat32, {2, 7, 4, d + dv}), HostTensor(Dtype::kFloat32, {2, 11, 2, d + dv}), in.v};
  for (std::int64_t e = 0; e < cat.q.numel(); ++e) {
    const std::int64_t row = e / (d + dv), c = e % (d + dv);
    cat.q.set(e, c < d ? in.q.get(row * d + c) : qv.get(row * dv + c - d));
  }
  for (std::int64_t e = 0; e < cat.k.numel(); ++e) {
    const std::int64_t row = e / (d + dv), c = e % (d + dv);
    cat.k.set(e, c < d ? in.k.get(row * d + c) : in.v.get(row * dv + c - d));
  }
  FwdArgs options;
  options.causal = true;
  options.qv = qv.tensor();
  FwdArgs joined_options;  // its default scale is 1/sqrt(d + dv) already
  joined_options.causal = true;
  const Result got = run_dense(with_qv, in, options), want = run_dense(joined, cat, joined_options);
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.lse, want.lse);
  options.softmax_scale = joined_options.softmax_scale = 0.4f;  // an explicit scale is taken as given
  EXPECT_EQ(run_dense(with_qv, in, options).out, run_dense(joined, cat, joined_options).out);
}

TEST(ReferenceForward, GqaEqualsRepeatedKvHeads) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (const int hkv : {1, 2}) {  // MQA and GQA
    const Dims gqa{2, 7, 11, 6, hkv, 16};
    const Dims mha{2, 7, 11, 6, 6, 16};
    const Inputs in = random_inputs(gqa, seed + hkv);
    Inputs repeated{HostTensor(Dtype::kFloat32, {2, 7, 6, 16}), HostTensor(Dtype::kFloat32, {2, 11, 6, 16}),
                    HostTensor(Dtype::kFloat32, {2, 11, 6, 16})};
    repeated.q.from_double(in.q.to_double());
    const int group = 6 / hkv;
    for (std::int64_t e = 0; e < repeated.k.numel(); ++e) {
      const std::int64_t c = e % 16, h = e / 16 % 6, row = e / (16 * 6);
      const std::int64_t source = (row * hkv + h / group) * 16 + c;
      repeated.k.set(e, in.k.get(source));
      repeated.v.set(e, in.v.get(source));
    }
    FwdArgs options;
    options.causal = true;
    const Result got = run_dense(gqa, in, options);
    const Result want = run_dense(mha, repeated, options);
    EXPECT_EQ(got.out, want.out) << "hkv=" << hkv;
    EXPECT_EQ(got.lse, want.lse) << "hkv=" << hkv;
  }
}

// Random sinks in [-3, 3) (about the scores' range), the last head's -inf (no sink).
HostTensor random_sinks(int heads, std::uint64_t seed) {
  HostTensor sinks(Dtype::kFloat32, {heads});
  sinks.fill_random(seed, -3.0, 3.0);
  if (heads > 1) static_cast<float*>(sinks.data())[heads - 1] = -std::numeric_limits<float>::infinity();
  return sinks;
}

TEST(ReferenceForward, LearnableSinksMatchMaterializedSoftmax) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  struct SinkCase {
    const char* name;
    Dims dims;
    bool causal;
    int window_left;
    float softcap;
  };
  const SinkCase cases[] = {{"plain", {2, 13, 21, 4, 2, 33}, false, -1, 0.0f},
                            {"causal sq>sk (rows without keys)", {1, 21, 13, 3, 1, 8}, true, -1, 0.0f},
                            {"window + softcap", {2, 17, 17, 2, 2, 16}, true, 3, 0.7f},
                            {"one head", {1, 5, 9, 1, 1, 8}, false, -1, 0.0f}};
  for (const SinkCase& c : cases) {
    SCOPED_TRACE(c.name);
    const HostTensor sinks = random_sinks(c.dims.hq, seed + 7);
    FwdArgs options;
    options.causal = c.causal;
    options.window_left = c.window_left;
    options.softcap = c.softcap;
    options.learnable_sink = sinks.tensor();
    expect_matches_naive(c.dims, options, seed);
  }
}

TEST(ReferenceForward, RowsThatSeeNoKeyGiveZeroOutputAndTheSinkAsLse) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const Dims s{1, 9, 4, 2, 1, 8};  // causal, sq > sk: the first 5 rows see no key
  HostTensor sinks(Dtype::kFloat32, {2});
  sinks.fill_random(seed, -3.0, 3.0);
  FwdArgs options;
  options.causal = true;
  options.learnable_sink = sinks.tensor();
  const Result got = run_dense(s, random_inputs(s, seed + 1), options);
  const std::vector<double> sink = sinks.to_double();
  for (int i = 0; i < s.sq - s.sk; ++i)
    for (int h = 0; h < s.hq; ++h) {
      EXPECT_EQ(got.lse[static_cast<std::size_t>(h) * s.sq + i], sink[h]) << "i=" << i << " h=" << h;
      for (int c = 0; c < s.d; ++c) EXPECT_EQ(got.out[(static_cast<std::size_t>(i) * s.hq + h) * s.d + c], 0.0);
    }
}

TEST(ReferenceForward, LseIsOptional) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const Dims s{1, 5, 9, 2, 1, 8};
  const Inputs in = random_inputs(s, seed);
  HostTensor out(Dtype::kFloat32, {1, 5, 2, 8});
  out.poison();
  FwdArgs args;
  args.q = in.q.tensor();
  args.k = in.k.tensor();
  args.v = in.v.tensor();
  args.out = out.tensor();
  const Status status = hopattn::forward(args);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_ALL_CLOSE(out.to_double(), naive_dense(s, in, args).out, 1e-6, 1e-6);
}

}  // namespace
}  // namespace hopattn::test
