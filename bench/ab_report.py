#!/usr/bin/env python3
"""Compare the A/B/A/B hopattn-bench runs that bench/ab.sh wrote: per shape, A's and B's TFLOP/s in
each round, B/A from the means, and whether the rounds agree (spread = the larger side's max/min - 1);
then per grid the geomean of B/A, and the shapes only one side timed (a grid row one build lacks, or
a shape it refused). Standard library only.

  python3 bench/ab_report.py DIR        # DIR holds <grid>_<a|b>_<round>.json
"""
import collections
import glob
import json
import math
import os
import re
import sys


def rows_of(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for r in data.get("rows", []):
        if r.get("status") != "ok":
            continue
        key = (r["dtype"], r["hdim"], r["seqlen_q"], r["seqlen_k"], r["batch"], r["heads_q"],
               r["heads_kv"], bool(r["causal"]), r.get("variant", "default"))
        out[key] = float(r["tflops"])
    return out


def shape_name(key):
    dtype, hdim, sq, sk, batch, hq, hkv, causal, variant = key
    return f"{dtype} d{hdim} {sq}x{sk} b{batch} h{hq}/{hkv}{' causal' if causal else ''} {variant}"


def collect(directory):
    runs = collections.defaultdict(lambda: {"a": [], "b": []})  # grid -> side -> [rows per round]
    for path in sorted(glob.glob(os.path.join(directory, "*_*_*.json"))):
        m = re.fullmatch(r"(.+)_([ab])_(\d+)\.json", os.path.basename(path))
        if m:
            runs[m.group(1)][m.group(2)].append(rows_of(path))
    return runs


def report(runs):
    lines = []
    for grid, sides in sorted(runs.items()):
        if not sides["a"] or not sides["b"]:
            lines.append(f"{grid}: missing the a or the b side")
            continue
        keys = [k for k in sides["a"][0] if all(k in r for r in sides["a"] + sides["b"])]
        lines.append(f"== {grid}: {len(sides['a'])} rounds of A and {len(sides['b'])} of B, TFLOP/s")
        ratios = []
        for k in keys:
            a = [r[k] for r in sides["a"]]
            b = [r[k] for r in sides["b"]]
            ratio = (sum(b) / len(b)) / (sum(a) / len(a))
            spread = max(max(x) / min(x) - 1 for x in (a, b))
            ratios.append(ratio)
            name = shape_name(k)
            flag = "  (rounds disagree)" if spread > abs(ratio - 1) and spread > 0.02 else ""
            lines.append(f"{name:48s} A {' '.join(f'{x:6.1f}' for x in a)} | B {' '.join(f'{x:6.1f}' for x in b)}"
                         f"  B/A {ratio:.3f}{flag}")
        if ratios:
            geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            lines.append(f"{grid}: geomean B/A {geomean:.3f} over {len(ratios)} shapes")
        for side, other in (("a", "b"), ("b", "a")):
            for k in sides[side][0]:
                if k in keys or not all(k in r for r in sides[side]):
                    continue
                name = shape_name(k)
                values = " ".join(f"{r[k]:6.1f}" for r in sides[side])
                lines.append(f"{name:48s} {side.upper()} only {values} (not in every {other.upper()} round)")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(report(collect(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
