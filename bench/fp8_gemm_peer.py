#!/usr/bin/env python3
"""The FP8 (e4m3) GEMM rate through PyTorch (torch._scaled_mm, cuBLASLt), timed the way
hopattn-bench times attention: warm-up calls, then N calls each between its own pair of CUDA events,
median. Issue #5 states the FP8 attention targets beside a large FP8 GEMM; this puts that GEMM in
the same device call as hopattn-bench, under the same number of back-to-back calls (the H200's power
cap lowers the clock of long runs, and a short run and a long one differ by 5-10%).

  python3 bench/fp8_gemm_peer.py --m 16384 --n 16384 --k 8192 --iters 50 --warmup 10
prints one line: shape, calls, median ms, TFLOP/s (2 m n k per product).
"""
import argparse

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()

    # Random N(0, 1) operands in e4m3; b is passed column-major, as cuBLASLt's FP8 kernels want it.
    a = torch.randn(args.m, args.k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(args.n, args.k, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def product():
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    for _ in range(args.warmup):
        product()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.iters)]
    for start, end in events:  # queued back to back, as hopattn-bench queues its calls
        start.record()
        product()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    median_ms = times[len(times) // 2]
    tflops = 2.0 * args.m * args.n * args.k / (median_ms * 1e-3) / 1e12
    print(f"fp8_gemm m {args.m} n {args.n} k {args.k} calls {args.iters} median_ms {median_ms:.3f} "
          f"TFLOP/s {tflops:.1f}")


if __name__ == "__main__":
    main()
