#include "launch_gate.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "cuda_check.hpp"

namespace hopattn::bench {
namespace {

// Queueing fifty calls takes milliseconds; a gate still closed after this long has a host stuck
// behind it, and opening it lets the host go on.
constexpr std::chrono::seconds kTimeout{5};

}  // namespace

struct LaunchGate::State {
  std::mutex mutex;
  std::condition_variable opened_cv;
  bool opened = false;
  bool timed_out = false;
};

LaunchGate::LaunchGate() : state_(std::make_shared<State>()) {}

LaunchGate::~LaunchGate() { open(); }

Status LaunchGate::close(cudaStream_t stream) {
  // The host function owns a reference of its own: it may run after this gate is destroyed.
  auto* held = new std::shared_ptr<State>(state_);
  const auto wait_until_open = [](void* arg) {
    const std::unique_ptr<std::shared_ptr<State>> ref(static_cast<std::shared_ptr<State>*>(arg));
    State& state = **ref;
    std::unique_lock<std::mutex> lock(state.mutex);
    if (!state.opened_cv.wait_for(lock, kTimeout, [&] { return state.opened; })) {
      state.timed_out = true;
      state.opened = true;
    }
  };
  if (const cudaError_t e = cudaLaunchHostFunc(stream, wait_until_open, held); e != cudaSuccess) {
    delete held;
    return cuda_status(e, "cudaLaunchHostFunc");
  }
  return Status::Ok();
}

bool LaunchGate::open() {
  bool held_until_now = false;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    held_until_now = !state_->timed_out;
    state_->opened = true;
  }
  state_->opened_cv.notify_all();
  return held_until_now;
}

}  // namespace hopattn::bench
