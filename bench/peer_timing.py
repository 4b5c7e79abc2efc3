"""GPU time of a PyTorch call, measured as hopattn-bench measures its own (bench/gpu_timing.cpp): inputs
rotated until they exceed the L2, warm-up, then all timed calls queued behind a GPU sleep before any of
them runs, each bracketed by its own pair of CUDA events; the median. With group > 1 (hopattn-bench's
--back-to-back) the events bracket groups of that many calls instead, and the time is a group's mean.

The sleep is what makes a decoding peer's time its GPU time: timed one call at a time, PyTorch's host
work per call (tens of microseconds) would be longer than the kernel and the events would time the host.
"""
import time

import torch

# As gpu_timing.cpp: sets of inputs until together they pass twice the H100/H200 L2 (50-60 MB).
ROTATION_BYTES = 128 << 20
MAX_INPUT_SETS = 64
# The longest sleep asked for; queueing fifty calls takes milliseconds.
MAX_SLEEP_MS = 2000.0


def input_sets_for(set_bytes):
    """How many input sets of set_bytes each to rotate through (1 to MAX_INPUT_SETS)."""
    return max(1, min(MAX_INPUT_SETS, -(-ROTATION_BYTES // max(1, set_bytes))))


class SleepGate:
    """Holds the current stream with torch.cuda._sleep while the host queues work behind it."""

    def __init__(self):
        torch.cuda._sleep(1000)  # the first launch loads the kernel
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        start.record()
        torch.cuda._sleep(cycles)
        stop.record()
        stop.synchronize()
        self.cycles_per_ms = cycles / start.elapsed_time(stop)
        self._open = None

    def close(self, ms):
        """Queues a sleep of about `ms` milliseconds; the work queued next waits behind it."""
        torch.cuda._sleep(int(ms * self.cycles_per_ms))
        self._open = torch.cuda.Event()
        self._open.record()

    def still_closed(self):
        """True while the sleep runs, so nothing queued behind it has started yet."""
        return not self._open.query()


def median_gpu_ms(calls, gate, iters, warmup, group=1):
    """Times zero-argument callables `calls` (one per input set, rotated), `group` calls between a pair
    of events. Returns (median ms a call, backlog_held): backlog_held is False when the sleep ran out
    before every timed call was queued, twice (the second try sleeps four times longer), so that times
    may hold host launch gaps."""
    n = len(calls)
    calls[0]()  # alone first: one-time setup (cuDNN plans, Triton compiles)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for i in range(1, warmup + 1):
        calls[i % n]()
    host_ms_per_call = (time.perf_counter() - started) * 1e3 / max(1, warmup)
    torch.cuda.synchronize()

    groups = -(-iters // group)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(groups)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(groups)]
    held = False
    for attempt in range(2):
        gate.close(min(MAX_SLEEP_MS, 5.0 + 2.0 * groups * group * host_ms_per_call * 4**attempt))
        for g in range(groups):
            starts[g].record()
            for j in range(group):
                calls[(g * group + j + 1) % n]()
            stops[g].record()
        held = gate.still_closed()
        torch.cuda.synchronize()
        if held:
            break
    times = sorted(a.elapsed_time(b) / group for a, b in zip(starts, stops))
    return times[len(times) // 2], held


def copy_tbps(gate, gib=1, iters=10):
    """The HBM rate a device-to-device copy reaches (bytes read plus written / time), in TB/s: the
    practical ceiling for a memory-bound call, beside the spec sheet's peak."""
    x = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms, _ = median_gpu_ms([lambda: y.copy_(x)], gate, iters, warmup=3)
    return 2 * x.numel() / (ms * 1e9)
