// Calls the installed library on host tensors. With a single key every query's softmax weight is 1,
// so out must equal v for that key and lse must equal the scaled score q.k: checkable without an
// attention implementation of our own.
#include <hopattn/hopattn.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int kSeqlenQ = 3, kHeads = 2, kHeadDim = 8;

int fail(const char* what) {
  std::fprintf(stderr, "hopattn_consumer: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> q(kSeqlenQ * kHeads * kHeadDim), k(kHeads * kHeadDim), v(kHeads * kHeadDim);
  for (std::vector<float>* t : {&q, &k, &v})
    for (float& x : *t) x = dist(rng);
  std::vector<float> out(q.size(), NAN), lse(kHeads * kSeqlenQ, NAN);

  using hopattn::Dtype;
  hopattn::FwdArgs args;
  args.q = hopattn::make_tensor(q.data(), Dtype::kFloat32, {1, kSeqlenQ, kHeads, kHeadDim});
  args.k = hopattn::make_tensor(k.data(), Dtype::kFloat32, {1, 1, kHeads, kHeadDim});
  args.v = hopattn::make_tensor(v.data(), Dtype::kFloat32, {1, 1, kHeads, kHeadDim});
  args.out = hopattn::make_tensor(out.data(), Dtype::kFloat32, {1, kSeqlenQ, kHeads, kHeadDim});
  args.lse = hopattn::make_tensor(lse.data(), Dtype::kFloat32, {1, kHeads, kSeqlenQ});

  const hopattn::Status status = hopattn::forward(args);
  if (!status.ok()) {
    std::fprintf(stderr, "hopattn_consumer: forward failed: %s\n", status.message().c_str());
    return 1;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (int i = 0; i < kSeqlenQ; ++i) {
    for (int h = 0; h < kHeads; ++h) {
      float score = 0.0f;
      for (int c = 0; c < kHeadDim; ++c) {
        const float o = out[(i * kHeads + h) * kHeadDim + c];
        if (!(std::fabs(o - v[h * kHeadDim + c]) <= 1e-5f)) return fail("out differs from v of the only key");
        score += q[(i * kHeads + h) * kHeadDim + c] * k[h * kHeadDim + c];
      }
      if (!(std::fabs(lse[h * kSeqlenQ + i] - scale * score) <= 1e-4f)) return fail("lse differs from scale * q.k");
    }
  }

  args.k.dtype = Dtype::kFloat16;
  const hopattn::Status bad = hopattn::forward(args);
  if (bad.code() != hopattn::StatusCode::kInvalidArgument || bad.message().rfind("k: ", 0) != 0)
    return fail("a dtype mismatch was not reported as an invalid k");

  std::printf("hopattn_consumer: ok (%s)\n", hopattn::device_description().c_str());
  return 0;
}
