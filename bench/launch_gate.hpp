// A gate on a CUDA stream: work queued behind it waits until the host opens it. The bench queues all
// of a shape's timed calls behind one, so they then run back to back and each call's pair of events
// brackets its GPU work alone. Timed one at a time instead, a call that takes less GPU time than its
// host-side launch (a decoding step can) would measure the host.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "hopattn/hopattn.hpp"

namespace hopattn::bench {

class LaunchGate {
 public:
  LaunchGate();
  // Opens the gate if it is still closed, so no stream stays held by a gate that is gone.
  ~LaunchGate();
  LaunchGate(const LaunchGate&) = delete;
  LaunchGate& operator=(const LaunchGate&) = delete;

  // Queues the closed gate on `stream`: what is queued after it starts once open() is called, or after
  // kTimeout by itself (the host may block while queueing, e.g. when the launch queue is full).
  Status close(cudaStream_t stream);
  // Opens the gate. True when it was still closed until now, so that nothing queued behind it started
  // before this call; false when it had opened by itself after the timeout.
  bool open();

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the host function that holds the stream
};

}  // namespace hopattn::bench
