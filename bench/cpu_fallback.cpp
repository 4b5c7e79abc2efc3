#include "cpu_fallback.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "random_fill.hpp"

namespace hopattn::bench {

int run_cpu_reference(const CliOptions& options, RunInfo info) {
  // --backward or --grid bwd: time the reference backward on the same small problem, after one
  // forward that writes out and the LSE it reads.
  const bool is_backward =
      std::any_of(options.shapes.begin(), options.shapes.end(), [](const Shape& shape) { return shape.backward; });
  Shape s;
  s.dtype = Dtype::kFloat32;
  s.batch = 1;
  s.heads_q = s.heads_kv = 2;
  s.seqlen_q = s.seqlen_k = 128;
  s.hdim = 64;
  s.backward = is_backward;
  s.variant = is_backward ? backward_variant("cpu_reference") : "cpu_reference";
  constexpr int kCalls = 5;

  const std::size_t qkv_elements = std::size_t{1} * s.batch * s.seqlen_q * s.heads_q * s.hdim;
  std::vector<float> q(qkv_elements), k(qkv_elements), v(qkv_elements);
  std::vector<float> out(qkv_elements, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> lse(std::size_t{1} * s.batch * s.heads_q * s.seqlen_q, std::numeric_limits<float>::quiet_NaN());
  // A fixed seed, unlike the GPU timing: the checksum is then comparable between runs and machines.
  constexpr std::uint64_t seed = 20240711;
  fill_random_host(q.data(), Dtype::kFloat32, static_cast<std::int64_t>(q.size()), seed);
  fill_random_host(k.data(), Dtype::kFloat32, static_cast<std::int64_t>(k.size()), seed + 1);
  fill_random_host(v.data(), Dtype::kFloat32, static_cast<std::int64_t>(v.size()), seed + 2);

  FwdArgs args;
  args.q = make_tensor(q.data(), Dtype::kFloat32, {s.batch, s.seqlen_q, s.heads_q, s.hdim});
  args.k = make_tensor(k.data(), Dtype::kFloat32, {s.batch, s.seqlen_k, s.heads_kv, s.hdim});
  args.v = make_tensor(v.data(), Dtype::kFloat32, {s.batch, s.seqlen_k, s.heads_kv, s.hdim});
  args.out = make_tensor(out.data(), Dtype::kFloat32, {s.batch, s.seqlen_q, s.heads_q, s.hdim});
  args.lse = make_tensor(lse.data(), Dtype::kFloat32, {s.batch, s.heads_q, s.seqlen_q});

  // The backward's tensors: dout random, dq, dk, dv NaN until written.
  std::vector<float> dout, dq, dk, dv;
  BwdArgs bwd_args;
  Status status;
  if (is_backward) {
    status = forward(args);
    dout.resize(qkv_elements);
    fill_random_host(dout.data(), Dtype::kFloat32, static_cast<std::int64_t>(dout.size()), seed + 3);
    for (std::vector<float>* grad : {&dq, &dk, &dv}) {
      grad->assign(qkv_elements, std::numeric_limits<float>::quiet_NaN());
    }
    bwd_args.q = args.q;
    bwd_args.k = args.k;
    bwd_args.v = args.v;
    bwd_args.out = args.out;
    bwd_args.lse = *args.lse;
    bwd_args.dout = make_tensor(dout.data(), Dtype::kFloat32, {s.batch, s.seqlen_q, s.heads_q, s.hdim});
    bwd_args.dq = make_tensor(dq.data(), Dtype::kFloat32, {s.batch, s.seqlen_q, s.heads_q, s.hdim});
    bwd_args.dk = make_tensor(dk.data(), Dtype::kFloat32, {s.batch, s.seqlen_k, s.heads_kv, s.hdim});
    bwd_args.dv = make_tensor(dv.data(), Dtype::kFloat32, {s.batch, s.seqlen_k, s.heads_kv, s.hdim});
  }

  Measurement m;
  m.input_sets = 1;
  std::vector<double> times;
  for (int i = 0; i < kCalls && status.ok(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    status = is_backward ? backward(bwd_args) : forward(args);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  // The checksum: sum(out), or for the backward sum(dq) + sum(dk) + sum(dv).
  using Results = std::vector<const std::vector<float>*>;
  const Results results = is_backward ? Results{&dq, &dk, &dv} : Results{&out};
  double checksum = 0.0;
  bool finite = true;
  for (const std::vector<float>* result : results) {
    for (float x : *result) {
      checksum += x;
      finite = finite && std::isfinite(x);
    }
  }
  if (status.ok() && !finite) status = Status(StatusCode::kInvalidArgument, "the reference wrote a NaN/Inf output");

  if (status.ok()) {
    std::sort(times.begin(), times.end());
    m.outcome = Outcome::kOk;
    m.median_ms = times[times.size() / 2];
    m.iters = kCalls;
    std::printf("CPU reference%s: batch %d, %d heads, seqlen %d, hdim %d, float32: %.3f ms (median of %d), "
                "checksum %s = %.6f\n",
                is_backward ? " backward" : "", s.batch, s.heads_q, s.seqlen_q, s.hdim, m.median_ms, kCalls,
                is_backward ? "sum(dq) + sum(dk) + sum(dv)" : "sum(out)", checksum);
  } else {
    m.outcome = status.code() == StatusCode::kUnsupported ? Outcome::kUnsupported : Outcome::kError;
    m.message = status.message();
    std::printf("CPU reference%s failed: %s\n", is_backward ? " backward" : "", status.message().c_str());
  }

  if (!options.json_path.empty()) {
    info.backend = "cpu_reference";
    info.grid = "cpu_fallback";
    info.iters = kCalls;
    info.warmup = 0;
    info.write_lse = true;
    info.queue_ahead = false;
    std::string error;
    if (!write_json(options.json_path, info, {timed_row(s, m)}, &error)) {
      std::fprintf(stderr, "hopattn-bench: %s\n", error.c_str());
      return 1;
    }
  }
  return status.ok() ? 0 : 1;
}

}  // namespace hopattn::bench
