#!/usr/bin/env bash
# Kernel cycles of one shape under several builds, on the GPU machine: the A/B measure of sessions
# 8-11 (docs/perf-notes.md, "Measure in cycles"). ncu with --clock-control none counts
# gpc__cycles_elapsed.max per launch, which the H200's power cap does not move (run to run ~0.5%),
# where bench TFLOP/s wander by 5-10% at 16k. Launches 3-6 are counted (after 2 warm-up calls); an
# FP8 split launch lists forward, combine, forward, combine.
#
#   bench/cycles_ab.sh "BENCH_A BENCH_B ..." hopattn-bench shape flags...
#   e.g. bench/cycles_ab.sh ".carry/base/hopattn-bench .carry/new/hopattn-bench" \
#          --dtype fp8 --batch 1 --heads 16 --seqlen-q 16384 --seqlen-k 16384 --hdim 128
set -uo pipefail

if [[ $# -lt 2 ]]; then sed -n '2,10p' "$0"; exit 2; fi
benches="$1"; shift
for bench in $benches; do
  echo "== $bench $*"
  ncu --clock-control none -k regex:attention_forward --launch-skip 2 -c 4 --metrics gpc__cycles_elapsed.max \
    "$bench" "$@" --iters 1 --warmup 3 2>&1 | awk '/gpc__cycles_elapsed.max/ {printf "%s ", $NF} END {print ""}'
done
