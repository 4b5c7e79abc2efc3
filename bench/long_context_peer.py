"""cuDNN (through PyTorch SDPA) on the long-context GQA case of hopattn-bench's `--grid long`:
batch 1, 64 query heads, 8 KV heads, head dim 128, seqlen 131072, causal, bf16. Prints the median
time of a few calls (CUDA events) so that it can be put beside hopattn-bench in the same run.

  python3 bench/long_context_peer.py [--seqlen N] [--iters N]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=131072)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    s, hq, hkv, d = args.seqlen, 64, 8, 128
    q = torch.randn(1, hq, s, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16)

    def call():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    ms = sorted(times)[len(times) // 2]
    flops = 4 * hq * s * s * d / 2
    print(f"sdpa_cudnn long-context b=1 hq={hq} hkv={hkv} s={s} d={d} causal=1: {ms:.1f} ms, "
          f"{flops / ms / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
