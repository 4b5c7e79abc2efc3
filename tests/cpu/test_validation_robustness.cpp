// Random malformed calls: validation must answer every one (no crash, no UB under the sanitizers)
// and every error must start with the name of a real argument.
#include <climits>
#include <cmath>
#include <limits>
#include <set>

#include "test_validation_fixture.hpp"

namespace hopattn::test {
namespace {

const std::set<std::string> kArgumentNames = {
    "q",          "k",          "v",         "out",       "lse",           "cu_seqlens_q", "cu_seqlens_k",
    "seqused_k",  "seqused_q",  "page_table", "q_descale", "k_descale", "v_descale",     "max_seqlen_q", "max_seqlen_k",
    "softmax_scale", "softcap", "window_left", "window_right", "causal",   "num_splits", "learnable_sink", "qv"};

std::int64_t pick(std::mt19937_64& rng, std::initializer_list<std::int64_t> values) {
  return *(values.begin() + std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(rng));
}

// Breaks one field of one of the floating-point tensors (int32 tensors are read on the host, so their
// shapes must stay inside their buffers: a view larger than its memory is the caller's bug).
void break_tensor(std::mt19937_64& rng, Tensor* t) {
  const int dim = static_cast<int>(pick(rng, {0, 1, 2, 3}));
  switch (pick(rng, {0, 1, 2, 3, 4, 5, 6})) {
    case 0: t->rank = static_cast<int>(pick(rng, {INT_MIN, -1, 0, 1, 2, 3, 5, INT_MAX})); break;
    case 1: t->shape[dim] = pick(rng, {-1, 0, 1, 3, INT32_MAX, std::int64_t{INT32_MAX} + 1, INT64_MAX, INT64_MIN}); break;
    case 2: t->stride[dim] = pick(rng, {-1, 0, 2, 7, INT64_MAX / 3, INT64_MAX, INT64_MIN}); break;
    case 3: t->dtype = static_cast<Dtype>(pick(rng, {-1, 0, 1, 2, 3, 4, 5, 99})); break;
    case 4: t->device = static_cast<DeviceType>(pick(rng, {-1, 0, 1, 2})); break;
    case 5: t->device_index = static_cast<int>(pick(rng, {INT_MIN, -1, 1, INT_MAX})); break;
    case 6: t->data = pick(rng, {0, 1}) ? nullptr : static_cast<char*>(t->data) + 1; break;
  }
}

void break_scalar(std::mt19937_64& rng, FwdArgs* a) {
  const float weirds[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), -1e30f};
  const float weird = weirds[pick(rng, {0, 1, 2, 3})];
  const int big = static_cast<int>(pick(rng, {INT_MIN, -2, -1, 0, 1, INT_MAX}));
  switch (pick(rng, {0, 1, 2, 3, 4, 5, 6, 7})) {
    case 0: a->softmax_scale = weird; break;
    case 1: a->softcap = weird; break;
    case 2: a->window_left = big; break;
    case 3: a->window_right = big; break;
    case 4: a->causal = !a->causal; break;
    case 5: a->max_seqlen_q = big; break;
    case 6: a->max_seqlen_k = big; break;
    case 7: a->num_splits = big; break;
  }
}

void expect_answered(const Status& s, int round) {
  if (s.ok()) return;
  ASSERT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnsupported)
      << "round " << round << ": " << s.message();
  const std::string name = s.message().substr(0, s.message().find(':'));
  ASSERT_TRUE(kArgumentNames.count(name)) << "round " << round << " names no argument: " << s.message();
}

TEST(ValidationRobustness, RandomlyBrokenCallsAreAnswered) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  int rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    VarlenCall varlen;
    PagedCall paged;
    FwdArgs& args = pick(rng, {0, 1}) ? varlen.args : paged.args;
    Tensor* floats[] = {&args.q, &args.k, &args.v, &args.out};
    const int breaks = static_cast<int>(pick(rng, {1, 2, 3}));
    for (int i = 0; i < breaks; ++i) {
      if (pick(rng, {0, 1, 2}) == 0) break_scalar(rng, &args);
      else break_tensor(rng, floats[pick(rng, {0, 1, 2, 3})]);
    }
    detail::Problem problem;
    const Status s = detail::validate_forward(args, &problem);
    expect_answered(s, round);
    rejected += !s.ok();
  }
  EXPECT_GT(rejected, 2000);  // almost every break is an error; the rest (e.g. causal toggled) are fine
}

}  // namespace
}  // namespace hopattn::test
