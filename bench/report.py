#!/usr/bin/env python3
"""Merge a hopattn-bench JSON with the JSON of the peers script (PyTorch's SDPA backends, flex) timed
in the same session, into one dated result file; print the side-by-side table; plot TFLOP/s vs seqlen.

  python3 bench/report.py --ours ours.json --peers peers.json --out-dir bench/results

Writes <out-dir>/<date>-<gpu>.json (<date>-<gpu>-<grid>.json for grids other than paper) and, when
matplotlib is installed, the same name with .png. Standard library only, matplotlib optional.

Shapes are matched on (batch, heads_q, heads_kv, seqlen_q, seqlen_k, hdim, causal) and the pass: our
forward rows against the peers' "pass_": "fwd" rows, our backward rows ("backward": true, variant
"backward": hopattn-bench --grid bwd) against their "bwd" rows (peers.py --bwd). The peers run bf16
only, so only our bf16 rows with the default kernel options get peer columns. Both sides count FLOPs
the same way (4*b*h*sq*sk*d, halved when causal; a backward 2.5x that), so TFLOP/s ratios are time
ratios.
"""
import argparse
import json
import os
import re
import sys

REFERENCE_PEER = "sdpa_cudnn"


def shape_key(batch, heads_q, heads_kv, seqlen_q, seqlen_k, hdim, causal):
    return (int(batch), int(heads_q), int(heads_kv), int(seqlen_q), int(seqlen_k), int(hdim), bool(causal))


def load_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"report.py: cannot read {what} JSON '{path}': {e}")


def pass_of(row):
    """"bwd" for a row of ours that timed hopattn::backward, else "fwd" (rows from before the field)."""
    return "bwd" if row.get("backward", False) else "fwd"


def peer_rows_by_shape(peers):
    """{(pass, shape key): {impl: row}} over the rows of the peers JSON ("fwd" and, with --bwd, "bwd")."""
    table = {}
    for r in peers.get("rows", []):
        key = shape_key(r["b"], r["hq"], r["hk"], r["s"], r["s"], r["d"], r["causal"])
        table.setdefault((r.get("pass_", "fwd"), key), {})[r["impl"]] = {"ms": r["ms"], "tflops": r["tflops"]}
    return table


def ratio(a, b):
    return a / b if a and b else None


