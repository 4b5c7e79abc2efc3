// The forward kernels are programmatic dependents of the kernel queued before them
// (launch_programmatic, src/sm90/host/launch_support.hpp): they may start while it still runs, and
// must touch no global memory before griddepcontrol.wait. Each case queues, right before a forward
// call, a kernel that lets dependents launch at its start and, after a delay, reads the call's out
// (which must still hold what was there) and only then writes the call's inputs (q, k, v, seqused_k,
// ...; zeros until then). The call must write what a call on ready inputs writes, bit for bit (the
// kernels are deterministic, split merges included), and must not have written out before that read.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/fp8_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

constexpr int kMaxLateCopies = 6;
constexpr unsigned kDelayNs = 100000;  // far longer than a forward kernel's launch and prologue

struct LateWork {
  struct Copy {
    const std::uint8_t* from;
    std::uint8_t* to;
    std::int64_t bytes;
  } copies[kMaxLateCopies];
  int count;
  const std::uint8_t* check;     // out, which must still equal...
  const std::uint8_t* expected;  // ...this when the delay ends
  std::int64_t check_bytes;
  unsigned long long* mismatches;
};

__global__ void late_reader_and_writer(LateWork work) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (threadIdx.x == 0) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < kDelayNs);
  }
  __syncthreads();
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  const std::int64_t first = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned long long mismatches = 0;
  for (std::int64_t i = first; i < work.check_bytes; i += stride) {
    mismatches += reinterpret_cast<const volatile std::uint8_t*>(work.check)[i] != work.expected[i];
  }
  if (mismatches != 0) atomicAdd(work.mismatches, mismatches);
  __syncthreads();  // every read of out before any input is written
  for (int c = 0; c < work.count; ++c) {
    for (std::int64_t i = first; i < work.copies[c].bytes; i += stride) work.copies[c].to[i] = work.copies[c].from[i];
  }
}

// An input the late kernel writes: its final contents (`ready`) and the call's buffer (`late`).
struct LateInput {
  DeviceBuffer ready;
  DeviceBuffer late;
};

LateInput late_input(DeviceBuffer ready) {
  LateInput in{std::move(ready), DeviceBuffer()};
  in.late = DeviceBuffer(in.ready.bytes());
  return in;
}

// Runs `args` (whose inputs point at each LateInput's `late` buffer) first on ready inputs, then on
// inputs the late kernel writes; returns what went wrong, or an empty string.
std::string late_inputs_mismatch(FwdArgs args, std::vector<LateInput>& inputs) {
  if (inputs.size() > std::size_t(kMaxLateCopies)) return "too many late inputs for the test kernel";
  cudaStream_t stream = nullptr;
  HOPATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  args.stream = stream;
  const std::size_t out_bytes = storage_bytes(args.out);

  // On ready inputs: the bits to expect.
  for (LateInput& in : inputs)
    HOPATTN_CUDA_CHECK(cudaMemcpy(in.late.data(), in.ready.data(), in.ready.bytes(), cudaMemcpyDeviceToDevice));
  poison_storage(args.out);
  if (args.lse) poison_storage(*args.lse);
  // The poison runs on the legacy stream, which the call's non-blocking stream does not wait for.
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  if (const Status st = forward(args); !st.ok()) return "the call on ready inputs failed: " + st.message();
  HOPATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (count_unpoisoned(args.out.data, args.out.dtype, args.out.numel()) != args.out.numel())
    return "the call on ready inputs left out elements unwritten";
  const std::vector<std::uint8_t> want_out = storage_to_host(args.out);
  const std::vector<std::uint8_t> want_lse = args.lse ? storage_to_host(*args.lse) : std::vector<std::uint8_t>();

  // On inputs written late, with out read late.
  for (LateInput& in : inputs) HOPATTN_CUDA_CHECK(cudaMemset(in.late.data(), 0, in.late.bytes()));
  poison_storage(args.out);
  if (args.lse) poison_storage(*args.lse);
  DeviceBuffer expected_out(out_bytes), mismatches(sizeof(unsigned long long));
  HOPATTN_CUDA_CHECK(cudaMemcpy(expected_out.data(), args.out.data, out_bytes, cudaMemcpyDeviceToDevice));
  HOPATTN_CUDA_CHECK(cudaMemset(mismatches.data(), 0, sizeof(unsigned long long)));
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  LateWork work{};
  for (LateInput& in : inputs) {
    work.copies[work.count++] = {static_cast<const std::uint8_t*>(in.ready.data()),
                                 static_cast<std::uint8_t*>(in.late.data()), std::int64_t(in.ready.bytes())};
  }
  work.check = static_cast<const std::uint8_t*>(args.out.data);
  work.expected = static_cast<const std::uint8_t*>(expected_out.data());
  work.check_bytes = std::int64_t(out_bytes);
  work.mismatches = static_cast<unsigned long long*>(mismatches.data());
  late_reader_and_writer<<<4, 256, 0, stream>>>(work);  // 4 CTAs: the forward's CTAs fit beside them
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  const Status st = forward(args);
  HOPATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  HOPATTN_CUDA_CHECK(cudaStreamDestroy(stream));
  if (!st.ok()) return "the call on late inputs failed: " + st.message();
  const unsigned long long early_writes = mismatches.to_host<unsigned long long>()[0];
  if (early_writes != 0)
    return std::to_string(early_writes) + " bytes of out changed before the kernel ahead read them";
  if (storage_to_host(args.out) != want_out) return "out differs from the call on ready inputs";
  if (args.lse && storage_to_host(*args.lse) != want_lse)
    return "lse differs from the call on ready inputs";
  return "";
}

