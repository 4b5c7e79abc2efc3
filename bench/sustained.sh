#!/usr/bin/env bash
# The sustained (power-capped) rate of one shape: hopattn-bench with many timed calls in a row, and
# the median SM clock and board power nvidia-smi saw meanwhile (sampled every 100 ms; the samples
# include the gaps between calls, so read the power as rough). Sessions 8-11 report d 128 16k FP8
# over 300 calls this way (docs/perf-notes.md).
#
#   bench/sustained.sh BENCH CALLS hopattn-bench shape flags...
set -uo pipefail

if [[ $# -lt 3 ]]; then sed -n '2,7p' "$0"; exit 2; fi
bench="$1"; calls="$2"; shift 2
samples="$(mktemp)"
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 >"$samples" &
sampler=$!
row="$("$bench" "$@" --iters "$calls" --warmup 5 | tail -1)"
kill "$sampler"; wait "$sampler" 2>/dev/null
median() { cut -d, -f"$1" "$samples" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "$row | SM clock median $(median 1) MHz, power median $(median 2) W ($(wc -l <"$samples") samples)"
rm -f "$samples"
