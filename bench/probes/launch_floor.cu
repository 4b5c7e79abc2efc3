// hopattn-launch-floor: what a kernel boundary costs on the GPU itself, with the host out of the way.
// Every case's launches are queued behind hopattn-bench's LaunchGate (bench/launch_gate.hpp) and run
// back to back once the host opens it, so the time between the two events around them is GPU
// time, not the host's launch rate (an ungated loop of launches measures the host: about 4 us a launch
// on the device machine, docs/perf-notes.md session 56).
//
// The kernels model a split decoding step: "forward" (64 CTAs x 384 threads x 198 KB of shared memory)
// and "combine" (64 CTAs x 128 threads), each busy for a set time. Cases: one kind of kernel back to
// back; the pair without and with programmatic dependent launch (PDL: the dependent may start once its
// predecessor's CTAs have run griddepcontrol.launch_dependents, and griddepcontrol.wait holds it until
// the predecessor has completed); and the same with an event pair around each step, as hopattn-bench
// times a call.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "launch_gate.hpp"
#include "probe_check.hpp"
#include "sm90/host/launch_support.hpp"

namespace {

constexpr int kForwardSmem = 198 * 1024;

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// wait_first: griddepcontrol.wait before the work (a programmatic dependent must, before it reads what
// its predecessor wrote). trigger_first: griddepcontrol.launch_dependents at the start.
__global__ void busy(unsigned busy_ns, bool wait_first, bool trigger_first, int* sink) {
  extern __shared__ int smem[];
  if (trigger_first) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (wait_first) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0) {
    const unsigned long long start = now_ns();
    while (now_ns() - start < busy_ns) {
    }
    smem[0] = blockIdx.x;
    if (sink != nullptr && smem[0] < 0) *sink = smem[0];  // never true: keeps the store
  }
}

struct Kind {
  int ctas, threads, smem;
  unsigned busy_ns;
};

// Through the library's own launcher (launch_kernel), with or without the programmatic attribute.
void launch(const Kind& k, bool programmatic, bool wait_first, bool trigger_first, cudaStream_t stream) {
  const hopattn::Status st = hopattn::sm90::launch_kernel(busy, dim3(k.ctas), dim3(k.threads), k.smem, stream,
                                                          programmatic, "launching the probe's kernel", k.busy_ns,
                                                          wait_first, trigger_first, static_cast<int*>(nullptr));
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    std::exit(1);
  }
}

struct Result {
  double total_per_step_us;
  double event_median_us;  // median of the per-step event pairs, or 0 without them
};

// steps x `step` (one or two launches) behind the gate; with per_step_events, an event pair around
// each step as hopattn-bench records them.
template <class Step>
Result time_steps(int steps, bool per_step_events, cudaStream_t stream, const Step& step) {
  for (int i = 0; i < 5; ++i) step();  // warm-up
  PROBE_CHECK(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> events(2 * steps + 2);
  for (cudaEvent_t& e : events) PROBE_CHECK(cudaEventCreate(&e));
  hopattn::bench::LaunchGate gate;
  if (const hopattn::Status st = gate.close(stream); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    std::exit(1);
  }
  PROBE_CHECK(cudaEventRecord(events[0], stream));
  for (int i = 0; i < steps; ++i) {
    if (per_step_events) PROBE_CHECK(cudaEventRecord(events[2 + 2 * i], stream));
    step();
    if (per_step_events) PROBE_CHECK(cudaEventRecord(events[3 + 2 * i], stream));
  }
  PROBE_CHECK(cudaEventRecord(events[1], stream));
  if (!gate.open()) std::printf("  (the gate opened by itself before every launch was queued)\n");
  PROBE_CHECK(cudaStreamSynchronize(stream));
  float ms = 0.0f;
  PROBE_CHECK(cudaEventElapsedTime(&ms, events[0], events[1]));
  Result r{1000.0 * ms / steps, 0.0};
  if (per_step_events) {
    std::vector<double> each(steps);
    for (int i = 0; i < steps; ++i) {
      PROBE_CHECK(cudaEventElapsedTime(&ms, events[2 + 2 * i], events[3 + 2 * i]));
      each[i] = 1000.0 * ms;
    }
    std::sort(each.begin(), each.end());
    r.event_median_us = each[steps / 2];
  }
  for (cudaEvent_t e : events) PROBE_CHECK(cudaEventDestroy(e));
  return r;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  PROBE_CHECK(cudaFuncSetAttribute(busy, cudaFuncAttributeMaxDynamicSharedMemorySize, kForwardSmem));
  cudaStream_t stream;
  PROBE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  constexpr int kSteps = 200;

  for (unsigned forward_ns : {0u, 5000u}) {
    const Kind forward{64, 384, kForwardSmem, forward_ns};
    const Kind combine{64, 128, 16, forward_ns == 0 ? 0u : 1000u};
    std::printf("\nforward busy %u ns, combine busy %u ns (us a step: all steps / count | median of per-step events)\n",
                forward.busy_ns, combine.busy_ns);
    for (bool events : {false, true}) {
      const auto report = [&](const char* what, const Result& r) {
        if (events)
          std::printf("  %-58s %7.2f | %7.2f\n", what, r.total_per_step_us, r.event_median_us);
        else
          std::printf("  %-58s %7.2f\n", what, r.total_per_step_us);
      };
      std::printf(" %s\n", events ? "with an event pair around each step" : "back to back, no events between");
      report("forward alone", time_steps(kSteps, events, stream, [&] {
               launch(forward, false, false, false, stream);
             }));
      report("combine alone", time_steps(kSteps, events, stream, [&] {
               launch(combine, false, false, false, stream);
             }));
      report("forward alone, PDL (waits and triggers at its start)", time_steps(kSteps, events, stream, [&] {
               launch(forward, true, true, true, stream);
             }));
      report("forward + combine, plain", time_steps(kSteps, events, stream, [&] {
               launch(forward, false, false, false, stream);
               launch(combine, false, false, false, stream);
             }));
      report("forward (triggers) + combine by PDL (today's split step)", time_steps(kSteps, events, stream, [&] {
               launch(forward, false, false, true, stream);
               launch(combine, true, true, false, stream);
             }));
      report("both by PDL, both trigger at their start", time_steps(kSteps, events, stream, [&] {
               launch(forward, true, true, true, stream);
               launch(combine, true, true, true, stream);
             }));
    }
  }
  return 0;
}