DeviceBuffer random_16bit(Dtype dtype, std::int64_t n, std::uint64_t seed, float amplitude = 1.0f) {
  DeviceBuffer b(n * dtype_size(dtype));
  fill_normal(b.data(), dtype, n, seed, amplitude);
  return b;
}

class ForwardProgrammaticLaunch : public HopperTest {};

struct Dense16Case {
  DenseExtents x;
  Dtype dtype;
  bool causal;
  std::vector<int> seqused_k;  // empty: none
  bool programmatic_launch;
};

// 16-bit kernels: a prefill tile (causal, odd lengths), a split decoding step (the forward and combine
// kernels; seqused_k written late too), the d 256 decoding kernel, d 64 MHA; the last also launched
// as an ordinary kernel (KernelOptions::programmatic_launch off).
TEST_F(ForwardProgrammaticLaunch, SixteenBitCallsWaitForTheKernelAhead) {
  const std::uint64_t seed = run_seed();
  const Dense16Case cases[] = {{{2, 4, 2, 301, 777, 128}, Dtype::kBFloat16, true, {}, true},
                               {{2, 8, 2, 1, 8333, 128}, Dtype::kBFloat16, false, {8333, 5001}, true},
                               {{2, 16, 8, 1, 5001, 256}, Dtype::kFloat16, false, {}, true},
                               {{3, 6, 6, 190, 190, 64}, Dtype::kFloat16, false, {}, true},
                               {{2, 8, 2, 1, 8333, 128}, Dtype::kBFloat16, false, {8333, 5001}, false}};
  int index = 0;
  for (const Dense16Case& c : cases) {
    const DenseExtents& x = c.x;
    const std::int64_t nq = std::int64_t(x.batch) * x.seqlen_q * x.heads_q * x.head_dim;
    const std::int64_t nkv = std::int64_t(x.batch) * x.seqlen_k * x.heads_kv * x.head_dim;
    std::vector<LateInput> inputs;
    inputs.push_back(late_input(random_16bit(c.dtype, nq, splitmix64(seed + index++), 3.0f)));
    inputs.push_back(late_input(random_16bit(c.dtype, nkv, splitmix64(seed + index++))));
    inputs.push_back(late_input(random_16bit(c.dtype, nkv, splitmix64(seed + index++))));
    if (!c.seqused_k.empty()) inputs.push_back(late_input(upload(c.seqused_k)));
    DeviceBuffer out(nq * dtype_size(c.dtype)), lse(std::int64_t(x.batch) * x.heads_q * x.seqlen_q * 4);
    FwdArgs args = dense_cuda_args(x, c.dtype, c.dtype, inputs[0].late.data(), inputs[1].late.data(),
                                   inputs[2].late.data(), out.data(), lse.data());
    args.causal = c.causal;
    args.options.programmatic_launch = c.programmatic_launch;
    if (!c.seqused_k.empty())
      args.seqused_k = make_tensor(inputs[3].late.data(), Dtype::kInt32, {x.batch}, DeviceType::kCuda);
    const std::string why = late_inputs_mismatch(args, inputs);
    EXPECT_TRUE(why.empty()) << "b " << x.batch << " hq " << x.heads_q << "/" << x.heads_kv << " sq " << x.seqlen_q
                             << " sk " << x.seqlen_k << " d " << x.head_dim << (c.causal ? " causal" : "")
                             << (c.seqused_k.empty() ? "" : " seqused_k")
                             << (c.programmatic_launch ? "" : " ordinary launch") << " (HOPATTN_TEST_SEED=" << seed
                             << "): " << why;
  }
}

