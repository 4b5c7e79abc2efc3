"""hopattn beside PyTorch's SDPA backends on DeepSeek-style prefill layers (q/k head dim 192, v 128).

  python3 bench/mla_peers.py                    # the layers below, forward
  python3 bench/mla_peers.py --samples 30 --impl hopattn,sdpa_cudnn
  python3 bench/mla_peers.py --backward         # their backward (forward + backward minus forward)

DeepSeek V2/V3's multi-head latent attention, computed without absorbing its projections (prefill and
training): 128 heads, q and k of 192 columns (128 + 64 rotary), v and out of 128. FlashAttention-2 takes
one head dim for q, k and v, so the peers are the SDPA backends that take a v of its own: cuDNN and the
memory-efficient one; one a machine's PyTorch refuses is noted and skipped. FLOPs: 2 * b * h * pairs *
(192 + 128), pairs halved when causal; the backward's 2 * b * h * pairs * (3 * 192 + 2 * 128) (S, dK
and dQ at q/k's columns, dP and dV at v's). Timing: the profiler's GPU time of each call's kernels (no
host time), median of --samples; the backward as bwd_peers.py times it: forward + backward minus
forward, so that each side's workspace, row statistics and dq conversion count. Writes
bench/results/<date>-h200-mla-peers.json (-mla-bwd-peers with --backward). Needs torch with CUDA and
hopattn importable (pip install, or python/device_build.sh's PYTHONPATH).
"""

import argparse

import torch
from torch.nn.attention import SDPBackend

from compare import hopattn_impl, kernel_ms, sdpa_impl, write_kernel_timing_rows  # bench/compare.py

HEAD_DIM, HEAD_DIM_V = 192, 128
# name, batch, heads, seqlen, causal
LAYERS = [
    ("DeepSeek V3 prefill", 1, 128, 4096, True),
    ("DeepSeek V3 prefill", 1, 128, 16384, True),
    ("DeepSeek V3 training", 4, 128, 4096, True),
    ("DeepSeek V2-Lite", 2, 16, 8192, True),
    ("non-causal", 2, 16, 8192, False),
]


IMPLEMENTATIONS = {
    "hopattn": hopattn_impl(),
    "sdpa_cudnn": sdpa_impl(SDPBackend.CUDNN_ATTENTION),
    "sdpa_efficient": sdpa_impl(SDPBackend.EFFICIENT_ATTENTION),
}


def measure(layer, impls, samples, backward):
    name, batch, heads, seqlen, causal = layer
    make = lambda d: torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    q, k, v = make(HEAD_DIM), make(HEAD_DIM), make(HEAD_DIM_V)
    dout = torch.randn(batch, seqlen, heads, HEAD_DIM_V, device="cuda", dtype=torch.bfloat16)
    gemm_cols = 3 * HEAD_DIM + 2 * HEAD_DIM_V if backward else HEAD_DIM + HEAD_DIM_V
    flops = 2 * batch * heads * seqlen * seqlen * gemm_cols / (2 if causal else 1)
    row = dict(layer=name, batch=batch, heads=heads, seqlen=seqlen, causal=causal, hdim=HEAD_DIM, hdim_v=HEAD_DIM_V,
               backward=backward, ms={}, tflops={}, errors={})
    outputs = {}
    for impl in impls:
        attend = IMPLEMENTATIONS[impl]
        call = lambda: attend(q, k, v, causal)
        try:
            with torch.no_grad():
                forward_ms = kernel_ms(call, samples, None)
                outputs[impl] = [call()]
            row["ms"][impl] = forward_ms
            if backward:
                # autograd.grad returns the gradients rather than adding them into .grad (bwd_peers.py).
                gradients = lambda: torch.autograd.grad(call(), (q, k, v), dout)
                row["ms"][impl] = kernel_ms(gradients, samples, None) - forward_ms
                outputs[impl] = gradients()
        except Exception as error:  # a backend this PyTorch lacks for these shapes: note it, go on
            row["errors"][impl] = f"{type(error).__name__}: {str(error)[:200]}"
            row["ms"].pop(impl, None)
            outputs.pop(impl, None)
            continue
        row["tflops"][impl] = flops / row["ms"][impl] / 1e9
    peers = [impl for impl in outputs if impl != "hopattn"]
    if "hopattn" in outputs and peers:  # same tensors: the outputs (dq, dk, dv) must agree
        row["max_abs_diff_vs_" + peers[0]] = max(
            (ours.float() - theirs.float()).abs().max().item() for ours, theirs in zip(outputs["hopattn"], outputs[peers[0]]))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--backward", action="store_true", help="time the backward (dq, dk, dv)")
    parser.add_argument("--out", help="JSON path (default bench/results/<date>-h200-mla-peers.json)")
    args = parser.parse_args()
    impls = args.impl.split(",")
    rows = []
    print(f"{'layer':<22} {'shape':<22} " + " ".join(f"{impl + ' ms':>18}" for impl in impls) + "  peer / ours")
    for layer in LAYERS:
        row = measure(layer, impls, args.samples, args.backward)
        rows.append(row)
        shape = f"b{row['batch']} h{row['heads']} s{row['seqlen']}{' causal' if row['causal'] else ''}"
        cells = " ".join(f"{row['ms'][impl]:>18.4f}" if impl in row["ms"] else f"{'-':>18}" for impl in impls)
        ours = row["ms"].get("hopattn")
        ratios = " ".join(f"{impl}: {row['ms'][impl] / ours:.2f}x" for impl in impls
                          if impl != "hopattn" and impl in row["ms"] and ours)
        print(f"{row['layer']:<22} {shape:<22} {cells}  {ratios}", flush=True)
        for impl, error in row["errors"].items():
            print(f"{'':<22} {impl}: {error}", flush=True)
    write_kernel_timing_rows(rows, args.out, "mla-bwd-peers" if args.backward else "mla-peers")


if __name__ == "__main__":
    main()
