"""hopattn beside FlexAttention on sliding-window (local) attention layers, on the same tensors.

  python3 bench/window_peers.py                 # the layers below, forward and forward + backward
  python3 bench/window_peers.py --no-backward --samples 30

PyTorch's SDPA backends (cuDNN, FlashAttention-2) take no window, so FlexAttention (compiled with a
block mask of the band) is the peer. Layers: gpt-oss's local layers (d 64, 64 q / 8 kv heads, 128 keys:
window_size (127, 0)), Gemma 3's (d 128, 32 / 16 heads, 1024 keys) and Mistral 7B's (d 128, 32 / 8
heads, 4096 keys), causal. FLOPs count the visible pairs: 4 * b * h_q * pairs * d forward, 2.5x that
backward. Timing: the profiler's GPU time of each call's kernels (no host time), median of --samples;
the backward is forward + backward minus forward. Writes bench/results/<date>-h200-window-peers.json.
Needs torch with CUDA and hopattn importable (pip install, or python/device_build.sh's PYTHONPATH).
"""

import argparse

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import hopattn
from compare import kernel_ms, write_kernel_timing_rows  # bench/compare.py

# name, batch, q heads, kv heads, seqlen, head dim, window_left (keys before the diagonal)
LAYERS = [
    ("gpt-oss local", 2, 64, 8, 4096, 64, 127),
    ("gpt-oss local", 1, 64, 8, 16384, 64, 127),
    ("Gemma 3 local", 2, 32, 16, 8192, 128, 1023),
    ("Mistral 7B", 1, 32, 8, 16384, 128, 4095),
]


def visible_pairs(seqlen, window_left):
    return sum(min(i, window_left) + 1 for i in range(seqlen))


def measure(layer, samples, backward, compiled_flex):
    name, batch, heads_q, heads_kv, seqlen, hdim, window_left = layer
    make = lambda heads: torch.randn(batch, seqlen, heads, hdim, device="cuda", dtype=torch.bfloat16,
                                     requires_grad=backward)
    q, k, v = make(heads_q), make(heads_kv), make(heads_kv)
    band = lambda b, h, i, j: (j <= i) & (i - j <= window_left)
    block_mask = create_block_mask(band, None, None, seqlen, seqlen, device="cuda")
    impls = {
        "hopattn": lambda: hopattn.flash_attn_func(q, k, v, causal=True, window_size=(window_left, 0)),
        "flex": lambda: compiled_flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                      block_mask=block_mask, enable_gqa=True).transpose(1, 2),
    }
    flops = 4 * batch * heads_q * visible_pairs(seqlen, window_left) * hdim
    row = dict(layer=name, batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen=seqlen, hdim=hdim,
               window_left=window_left, fwd_ms={}, bwd_ms={}, fwd_tflops={}, bwd_tflops={})
    outputs = {}
    for impl, attend in impls.items():
        outputs[impl] = attend().detach()
        with torch.no_grad():
            row["fwd_ms"][impl] = kernel_ms(attend, samples, None)
        row["fwd_tflops"][impl] = flops / row["fwd_ms"][impl] / 1e9
        if backward:
            dout = torch.randn_like(outputs[impl])
            # autograd.grad returns the gradients rather than adding them into .grad, whose accumulation
            # from the second call on added an elementwise kernel per tensor to both sides.
            both = kernel_ms(lambda: torch.autograd.grad(attend(), (q, k, v), dout), samples, None)
            row["bwd_ms"][impl] = both - row["fwd_ms"][impl]
            row["bwd_tflops"][impl] = 2.5 * flops / row["bwd_ms"][impl] / 1e9
    row["max_abs_diff"] = (outputs["hopattn"].float() - outputs["flex"].float()).abs().max().item()
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--no-backward", action="store_true")
    parser.add_argument("--out", help="JSON path (default bench/results/<date>-h200-window-peers.json)")
    args = parser.parse_args()
    compiled_flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    print(f"{'layer':<15} {'shape':<28} {'pass':<4} {'hopattn ms':>10} {'flex ms':>9} {'ratio':>6}")
    for layer in LAYERS:
        row = measure(layer, args.samples, not args.no_backward, compiled_flex)
        rows.append(row)
        shape = f"b{row['batch']} {row['heads_q']}/{row['heads_kv']} s{row['seqlen']} d{row['hdim']} w{row['window_left']}"
        for kind in ("fwd", "bwd"):
            ms = row[kind + "_ms"]
            if ms:
                print(f"{row['layer']:<15} {shape:<28} {kind:<4} {ms['hopattn']:>10.4f} {ms['flex']:>9.4f} "
                      f"{ms['flex'] / ms['hopattn']:>6.2f}", flush=True)
        print(f"{'':<15} {'':<28} max |hopattn - flex| {row['max_abs_diff']:.2e}", flush=True)
    write_kernel_timing_rows(rows, args.out, "window-peers")


if __name__ == "__main__":
    main()
