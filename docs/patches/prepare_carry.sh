#!/usr/bin/env bash
# Builds, on the machine without a GPU, everything docs/patches/device_call.sh runs on the GPU machine:
# main's and each patch's hopattn-bench and GPU test binary, and main's install prefix for the Python
# GPU suite, all xz-compressed into one git-ignored folder (about 48 MB: under the device tool's 64 MiB
# carry limit). Each patch is applied, built incrementally and reverted, so the build folder ends at main.
#
#   docs/patches/prepare_carry.sh BUILD_DIR CARRY_DIR     # e.g. build .carry/patches
#
# Then: run with carry [CARRY_DIR] and command `bash docs/patches/device_call.sh CARRY_DIR`.
set -euo pipefail
B="$1"; C="$2"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p "$C"
build() { cmake --build "$B" --target hopattn-bench hopattn_gpu_tests | tail -1; }
keep() {  # $1: the side (main or a patch); v139k is left out: it conflicts with v140, measure it if v140 fails
  xz -T0 -c "$B/bench/hopattn-bench" > "$C/bench_$1.xz"
  xz -T0 -c "$B/tests/hopattn_gpu_tests" > "$C/tests_$1.xz"
}
build && keep main
for p in v140-mla-seesaw v141-bwd-p-exchange-f16; do
  git apply "docs/patches/$p.patch"
  build && keep "$p"
  git apply -R "docs/patches/$p.patch"
done
build
rm -rf "$C/inst" && cmake --install "$B" --prefix "$C/inst" > /dev/null && xz -T0 "$C/inst/lib/libhopattn.a"
du -sh "$C"