// The FP8 kernel: a split decoding step (forward and combine kernels) and a prefill tile.
TEST_F(ForwardProgrammaticLaunch, Fp8CallsWaitForTheKernelAhead) {
  const std::uint64_t seed = run_seed();
  const DenseExtents shapes[] = {{2, 8, 2, 1, 8333, 128}, {1, 4, 4, 333, 333, 64}};
  int index = 0;
  for (const DenseExtents& x : shapes) {
    const std::int64_t nq = std::int64_t(x.batch) * x.seqlen_q * x.heads_q * x.head_dim;
    const std::int64_t nkv = std::int64_t(x.batch) * x.seqlen_k * x.heads_kv * x.head_dim;
    std::vector<LateInput> inputs;
    inputs.push_back(late_input(random_e4m3(nq, splitmix64(seed + index++), 3.0f)));
    inputs.push_back(late_input(random_e4m3(nkv, splitmix64(seed + index++), 1.0f)));
    inputs.push_back(late_input(random_e4m3(nkv, splitmix64(seed + index++), 1.0f)));
    DeviceBuffer out(nq * 2), lse(std::int64_t(x.batch) * x.heads_q * x.seqlen_q * 4);
    const FwdArgs args = dense_cuda_args(x, Dtype::kFloat8E4M3, Dtype::kBFloat16, inputs[0].late.data(),
                                         inputs[1].late.data(), inputs[2].late.data(), out.data(), lse.data());
    const std::string why = late_inputs_mismatch(args, inputs);
    EXPECT_TRUE(why.empty()) << "fp8 b " << x.batch << " hq " << x.heads_q << "/" << x.heads_kv << " sq " << x.seqlen_q
                             << " sk " << x.seqlen_k << " d " << x.head_dim << " (HOPATTN_TEST_SEED=" << seed
                             << "): " << why;
  }
}

// The MLA kernel (qv: q/k 64, qv, v and out 512): a split decoding step with seqused_k.
TEST_F(ForwardProgrammaticLaunch, MlaCallsWaitForTheKernelAhead) {
  const std::uint64_t seed = run_seed();
  const int batch = 2, heads = 16, seqlen_k = 3001;
  const Dtype dtype = Dtype::kBFloat16;
  std::vector<LateInput> inputs;
  inputs.push_back(late_input(random_16bit(dtype, std::int64_t(batch) * heads * 64, splitmix64(seed + 1), 3.0f)));
  inputs.push_back(late_input(random_16bit(dtype, std::int64_t(batch) * heads * 512, splitmix64(seed + 2))));
  inputs.push_back(late_input(random_16bit(dtype, std::int64_t(batch) * seqlen_k * 64, splitmix64(seed + 3))));
  inputs.push_back(late_input(random_16bit(dtype, std::int64_t(batch) * seqlen_k * 512, splitmix64(seed + 4))));
  inputs.push_back(late_input(upload(std::vector<int>{2999, 1234})));
  DeviceBuffer out(std::int64_t(batch) * heads * 512 * dtype_size(dtype)), lse(std::int64_t(batch) * heads * 4);
  FwdArgs args;
  args.q = make_tensor(inputs[0].late.data(), dtype, {batch, 1, heads, 64}, DeviceType::kCuda);
  args.qv = make_tensor(inputs[1].late.data(), dtype, {batch, 1, heads, 512}, DeviceType::kCuda);
  args.k = make_tensor(inputs[2].late.data(), dtype, {batch, seqlen_k, 1, 64}, DeviceType::kCuda);
  args.v = make_tensor(inputs[3].late.data(), dtype, {batch, seqlen_k, 1, 512}, DeviceType::kCuda);
  args.seqused_k = make_tensor(inputs[4].late.data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
  args.out = make_tensor(out.data(), dtype, {batch, 1, heads, 512}, DeviceType::kCuda);
  args.lse = make_tensor(lse.data(), Dtype::kFloat32, {batch, heads, 1}, DeviceType::kCuda);
  const std::string why = late_inputs_mismatch(args, inputs);
  EXPECT_TRUE(why.empty()) << "qv b 2 x 16 heads x 3001 keys, seqused_k (HOPATTN_TEST_SEED=" << seed << "): " << why;
}

}  // namespace
}  // namespace hopattn::test
