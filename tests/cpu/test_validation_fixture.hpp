// Valid calls on real host buffers for the validation tests: each test breaks exactly one thing and
// checks the status code and that the message names the broken argument.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "api/problem.hpp"
#include "common/host_tensor.hpp"

namespace hopattn::test {

// The code is `code`, the message starts with "<argument>: " and mentions every piece of `details`.
inline ::testing::AssertionResult Fails(const Status& status, StatusCode code, const std::string& argument,
                                        std::initializer_list<const char*> details = {}) {
  if (status.code() != code)
    return ::testing::AssertionFailure() << "code " << static_cast<int>(status.code()) << " instead of "
                                         << static_cast<int>(code) << "; message: " << status.message();
  if (status.message().rfind(argument + ": ", 0) != 0)
    return ::testing::AssertionFailure() << "message does not start with '" << argument << ": ': " << status.message();
  for (const char* detail : details)
    if (status.message().find(detail) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << detail << "': " << status.message();
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult Invalid(const Status& status, const std::string& argument,
                                          std::initializer_list<const char*> details = {}) {
  return Fails(status, StatusCode::kInvalidArgument, argument, details);
}

inline std::uint64_t fresh_seed() { return std::random_device{}(); }

inline void set_ints(HostTensor& t, const std::vector<int>& values) {
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
}

inline void fill_inputs(std::initializer_list<HostTensor*> tensors) {
  std::uint64_t seed = fresh_seed();
  for (HostTensor* t : tensors) t->fill_random(seed++);
}

// Marks every tensor of a call as living on CUDA device 0. The buffers stay on the host: validation
// never dereferences CUDA pointers, and these calls never reach a kernel (no Hopper GPU here, and the
// tests that dispatch skip when one is present).
inline void move_to_cuda(std::initializer_list<Tensor*> tensors) {
  for (Tensor* t : tensors) t->device = DeviceType::kCuda;
}

// Dense bf16 forward with GQA (4 query heads on 2 KV heads), odd lengths, and lse.
struct DenseCall {
  explicit DenseCall(int head_dim = 33, Dtype dtype = Dtype::kBFloat16)
      : q(dtype, {2, 5, 4, head_dim}),
        k(dtype, {2, 7, 2, head_dim}),
        v(dtype, {2, 7, 2, head_dim}),
        out(dtype == Dtype::kFloat8E4M3 ? Dtype::kBFloat16 : dtype, {2, 5, 4, head_dim}),
        lse(Dtype::kFloat32, {2, 4, 5}) {
    fill_inputs({&q, &k, &v});
    out.poison();
    lse.poison();
    args.q = q.tensor();
    args.k = k.tensor();
    args.v = v.tensor();
    args.out = out.tensor();
    args.lse = lse.tensor();
  }
  void to_cuda() { move_to_cuda({&args.q, &args.k, &args.v, &args.out, &*args.lse}); }
  Status validate(detail::Problem* problem) const { return detail::validate_forward(args, problem); }
  Status validate() const {
    detail::Problem problem;
    return validate(&problem);
  }

  HostTensor q, k, v, out, lse;
  FwdArgs args;
};

// Varlen q and k: query lengths {4, 5}, key lengths {5, 7}.
struct VarlenCall {
  VarlenCall()
      : q(Dtype::kFloat16, {9, 4, 16}),
        k(Dtype::kFloat16, {12, 2, 16}),
        v(Dtype::kFloat16, {12, 2, 16}),
        out(Dtype::kFloat16, {9, 4, 16}),
        lse(Dtype::kFloat32, {4, 9}),
        cu_seqlens_q(Dtype::kInt32, {3}),
        cu_seqlens_k(Dtype::kInt32, {3}) {
    fill_inputs({&q, &k, &v});
    out.poison();
    lse.poison();
    set_ints(cu_seqlens_q, {0, 4, 9});
    set_ints(cu_seqlens_k, {0, 5, 12});
    args.q = q.tensor();
    args.k = k.tensor();
    args.v = v.tensor();
    args.out = out.tensor();
    args.lse = lse.tensor();
    args.cu_seqlens_q = cu_seqlens_q.tensor();
    args.cu_seqlens_k = cu_seqlens_k.tensor();
    args.max_seqlen_q = 5;
    args.max_seqlen_k = 7;
  }
  Status validate(detail::Problem* problem) const { return detail::validate_forward(args, problem); }
  Status validate() const {
    detail::Problem problem;
    return validate(&problem);
  }

  HostTensor q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k;
  FwdArgs args;
};

// Dense q over a paged KV cache: 6 pages of 4 keys, 3 pages per sequence, seqused_k {10, 12}.
struct PagedCall {
  PagedCall()
      : q(Dtype::kBFloat16, {2, 3, 4, 16}),
        k(Dtype::kBFloat16, {6, 4, 2, 16}),
        v(Dtype::kBFloat16, {6, 4, 2, 16}),
        out(Dtype::kBFloat16, {2, 3, 4, 16}),
        page_table(Dtype::kInt32, {2, 3}),
        seqused_k(Dtype::kInt32, {2}) {
    fill_inputs({&q, &k, &v});
    out.poison();
    set_ints(page_table, {5, 0, 3, 1, 4, 2});
    set_ints(seqused_k, {10, 12});
    args.q = q.tensor();
    args.k = k.tensor();
    args.v = v.tensor();
    args.out = out.tensor();
    args.page_table = page_table.tensor();
    args.seqused_k = seqused_k.tensor();
  }
  Status validate(detail::Problem* problem) const { return detail::validate_forward(args, problem); }
  Status validate() const {
    detail::Problem problem;
    return validate(&problem);
  }

  HostTensor q, k, v, out, page_table, seqused_k;
  FwdArgs args;
};

// Dense backward (float32 unless told) with GQA and odd lengths.
struct BackwardCall {
  explicit BackwardCall(int head_dim = 24, Dtype dtype = Dtype::kFloat32)
      : q(dtype, {2, 5, 4, head_dim}),
        k(dtype, {2, 7, 2, head_dim}),
        v(dtype, {2, 7, 2, head_dim}),
        out(dtype, {2, 5, 4, head_dim}),
        dout(dtype, {2, 5, 4, head_dim}),
        lse(Dtype::kFloat32, {2, 4, 5}),
        dq(dtype, {2, 5, 4, head_dim}),
        dk(dtype, {2, 7, 2, head_dim}),
        dv(dtype, {2, 7, 2, head_dim}) {
    fill_inputs({&q, &k, &v, &out, &dout, &lse});
    for (HostTensor* t : {&dq, &dk, &dv}) t->poison();
    args.q = q.tensor();
    args.k = k.tensor();
    args.v = v.tensor();
    args.out = out.tensor();
    args.dout = dout.tensor();
    args.lse = lse.tensor();
    args.dq = dq.tensor();
    args.dk = dk.tensor();
    args.dv = dv.tensor();
  }
  void to_cuda() {
    move_to_cuda({&args.q, &args.k, &args.v, &args.out, &args.dout, &args.lse, &args.dq, &args.dk, &args.dv});
  }
  // The output or gradient argument called `name`.
  Tensor* tensor(const std::string& name) {
    if (name == "out") return &args.out;
    if (name == "dout") return &args.dout;
    if (name == "dq") return &args.dq;
    if (name == "dk") return &args.dk;
    return &args.dv;
  }
  Status validate(detail::Problem* problem) const { return detail::validate_backward(args, problem); }
  Status validate() const {
    detail::Problem problem;
    return validate(&problem);
  }

  HostTensor q, k, v, out, dout, lse, dq, dk, dv;
  BwdArgs args;
};

}  // namespace hopattn::test