def merge(ours, peers):
    """One entry per our row, plus the peer-only shapes; each with every side's TFLOP/s."""
    by_shape = peer_rows_by_shape(peers) if peers else {}
    all_on = {}  # ablation baseline per shape: the row with every kernel option on
    for r in ours["rows"]:
        if r["variant"] == "all_on" and r["status"] == "ok" and pass_of(r) == "fwd":
            all_on[shape_key(r["batch"], r["heads_q"], r["heads_kv"], r["seqlen_q"], r["seqlen_k"], r["hdim"],
                             r["causal"])] = r["tflops"]
    entries, matched = [], set()
    for r in ours["rows"]:
        key = shape_key(r["batch"], r["heads_q"], r["heads_kv"], r["seqlen_q"], r["seqlen_k"], r["hdim"], r["causal"])
        comparable = r["dtype"] == "bf16" and r["variant"] in ("default", "all_on", "backward")
        peer = by_shape.get((pass_of(r), key), {}) if comparable else {}
        if peer:
            matched.add((pass_of(r), key))
        entry = dict(zip(("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "hdim", "causal"), key))
        entry.update(dtype=r["dtype"], variant=r["variant"], backward=pass_of(r) == "bwd", status=r["status"],
                     message=r.get("message", ""), ours_ms=r["ms"], ours_tflops=r["tflops"], peers=peer,
                     ratio_to_sdpa_cudnn=ratio(r["tflops"], peer.get(REFERENCE_PEER, {}).get("tflops")))
        if r["variant"] not in ("default", "all_on") and pass_of(r) == "fwd" and key in all_on:
            entry["ratio_to_all_on"] = ratio(r["tflops"], all_on[key])
        entries.append(entry)
    # Peer-only shapes, of the passes we timed (peers.py --bwd also times the forward).
    our_passes = {pass_of(r) for r in ours["rows"]} or {"fwd"}
    for (pass_, key), peer in by_shape.items():
        if (pass_, key) in matched or pass_ not in our_passes:
            continue
        entry = dict(zip(("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "hdim", "causal"), key))
        entry.update(dtype="bf16", variant="backward" if pass_ == "bwd" else "default", backward=pass_ == "bwd",
                     status="not run", message="", ours_ms=None, ours_tflops=None, peers=peer,
                     ratio_to_sdpa_cudnn=None)
        entries.append(entry)
    return entries


def fmt(value, width, precision):
    return f"{value:{width}.{precision}f}" if value is not None else f"{'-':>{width}s}"


def print_table(entries, impls, ceilings):
    if ceilings:
        print("ceilings: bf16 GEMM {:.0f} TFLOP/s, copy {:.0f} GB/s".format(
            ceilings.get("bf16_gemm_tflops", 0), ceilings.get("copy_GBps", 0)))
    head = f"{'dtype':5s} {'b':>3s} {'hq/hkv':>7s} {'sq':>6s} {'sk':>6s} {'d':>3s} {'causal':>6s} {'variant':20s} {'ours':>7s}"
    head += "".join(f" {impl:>12s}" for impl in impls) + f" {'ours/cudnn':>10s}"
    print(head)
    for e in entries:
        line = (f"{e['dtype']:5s} {e['batch']:3d} {str(e['heads_q']) + '/' + str(e['heads_kv']):>7s} {e['seqlen_q']:6d} "
                f"{e['seqlen_k']:6d} {e['hdim']:3d} {'yes' if e['causal'] else 'no':>6s} {e['variant']:20s} "
                f"{fmt(e['ours_tflops'], 7, 1)}")
        line += "".join(f" {fmt(e['peers'].get(impl, {}).get('tflops'), 12, 1)}" for impl in impls)
        line += f" {fmt(e['ratio_to_sdpa_cudnn'], 10, 2)}"
        if e.get("ratio_to_all_on") is not None:
            line += f"  ({e['ratio_to_all_on']:.2f}x all_on)"
        if e["status"] not in ("ok", "not run"):
            line += f"  [{e['status']}: {e['message']}]"
        print(line)
    if impls:
        print("note: the peers are timed per call from Python (peers.py), which adds PyTorch's host time "
              "(~50-70 us a call on the H200) to theirs; bench/compare.py --timing kernel gives the "
              "kernel-against-kernel ratio")


def gpu_slug(device):
    """'NVIDIA H200 (sm_90, 132 SMs)' -> 'h200'."""
    m = re.search(r"\b(gh200|h200|h100|h800|h20)\b", device.lower())
    if m:
        return m.group(1)
    words = re.sub(r"[^a-z0-9]+", "-", device.lower().split("(")[0]).strip("-")
    return words or "gpu"


def plot(entries, impls, path, title):
    """TFLOP/s vs seqlen, one panel per (hdim, causal), over the paper-convention shapes
    (16k tokens, hidden 2048, bf16, sq == sk). Returns False when there is nothing to plot or no
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return False
    # The forward rows; a backward-only run (--grid bwd) plots its backward rows.
    variant = "default" if any(e["variant"] == "default" for e in entries) else "backward"
    points = [e for e in entries if e["dtype"] == "bf16" and e["variant"] == variant and e["seqlen_q"] == e["seqlen_k"]
              and e["heads_q"] == e["heads_kv"] and e["heads_q"] * e["hdim"] == 2048]
    panels = sorted({(e["hdim"], e["causal"]) for e in points})
    if not panels:
        print("no paper-convention shapes (hidden 2048, sq == sk, bf16) to plot")
        return False
    hdims = sorted({p[0] for p in panels})
    fig, axes = plt.subplots(len(hdims), 2, figsize=(10, 3.2 * len(hdims)), squeeze=False, sharey=True)
    for row, hdim in enumerate(hdims):
        for col, causal in enumerate((False, True)):
            ax = axes[row][col]
            sel = sorted((e for e in points if e["hdim"] == hdim and e["causal"] == causal), key=lambda e: e["seqlen_q"])
            series = [("hopattn", [e["ours_tflops"] for e in sel])]
            series += [(impl, [e["peers"].get(impl, {}).get("tflops") for e in sel]) for impl in impls]
            for name, values in series:
                xs = [e["seqlen_q"] for e, v in zip(sel, values) if v is not None]
                ys = [v for v in values if v is not None]
                if ys:
                    ax.plot(xs, ys, marker="o", linewidth=2.5 if name == "hopattn" else 1.2, label=name)
            ax.set_xscale("log", base=2)
            seqlens = [e["seqlen_q"] for e in sel]
            ax.set_xticks(seqlens, [f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens])
            ax.set_title(f"hdim {hdim}, {'causal' if causal else 'non-causal'}"
                         f"{', backward' if variant == 'backward' else ''}")
            ax.set_xlabel("seqlen")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=8)
    # Shared y axis: fix the limits once every panel is drawn, or the first panel's range clips the rest.
    top = max((y for ax in axes.flat for line in ax.lines for y in line.get_ydata()), default=1.0)
    axes[0][0].set_ylim(0, top * 1.08)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ours", required=True, help="JSON written by hopattn-bench --json")
    p.add_argument("--peers", help="JSON written by peers.py --json (optional)")
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    p.add_argument("--no-plot", action="store_true")
    a = p.parse_args()

    ours = load_json(a.ours, "hopattn-bench")
    if "rows" not in ours:
        sys.exit(f"report.py: '{a.ours}' has no 'rows': is it hopattn-bench --json output?")
    peers = load_json(a.peers, "peers") if a.peers else None
    entries = merge(ours, peers)
    # The reference peer first, then the others by name.
    impls = sorted({impl for e in entries for impl in e["peers"]}, key=lambda impl: (impl != REFERENCE_PEER, impl))
    ceilings = (peers or {}).get("ceilings", {})

    print(f"hopattn {ours.get('git_commit', '?')} on {ours.get('device', '?')}, {ours.get('date', '?')}, "
          f"grid {ours.get('grid', '?')}")
    print_table(entries, impls, ceilings)

    grid = ours.get("grid", "")
    name = f"{ours.get('date', 'undated')[:10]}-{gpu_slug(ours.get('device', ''))}" + ("" if grid == "paper" else f"-{grid}")
    os.makedirs(a.out_dir, exist_ok=True)
    result = {
        "date": ours.get("date"), "device": ours.get("device"), "git_commit": ours.get("git_commit"),
        "grid": grid, "backend": ours.get("backend"), "iters": ours.get("iters"), "write_lse": ours.get("write_lse"),
        "flops": "4*batch*heads_q*seqlen_q*seqlen_k*hdim, halved when causal (papers' convention); "
                 "backward rows 2.5x that",
        "reference_peer": REFERENCE_PEER, "ceilings": ceilings, "peers": impls, "shapes": entries,
    }
    json_path = os.path.join(a.out_dir, name + ".json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {json_path}")
    if not a.no_plot:
        png_path = os.path.join(a.out_dir, name + ".png")
        if plot(entries, impls, png_path, f"hopattn vs peers, {ours.get('device', '')}, {ours.get('date', '')[:10]}"):
            print(f"wrote {png_path}")


if __name__ == "__main__":
    main()
