#!/usr/bin/env bash
# The sustained (power-capped) rate of one shape: a benchmark command with many timed calls in a
# row, and the median SM clock and board power nvidia-smi saw while the GPU was busy (sampled every
# 100 ms; samples under 50% utilization, such as a Python process importing torch, are left out).
# Sessions 8-12 report d 128 16k FP8 over 300 calls this way (docs/perf-notes.md). The command gets
# --iters CALLS --warmup 5: hopattn-bench, or bench/fp8_gemm_peer.py for the FP8 GEMM beside it.
#
#   bench/sustained.sh BENCH CALLS shape flags...
set -uo pipefail

if [[ $# -lt 3 ]]; then sed -n '2,8p' "$0"; exit 2; fi
bench="$1"; calls="$2"; shift 2
samples="$(mktemp)"
nvidia-smi --query-gpu=clocks.sm,power.draw,utilization.gpu --format=csv,noheader,nounits -lms 100 >"$samples" &
sampler=$!
row="$("$bench" "$@" --iters "$calls" --warmup 5 | tail -1)"
kill "$sampler"; wait "$sampler" 2>/dev/null
busy="$(mktemp)"
awk -F', *' '$3 >= 50' "$samples" >"$busy"
median() { cut -d, -f"$1" "$busy" | sort -n | awk '{v[NR] = $1} END {print (NR ? v[int((NR + 1) / 2)] : "n/a")}'; }
echo "$row | busy: SM clock median $(median 1) MHz, power median $(median 2) W ($(wc -l <"$busy") of $(wc -l <"$samples") samples)"
rm -f "$samples" "$busy"
