#!/usr/bin/env python3
"""Pair hopattn-bench's decode rows with decode_peers.py's rows of the same shape (and variant), print
times in microseconds, TB/s (q, k, v read and out written once, over the time) and ours/peer time
ratios, and write the merged result as <date>-<gpu>-<grid>.json in --out-dir.

  python3 bench/decode_report.py --ours ours.json [--peers peers.json] --out-dir DIR

A ratio below 1 means hopattn took less time. Both sides count the same bytes, so a TB/s ratio is the
inverse time ratio. Marks: x = the peer refused GQA and read K/V expanded to hq heads (more bytes:
not like for like; left out of the geometric means), * after the variant = the peers timed the dense
shape of the same keys (paged and seqused_k have no SDPA form), ! = a side's calls were not all queued
before the GPU ran them (its time may hold host gaps). Standard library only.
"""
import argparse
import json
import math
import os
import sys

from decode_shapes import dense_equivalent, kv_layout, load_rows, pair_key
from report import gpu_slug

# Spec-sheet HBM rates in TB/s, to read the TB/s column against.
HBM_PEAK_TBPS = {"h200": 4.8, "h100": 3.35, "gh200": 4.0}


def us(ms):
    return ms * 1e3 if ms is not None else None


def fmt(value, width, precision):
    return f"{value:{width}.{precision}f}" if value is not None else f"{'-':>{width}s}"


def merge(ours_rows, peer_rows, impls):
    """One entry per our forward row: ours, each peer's row of the same pair_key, the ratios."""
    peers_by_key = {}
    for r in peer_rows:
        peers_by_key.setdefault(pair_key(r), {})[r["impl"]] = r
    entries = []
    for r in ours_rows:
        if r.get("backward"):
            continue
        peers = peers_by_key.get(pair_key(r), {})
        entry = {k: r[k] for k in ("dtype", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "hdim", "causal",
                                   "variant", "flops", "bytes")}
        entry.update(dense_equivalent_peers=dense_equivalent(r),
                     ours={k: r.get(k) for k in ("status", "ms", "tflops", "kv_tbps", "message")}, peers={})
        for impl in impls:
            p = peers.get(impl)
            if p is None:
                continue
            entry["peers"][impl] = {k: p.get(k) for k in ("status", "ms", "tflops", "kv_tbps", "expanded_kv",
                                                           "moved_bytes", "backlog_held", "message")}
            ok = r["status"] == "ok" and p["status"] == "ok"
            entry["peers"][impl]["ours_over_peer"] = r["ms"] / p["ms"] if ok else None
        like_for_like = [(impl, p["ms"]) for impl, p in entry["peers"].items()
                         if p["status"] == "ok" and not p["expanded_kv"]]
        best = min(like_for_like, key=lambda x: x[1], default=None)
        entry["best_peer"] = best[0] if best else None
        entry["ours_over_best"] = r["ms"] / best[1] if best and r["status"] == "ok" else None
        entries.append(entry)
    return entries


