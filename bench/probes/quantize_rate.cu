// hopattn-quantize-rate: how fast hopattn::quantize_fp8 turns bf16 q, k, v into e4m3 codes and scales,
// against the bytes it must move (each element read once as 2 bytes, written once as 1).
//
// The pre-pass is memory-bound by design: at 2 x 8k x 16 x 128 it moves 302 MB, about 65 us at the
// H200's sustained DRAM rate, beside an FP8 forward of about 1.16 ms on its output (perf-notes v114,
// v119). Each line times one granularity with and without the Hadamard transform (CUDA events around
// one call, warm-up, median of --iters calls).
//
//   hopattn-quantize-rate [--batch 2] [--seqlen 8192] [--heads 16] [--hdim 128] [--iters 20]
//                         [--v-keys-contiguous]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hopattn/quantize.hpp"
#include "../random_fill.hpp"
#include "probe_check.hpp"

namespace {

struct Options {
  int batch = 2, seqlen = 8192, heads = 16, hdim = 128, iters = 20;
  bool v_keys_contiguous = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--v-keys-contiguous") {
      o.v_keys_contiguous = true;
      continue;
    }
    int* target = flag == "--batch"   ? &o.batch
                  : flag == "--seqlen" ? &o.seqlen
                  : flag == "--heads"  ? &o.heads
                  : flag == "--hdim"   ? &o.hdim
                  : flag == "--iters"  ? &o.iters
                                       : nullptr;
    if (target == nullptr || i + 1 >= argc || (*target = std::atoi(argv[++i])) < 1) {
      std::fprintf(stderr, "usage: hopattn-quantize-rate [--batch N] [--seqlen N] [--heads N] [--hdim 64|128|256] "
                           "[--iters N] [--v-keys-contiguous]\n");
      std::exit(2);
    }
  }
  return o;
}

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  PROBE_CHECK(cudaMalloc(&p, bytes));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hopattn;
  const Options o = parse(argc, argv);
  const std::int64_t elements = std::int64_t{o.batch} * o.seqlen * o.heads * o.hdim;
  const auto cuda = DeviceType::kCuda;
  void* in[3];
  void* out[3];
  for (int t = 0; t < 3; ++t) {
    in[t] = device_alloc(elements * 2);
    out[t] = device_alloc(elements);
    if (Status s = bench::fill_random_device(in[t], Dtype::kBFloat16, elements, 17 + t); !s.ok()) {
      std::fprintf(stderr, "fill: %s\n", s.message().c_str());
      return 1;
    }
  }
  const std::int64_t max_scales = std::int64_t{o.batch} * o.heads * o.seqlen;  // enough for any block size
  void* descale[3] = {device_alloc(max_scales * 4), device_alloc(max_scales * 4), device_alloc(max_scales * 4)};
  cudaEvent_t start, stop;
  PROBE_CHECK(cudaEventCreate(&start));
  PROBE_CHECK(cudaEventCreate(&stop));
  const double bytes = 3.0 * elements * 3;

  std::printf("quantize_fp8 q, k, v bf16 (%d, %d, %d, %d)%s: %.1f MB moved\n", o.batch, o.seqlen, o.heads, o.hdim,
              o.v_keys_contiguous ? ", v8 keys-contiguous" : "", bytes / 1e6);
  for (const QuantGranularity granularity :
       {QuantGranularity::kPerBlock, QuantGranularity::kPerHead, QuantGranularity::kPerTensor}) {
    for (const bool hadamard : {false, true}) {
      QuantizeArgs a;
      a.q = make_tensor(in[0], Dtype::kBFloat16, {o.batch, o.seqlen, o.heads, o.hdim}, cuda);
      a.k = make_tensor(in[1], Dtype::kBFloat16, {o.batch, o.seqlen, o.heads, o.hdim}, cuda);
      a.v = make_tensor(in[2], Dtype::kBFloat16, {o.batch, o.seqlen, o.heads, o.hdim}, cuda);
      a.q8 = make_tensor(out[0], Dtype::kFloat8E4M3, {o.batch, o.seqlen, o.heads, o.hdim}, cuda);
      a.k8 = make_tensor(out[1], Dtype::kFloat8E4M3, {o.batch, o.seqlen, o.heads, o.hdim}, cuda);
      a.v8 = make_tensor(out[2], Dtype::kFloat8E4M3, {o.batch, o.seqlen, o.heads, o.hdim}, cuda);
      if (o.v_keys_contiguous) {  // (batch, seqlen, heads, d) viewed over a (batch, heads, d, seqlen) buffer
        const std::int64_t strides[4] = {std::int64_t{o.heads} * o.hdim * o.seqlen, 1,
                                         std::int64_t{o.hdim} * o.seqlen, o.seqlen};
        std::memcpy(a.v8.stride, strides, sizeof strides);
      }
      const std::int64_t blocks = scale_blocks(granularity, o.seqlen, 128);
      const bool per_tensor = granularity == QuantGranularity::kPerTensor;
      for (int t = 0; t < 3; ++t) {
        Tensor& d = t == 0 ? a.q_descale : t == 1 ? a.k_descale : a.v_descale;
        d = per_tensor ? make_tensor(descale[t], Dtype::kFloat32, {1}, cuda)
            : granularity == QuantGranularity::kPerHead
                ? make_tensor(descale[t], Dtype::kFloat32, {o.batch, o.heads}, cuda)
                : make_tensor(descale[t], Dtype::kFloat32, {o.batch, o.heads, blocks}, cuda);
      }
      a.granularity = granularity;
      a.hadamard = hadamard;
      a.seed = 5;
      std::vector<float> ms;
      for (int i = 0; i < o.iters + 3; ++i) {
        PROBE_CHECK(cudaEventRecord(start));
        if (Status s = quantize_fp8(a); !s.ok()) {
          std::fprintf(stderr, "quantize_fp8: %s\n", s.message().c_str());
          return 1;
        }
        PROBE_CHECK(cudaEventRecord(stop));
        PROBE_CHECK(cudaEventSynchronize(stop));
        float t = 0;
        PROBE_CHECK(cudaEventElapsedTime(&t, start, stop));
        if (i >= 3) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      std::printf("  %-6s %-8s %8.1f us  %5.2f TB/s\n", granularity_name(granularity),
                  hadamard ? "hadamard" : "plain", median * 1e3, bytes / (median * 1e9));
    }
  }
  return 0;
}
