#!/usr/bin/env python3
"""The SASS lines of a kernel with the most warp-stall samples, from an ncu report's source page.

On the GPU machine (perf-notes session 31, call 7):
  ncu --clock-control none -k regex:attention_backward --launch-skip 1 -c 1 --section WarpStateStats \\
      --section SourceCounters -o /tmp/r -f build/bench/hopattn-bench --backward ... --iters 1 --warmup 1
  ncu --import /tmp/r.ncu-rep --csv --page source --print-source sass > /tmp/r.csv
  python3 bench/ncu_top_sass.py /tmp/r.csv 30
Prints per line: stall samples, their share of all, not-issued samples, executions, the instruction.
If the CSV's columns differ from the names below (another ncu version), it prints the header instead.
"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    with open(sys.argv[1], errors="replace") as f:
        rows = list(csv.reader(f))
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    header_at = next((i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)), None)
    if header_at is None:
        print("no header with a 'Source' column; first rows:", rows[:3])
        return
    header = [c.strip() for c in rows[header_at]]

    def column(prefix):
        return next((i for i, c in enumerate(header) if c.startswith(prefix)), None)

    source = column("Source")
    samples = column("Warp Stall Sampling (All")
    not_issued = column("Warp Stall Sampling (Not")
    executed = column("Instructions Executed")
    if samples is None:
        print("columns:", header)
        return
    used = max(c for c in (source, samples, not_issued, executed) if c is not None)
    lines = [r for r in rows[header_at + 1:] if len(r) > used]
    total = sum(number(r[samples]) for r in lines) or 1.0
    print(f"total samples {total:.0f}")
    for r in sorted(lines, key=lambda r: -number(r[samples]))[:count]:
        ni = number(r[not_issued]) if not_issued is not None else 0.0
        ex = number(r[executed]) if executed is not None else 0.0
        print(f"{number(r[samples]):8.0f} {100 * number(r[samples]) / total:5.1f}% notiss {ni:7.0f} exe {ex:10.0f}  "
              f"{r[source].strip()}")


if __name__ == "__main__":
    main()
