"""hopattn's backward beside cuDNN's (PyTorch SDPA) on the papers' grid, kernel time, same tensors.

  python3 bench/bwd_peers.py                     # d 64, 128, 256 x 512 .. 16k tokens, causal and not
  python3 bench/bwd_peers.py --hdims 64 --seqlens 512,1024 --samples 10

The grid is the FlashAttention papers' (16k tokens a batch, hidden 2048, bf16). Timing: the profiler's
GPU time of every kernel a call launches (compare.py's kernel_ms: no host time, no launch gaps), median
of --samples; the backward is forward + backward minus forward, as in window_peers.py, so each side's
workspace setup, row statistics and dq conversion count. `hopattn-bench --grid bwd` beside
`peers.py --bwd` times each call from the host instead, which adds PyTorch's dispatch to cuDNN's time.
FLOPs: 2.5x the forward's 4 * b * h * s^2 * d (halved when causal), as the papers count them.
Writes bench/results/<date>-h200-bwd-peers.json. Needs torch with CUDA and hopattn importable.
"""

import argparse

import torch

from compare import IMPLEMENTATIONS, kernel_ms, write_kernel_timing_rows  # bench/compare.py

PEERS = ("hopattn", "sdpa_cudnn")


def measure(hdim, seqlen, causal, samples):
    batch, heads = 16384 // seqlen, 2048 // hdim
    make = lambda: torch.randn(batch, seqlen, heads, hdim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q, k, v = make(), make(), make()
    flops = 2.5 * 4 * batch * heads * seqlen * seqlen * hdim / (2 if causal else 1)
    dout = torch.randn_like(q)
    row = dict(hdim=hdim, seqlen=seqlen, batch=batch, heads=heads, causal=causal, bwd_ms={}, bwd_tflops={})
    grads = {}
    for name in PEERS:
        attend = IMPLEMENTATIONS[name]()
        call = lambda: attend(q, k, v, causal)
        with torch.no_grad():
            fwd = kernel_ms(call, samples, None)
        # autograd.grad returns the gradients rather than adding them into .grad, whose accumulation
        # from the second call on would add an elementwise kernel per tensor to both sides.
        gradients = lambda: torch.autograd.grad(call(), (q, k, v), dout)
        both = kernel_ms(gradients, samples, None)
        row["bwd_ms"][name] = both - fwd
        row["bwd_tflops"][name] = flops / row["bwd_ms"][name] / 1e9
        grads[name] = [g.float() for g in gradients()]
    # The largest difference of dq, dk, dv between the two, relative to the largest magnitude of each.
    row["max_rel_grad_diff"] = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(*grads.values()))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hdims", default="64,128,256")
    parser.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--out", help="JSON path (default bench/results/<date>-h200-bwd-peers.json)")
    args = parser.parse_args()
    rows = []
    print(f"{'shape':<30} {'hopattn ms':>10} {'cudnn ms':>9} {'cudnn/ours':>10} {'TFLOP/s':>8} {'grad diff':>9}")
    for hdim in map(int, args.hdims.split(",")):
        for causal in (False, True):
            for seqlen in map(int, args.seqlens.split(",")):
                row = measure(hdim, seqlen, causal, args.samples)
                rows.append(row)
                ms = row["bwd_ms"]
                shape = f"d{hdim} s{seqlen} b{row['batch']} h{row['heads']}{' causal' if causal else ''}"
                # Speed ratio: above 1 means hopattn is faster.
                print(f"{shape:<30} {ms['hopattn']:>10.4f} {ms['sdpa_cudnn']:>9.4f} "
                      f"{ms['sdpa_cudnn'] / ms['hopattn']:>10.2f} {row['bwd_tflops']['hopattn']:>8.1f} "
                      f"{row['max_rel_grad_diff']:>9.1e}", flush=True)
    write_kernel_timing_rows(rows, args.out, "bwd-peers")


if __name__ == "__main__":
    main()
