"""hopattn beside the attention peers that ship with PyTorch, on the same tensors, in one run.

  python3 bench/compare.py                                  # paper grid, all implementations
  python3 bench/compare.py --hdim 128 --seqlens 4096,16384 --impl hopattn,sdpa_cudnn

Grid of the FlashAttention papers: 16k tokens per batch (batch = 16384 // seqlen), hidden 2048
(heads = 2048 // hdim), bf16, forward pass, causal and not. FLOPs: 4 * b * h * s^2 * d, halved when
causal. Every implementation reads the same q, k, v: allocated (batch, seqlen, heads, hdim) as
hopattn and flash-attention take them; the SDPA backends and FlexAttention get (batch, heads,
seqlen, hdim) views of them. Timing (--timing): `events`, CUDA events around `reps` back-to-back calls
(enough for ~1 ms), after warm-up, the median of the samples, which still counts host time where a
call's Python overhead exceeds its kernel; `kernel`, the profiler's GPU time of each call's kernels,
which counts no host time for anyone (the fair kernel-against-kernel ratio). Writes
bench/results/<date>-h200-compare[-kernel].json and a PNG plot beside it. Needs torch with CUDA,
matplotlib, and hopattn importable (pip install, or python/device_build.sh's PYTHONPATH).
"""

import argparse
import datetime
import json
import math
import pathlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hopattn

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def time_ms(fn, samples, flush):
    """Median milliseconds per call of fn over `samples` CUDA-event samples."""
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        fn()
    stop.record()
    stop.synchronize()
    reps = max(1, min(50, math.ceil(1.0 / (start.elapsed_time(stop) / 3))))
    times = []
    for _ in range(samples):
        if flush is not None:
            flush.zero_()  # L2 starts cold
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / reps)
    return sorted(times)[len(times) // 2]


def kernel_ms(fn, samples, flush):
    """Median over `samples` of the GPU time of one call's kernels, from the CUDA profiler: the sum of
    the durations of every kernel the call launched (cuDNN's memset included), with no host time or
    launch gaps. peers.py and the events mode time each call from the host, which charges a peer's
    Python dispatch to it (about 50 us per SDPA call on the H200, 13% of a 2k-token d128 call)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        if flush is not None:
            flush.zero_()
            torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and "Memcpy" not in e.name]
        times.append(sum(e.device_time for e in kernels) / 1000.0)
    return sorted(times)[len(times) // 2]


def write_kernel_timing_rows(rows, out, name):
    """Writes rows timed by kernel_ms, with the date, device and torch version, to `out` or to
    bench/results/<date>-h200-<name>.json (window_peers.py, bwd_peers.py)."""
    date = datetime.datetime.now(datetime.timezone.utc)
    path = pathlib.Path(out) if out else RESULTS / f"{date:%Y-%m-%d}-h200-{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(date=date.isoformat(timespec="seconds"), device=torch.cuda.get_device_name(),
                                    torch=torch.__version__, timing="kernel", rows=rows), indent=1))
    print("wrote", path)


def hopattn_impl():
    return lambda q, k, v, causal: hopattn.flash_attn_func(q, k, v, causal=causal)


def sdpa_impl(backend):
    def attend(q, k, v, causal):
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=causal)
        return out.transpose(1, 2)
    return attend


def flex_impl():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def attend(q, k, v, causal):
        mask = None
        if causal:  # seqlen_q == seqlen_k on this grid: top-left and bottom-right agree
            key = (q.shape[1], k.shape[1])
            if key not in masks:
                masks[key] = create_block_mask(lambda b, h, i, j: i >= j, None, None, *key, device="cuda")
            mask = masks[key]
        out = compiled(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask)
        return out.transpose(1, 2)
    return attend


IMPLEMENTATIONS = {"hopattn": hopattn_impl, "sdpa_flash2": lambda: sdpa_impl(SDPBackend.FLASH_ATTENTION),
                   "sdpa_cudnn": lambda: sdpa_impl(SDPBackend.CUDNN_ATTENTION), "flex": flex_impl}


def measure(impls, hdim, seqlen, causal, samples, flush, timer):
    batch, heads = max(1, 16384 // seqlen), 2048 // hdim
    q, k, v = (torch.randn(batch, seqlen, heads, hdim, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    flops = 4 * batch * heads * seqlen * seqlen * hdim / (2 if causal else 1)
    row = dict(hdim=hdim, seqlen=seqlen, causal=causal, batch=batch, heads=heads, tflops={}, ms={}, errors={})
    outputs = {}
    for name, attend in impls.items():
        try:
            outputs[name] = attend(q, k, v, causal)
            ms = timer(lambda: attend(q, k, v, causal), samples, flush)
        except Exception as error:  # a peer or a configuration missing on this machine: note it, go on
            row["errors"][name] = f"{type(error).__name__}: {str(error)[:200]}"
            continue
        row["ms"][name], row["tflops"][name] = ms, flops / ms / 1e9
    if "hopattn" in outputs and len(outputs) > 1:  # same tensors: the outputs must agree
        peer = next(name for name in outputs if name != "hopattn")
        row["max_abs_diff_vs_" + peer] = (outputs["hopattn"].float() - outputs[peer].float()).abs().max().item()
    del q, k, v, outputs
    return row


def print_row(row, names):
    cells = [f"{row['tflops'][n]:7.0f}" if n in row["tflops"] else "      -" for n in names]
    ours = row["tflops"].get("hopattn")
    ratios = [f"{ours / row['tflops'][n]:5.2f}x" if ours and n in row["tflops"] else "    -"
              for n in names if n != "hopattn"]
    print(f"d={row['hdim']:3d} causal={int(row['causal'])} s={row['seqlen']:6d} | " + " ".join(cells) +
          " | " + " ".join(ratios), flush=True)


def plot(rows, names, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    hdims = sorted({r["hdim"] for r in rows})
    causals = sorted({r["causal"] for r in rows})
    fig, axes = plt.subplots(len(causals), len(hdims), figsize=(5 * len(hdims), 4 * len(causals)), squeeze=False)
    for i, causal in enumerate(causals):
        for j, hdim in enumerate(hdims):
            ax = axes[i][j]
            cell = sorted((r for r in rows if r["hdim"] == hdim and r["causal"] == causal), key=lambda r: r["seqlen"])
            for name in names:
                points = [(r["seqlen"], r["tflops"][name]) for r in cell if name in r["tflops"]]
                if points:
                    ax.plot(*zip(*points), marker="o", label=name)
            ax.set_xscale("log", base=2)
            ax.set_title(f"hdim {hdim}, {'causal' if causal else 'non-causal'}, bf16 forward")
            ax.set_xlabel("sequence length (16k tokens per batch)")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--hdim", default="64,128,256")
    parser.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--causal", default="both", choices=["0", "1", "both"])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--flush-l2", action="store_true", help="zero a 256 MB buffer before each sample")
    parser.add_argument("--timing", default="events", choices=["events", "kernel"],
                        help="events: CUDA events around back-to-back calls; kernel: profiler GPU time of "
                             "each call's kernels (no host overhead on either side)")
    parser.add_argument("--out", help="JSON path (default bench/results/<date>-h200-compare[-kernel].json)")
    args = parser.parse_args()

    names = args.impl.split(",")
    impls = {name: IMPLEMENTATIONS[name]() for name in names}
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda") if args.flush_l2 else None
    causals = [False, True] if args.causal == "both" else [args.causal == "1"]
    header = dict(date=datetime.date.today().isoformat(), device=torch.cuda.get_device_name(),
                  torch=torch.__version__, cudnn=torch.backends.cudnn.version(),
                  hopattn_device=hopattn.device_description(), dtype="bfloat16", pass_="fwd",
                  samples=args.samples, flush_l2=args.flush_l2, timing=args.timing)
    print(json.dumps(header), flush=True)
    print("TFLOP/s: " + " ".join(f"{n:>7s}" for n in names) + " | hopattn / " +
          " ".join(n for n in names if n != "hopattn"), flush=True)
    rows = []
    for hdim in map(int, args.hdim.split(",")):
        for causal in causals:
            for seqlen in map(int, args.seqlens.split(",")):
                rows.append(measure(impls, hdim, seqlen, causal, args.samples, flush,
                                    kernel_ms if args.timing == "kernel" else time_ms))
                print_row(rows[-1], names)
                for name, error in rows[-1]["errors"].items():
                    print(f"    {name}: {error}", flush=True)

    suffix = "-kernel" if args.timing == "kernel" else ""
    out = pathlib.Path(args.out) if args.out else RESULTS / f"{header['date']}-h200-compare{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(header, rows=rows), indent=1))
    plot(rows, names, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}", flush=True)


if __name__ == "__main__":
    main()