def print_table(entries, impls, ours_queued):
    head = (f"{'b':>3s} {'hq/hkv':>6s} {'sq':>2s} {'sk':>6s} {'d':>3s} {'c':>1s} {'variant':11s} {'ours us':>8s} "
            f"{'TB/s':>5s}")
    for impl in impls:
        head += f" | {impl + ' us':>17s} {'TB/s':>5s} {'ratio':>6s}"
    if impls:
        head += f" | {'ours/best':>9s}"
    print(head)
    for e in entries:
        ours = e["ours"]
        variant = e["variant"] + ("*" if e["dense_equivalent_peers"] and e["peers"] else "")
        heads = f"{e['heads_q']}/{e['heads_kv']}"
        line = (f"{e['batch']:3d} {heads:>6s} {e['seqlen_q']:2d} {e['seqlen_k']:6d} "
                f"{e['hdim']:3d} {'y' if e['causal'] else 'n'} {variant:11s} {fmt(us(ours['ms']), 8, 1)} "
                f"{fmt(ours['kv_tbps'], 5, 2)}")
        for impl in impls:
            p = e["peers"].get(impl)
            if p is None:
                line += f" | {'-':>17s} {'-':>5s} {'-':>6s}"
                continue
            marks = ("x" if p["expanded_kv"] else "") + ("!" if p["backlog_held"] is False else "")
            time_text = fmt(us(p["ms"]), 17, 1) if p["status"] == "ok" else f"{p['status']:>17s}"
            line += f" | {time_text} {fmt(p['kv_tbps'], 5, 2)} {fmt(p['ours_over_peer'], 6, 2)}{marks}"
        if impls:
            line += f" | {fmt(e['ours_over_best'], 9, 2)}"
        if ours["status"] != "ok":
            line += f"  [ours {ours['status']}: {ours['message']}]"
        elif ours["message"]:
            line += f"  [ours: {ours['message']}]"
        print(line)
    print("TB/s = the shape's bytes (q, k, v read, out written once) / time")
    if impls:
        print("ratio = ours us / peer us (< 1: hopattn faster); x: the peer refused GQA and read K/V expanded to hq "
              "heads (left out of ours/best and the means); *: the peers timed the dense shape of the same keys; "
              "!: the peer's calls were not all queued before the GPU ran them")
    if not ours_queued:
        print("hopattn-bench ran without --queue-ahead: its times include host launch gaps")


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def print_summary(entries, impls):
    """Geometric means of the like-for-like ratios: rows where the peer expanded K/V, or timed a dense
    equivalent, are left out."""
    same_layout = [e for e in entries if not e["dense_equivalent_peers"]]
    for impl in impls:
        ratios = [e["peers"][impl]["ours_over_peer"] for e in same_layout
                  if impl in e["peers"] and not e["peers"][impl]["expanded_kv"]]
        g = geomean(ratios)
        if g:
            print(f"geomean ours/{impl}: {g:.3f} over {len([r for r in ratios if r])} shapes "
                  "(expanded-K/V and dense-equivalent rows left out)")
    ratios = [e["ours_over_best"] for e in same_layout]
    g = geomean(ratios)
    if g:
        print(f"geomean ours/best peer: {g:.3f} over {len([r for r in ratios if r])} shapes")
    for e in entries:
        for impl, p in e["peers"].items():
            if p["status"] != "ok" and p["message"]:
                print(f"{impl} b {e['batch']} h {e['heads_q']}/{e['heads_kv']} sq {e['seqlen_q']} sk {e['seqlen_k']} "
                      f"d {e['hdim']} {e['variant']}: {p['status']}: {p['message']}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ours", required=True, help="JSON written by hopattn-bench --json (e.g. --grid decode)")
    p.add_argument("--peers", help="JSON written by decode_peers.py --json (optional)")
    p.add_argument("--out-dir", required=True, help="where to write the merged <date>-<gpu>-<grid>.json")
    a = p.parse_args()

    ours, ours_rows = load_rows(a.ours, "hopattn-bench", need=("status", "ms", "kv_tbps"))
    peers, peer_rows = (load_rows(a.peers, "decode_peers.py", need=("impl", "status", "ms", "kv_tbps"))
                        if a.peers else ({}, []))
    impls = peers.get("impls") or sorted({r["impl"] for r in peer_rows})
    entries = merge(ours_rows, peer_rows, impls)

    device = ours.get("device", "")
    peak = HBM_PEAK_TBPS.get(gpu_slug(device))
    print(f"hopattn {ours.get('git_commit', '?')} on {device}, {ours.get('date', '?')}, grid {ours.get('grid', '?')}"
          + (", timed back to back in groups of 10" if ours.get("back_to_back") else ""))
    if peers:
        print(f"peers: PyTorch {peers.get('torch', '?')}, cuDNN {peers.get('cudnn', '?')}, {peers.get('iters')} calls "
              f"(median), queued behind a GPU sleep"
              + (", timed back to back in groups of 10" if peers.get("back_to_back") else ""))
    if peers and bool(ours.get("back_to_back")) != bool(peers.get("back_to_back")):
        print("warning: one side was timed back to back (--back-to-back) and the other call by call: the ratios "
              "are not like for like")
    # decode_peers.py JSON from before --kv-layout: heads-major, the only layout it had.
    peer_layout = peers.get("kv_layout", "heads-major")
    unlike = [r for r in ours_rows if not r.get("backward") and kv_layout(r) != peer_layout]
    if peers and unlike:
        print(f"note: on {len(unlike)} rows ours read k and v {kv_layout(unlike[0])} and the peers {peer_layout} "
              "(keys-major: (b, sk, hkv, d), flash-attention's layout; heads-major: (b, hkv, sk, d), each head's keys "
              "contiguous): not the same memory (decode_peers.py --kv-layout, hopattn-bench --kv-heads-major)")
    copy = (peers.get("ceilings") or {}).get("copy_tbps")
    hbm = [text for text in (f"spec peak {peak} TB/s" if peak else "",
                             f"device-to-device copy {copy:.2f} TB/s" if copy else "") if text]
    if hbm:
        print("HBM: " + ", ".join(hbm))
    print_table(entries, impls, ours.get("queue_ahead", False))
    print_summary(entries, impls)

    grid = ours.get("grid", "decode")
    name = f"{ours.get('date', 'undated')[:10]}-{gpu_slug(device)}-{grid}.json"
    os.makedirs(a.out_dir, exist_ok=True)
    path = os.path.join(a.out_dir, name)
    result = {
        "date": ours.get("date"), "device": device, "git_commit": ours.get("git_commit"), "grid": grid,
        "queue_ahead": ours.get("queue_ahead"), "write_lse": ours.get("write_lse"), "iters": ours.get("iters"),
        "torch": peers.get("torch"), "cudnn": peers.get("cudnn"), "hbm_peak_tbps": peak,
        "ceilings": peers.get("ceilings", {}), "peers": impls,
        "peers_kv_layout": peer_layout if peers else None,
        "bytes": "q, k, v read and out written once (k, v: the seqlen_k keys in use); kv_tbps = bytes / time",
        "ratios": "ours_over_peer = our time / the peer's (< 1: hopattn faster); ours_over_best against the fastest "
                  "peer that did not expand K/V",
        "shapes": entries,
    }
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
