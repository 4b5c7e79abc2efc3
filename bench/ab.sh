#!/usr/bin/env bash
# A/B/A/B timing of two builds of hopattn-bench on the GPU machine, in one call: the rounds alternate
# so that clock and thermal drift (up to 9% between rounds at 16k on the H200) hits both sides alike.
# Then bench/ab_report.py prints per-shape ratios, the spread between rounds and the geomean.
#
#   bench/ab.sh A_BENCH B_BENCH [--grid NAME]... [--rounds N] [-- hopattn-bench args...]
#
# A_BENCH, B_BENCH: hopattn-bench binaries (e.g. .carry/base/hopattn-bench, .carry/new/hopattn-bench).
# --grid: one or more grids (default paper); --rounds: A/B pairs per grid (default 2).
# Raw results go to $AB_DIR (default /tmp/hopattn-ab): <grid>_<a|b>_<round>.json and .txt, and
# report.txt. When $OUT is set (the device tool's fetch folder, which returns at most 8 files), the
# report and one archive of the raw results (ab_raw.tgz) are copied there.
set -uo pipefail

if [[ $# -lt 2 ]]; then sed -n '2,10p' "$0"; exit 2; fi
A="$1"; B="$2"; shift 2
grids=(); rounds=2; extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --grid) grids+=("$2"); shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "ab.sh: unknown argument '$1' (see the header)" >&2; exit 2 ;;
  esac
done
[[ ${#grids[@]} -eq 0 ]] && grids=(paper)
DIR="${AB_DIR:-/tmp/hopattn-ab}"
mkdir -p "$DIR"
for grid in "${grids[@]}"; do
  for ((r = 1; r <= rounds; ++r)); do
    for side in a b; do
      bin="$A"; [[ $side == b ]] && bin="$B"
      "$bin" --grid "$grid" --json "$DIR/${grid}_${side}_${r}.json" "${extra[@]}" > "$DIR/${grid}_${side}_${r}.txt" 2>&1 ||
        echo "ab.sh: $bin --grid $grid failed (see $DIR/${grid}_${side}_${r}.txt)" >&2
    done
  done
done
python3 "$(dirname "$0")/ab_report.py" "$DIR" | tee "$DIR/report.txt"
if [[ -n "${OUT:-}" && "$OUT" != "$DIR" ]]; then
  mkdir -p "$OUT"
  cp "$DIR/report.txt" "$OUT/ab_report.txt"
  tar czf "$OUT/ab_raw.tgz" -C "$DIR" .
fi
