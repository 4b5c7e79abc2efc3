#!/usr/bin/env bash
# The benchmark run on the GPU machine, from the repo root: hopattn-bench on a grid, the PyTorch peers
# (cuDNN, FlashAttention-2, optionally flex) on the same shapes in the same session, then a report
# that merges them. Everything lands in $OUT (default /tmp/hopattn-bench-out).
#
#   bench/device_bench.sh [--grid paper|quick|long|ablation|fp8|bwd|decode|decode_wide|headdims] [--flex] [--back-to-back] [--kv-layout L] [--build DIR] [--peers PATH]
#
#   --grid   default paper. The peers script only runs the FlashAttention papers' shapes (16k tokens,
#            hidden 2048, bf16), so it is run for paper, quick, headdims and bwd (the backward: peers.py --bwd,
#            which also times their forward); long, ablation and fp8 time hopattn alone. decode times
#            the decoding grid, then bench/decode_peers.py on the same shapes (SDPA's flash, cuDNN
#            and efficient backends), then bench/decode_report.py (us, TB/s, ours/peer time ratios);
#            decode_wide (head dims 192 and 256) likewise.
#   --flex   also time FlexAttention (its Triton compile adds minutes; with decode, one per shape).
#   --back-to-back  (decode, decode_wide) both sides timed with events around groups of 10 calls instead
#            of each call, so that the calls' kernels follow one another as in a model's stream.
#   --kv-layout  (decode, decode_wide) the peers' k and v storage, decode_peers.py --kv-layout: heads-major
#            (SDPA's own, the default) or keys-major (hopattn-bench's, flash-attention's layout).
#   --build  build folder holding bench/hopattn-bench (default build); configured and built here
#            (HOPATTN_SM90=ON, tests off) when the binary is missing.
#   --peers  the peers script (default .carry/peers.py: a copy of shared/peers.py, since ../shared
#            does not travel to the GPU machine); decode uses bench/decode_peers.py instead.
# Outputs: ours.json/.txt, peers.json/.txt, report.txt, <date>-<gpu>[-grid].json/.png, gpu.txt;
# decode also shapes.json (the grid, from hopattn-bench --list) and no .png.
# Exit status: hopattn-bench's (non-zero when a row failed so badly the CUDA context was lost).
set -uo pipefail

grid=paper
flex=0
back_to_back=()
kv_layout=heads-major
build=build
peers=.carry/peers.py
while [ $# -gt 0 ]; do
  case "$1" in
    --grid) grid="$2"; shift 2 ;;
    --flex) flex=1; shift ;;
    --back-to-back) back_to_back=(--back-to-back); shift ;;
    --kv-layout) kv_layout="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "device_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
peer_pass=()
case "$grid" in
  paper) peer_hdims=64,128,256; peer_seqlens=512,1024,2048,4096,8192,16384 ;;
  quick) peer_hdims=64,128,256; peer_seqlens=8192 ;;
  bwd) peer_hdims=64,128,256; peer_seqlens=512,1024,2048,4096,8192,16384; peer_pass=(--bwd) ;;
  headdims) peer_hdims=80,96,160,192; peer_seqlens=2048,8192 ;;
  long|ablation|fp8|decode|decode_wide) peer_hdims="" ;;
  *) echo "device_bench.sh: --grid wants paper, quick, long, ablation, fp8, bwd, decode, decode_wide or headdims, got '$grid'" >&2; exit 2 ;;
esac

out="${OUT:-/tmp/hopattn-bench-out}"
mkdir -p "$out"
bin="$build/bench/hopattn-bench"

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv \
  > "$out/gpu.txt" 2>&1 || echo "nvidia-smi unavailable" > "$out/gpu.txt"

if [ ! -x "$bin" ]; then
  echo "== $bin missing: building it (HOPATTN_SM90=ON, minutes for the kernels)"
  generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  cmake -S . -B "$build" "${generator[@]}" -DHOPATTN_SM90=ON -DHOPATTN_TESTS=OFF > "$out/build.log" 2>&1 &&
    cmake --build "$build" --target hopattn-bench -j "$(nproc)" >> "$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; echo "device_bench.sh: build failed (log: $out/build.log)" >&2; exit 1; }
fi

echo "== hopattn-bench --grid $grid"
"$bin" --grid "$grid" "${back_to_back[@]}" --json "$out/ours.json" 2>&1 | tee "$out/ours.txt"
ours_status=${PIPESTATUS[0]}

peers_args=()
decoding=0
case "$grid" in decode|decode_wide) decoding=1 ;; esac
if [ "$decoding" = 1 ]; then
  if ! "$bin" --grid "$grid" --list --json "$out/shapes.json" > /dev/null; then
    echo "== peers: hopattn-bench --list failed; report without peers"
  elif ! python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
    echo "== peers: PyTorch with CUDA not importable; report without peers"
  else
    flex_arg=()
    [ "$flex" = 1 ] && flex_arg=(--flex)
    echo "== decode peers"
    python3 bench/decode_peers.py --shapes "$out/shapes.json" "${flex_arg[@]}" "${back_to_back[@]}" \
      --kv-layout "$kv_layout" --json "$out/peers.json" 2>&1 |
      tee "$out/peers.txt"
    [ -f "$out/peers.json" ] && peers_args=(--peers "$out/peers.json")
  fi
elif [ -z "$peer_hdims" ]; then
  echo "== peers: not run for grid $grid (its shapes are outside the peers' 16k-token grid)"
elif [ ! -f "$peers" ]; then
  echo "== peers: $peers not found (copy shared/peers.py there); report without peers"
elif ! python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  echo "== peers: PyTorch with CUDA not importable; report without peers"
else
  impls=sdpa_flash2,sdpa_cudnn
  [ "$flex" = 1 ] && impls="$impls,flex"
  echo "== peers ($impls)"
  python3 "$peers" --impl "$impls" --hdim "$peer_hdims" --seqlens "$peer_seqlens" --causal both \
    "${peer_pass[@]}" --json "$out/peers.json" 2>&1 | tee "$out/peers.txt"
  [ -f "$out/peers.json" ] && peers_args=(--peers "$out/peers.json")
fi

report=bench/report.py
[ "$decoding" = 1 ] && report=bench/decode_report.py
if [ -f "$out/ours.json" ]; then
  echo "== report"
  python3 "$report" --ours "$out/ours.json" "${peers_args[@]}" --out-dir "$out" 2>&1 | tee "$out/report.txt"
fi
exit "$ours_status"
