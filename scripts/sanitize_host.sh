#!/usr/bin/env bash
# Builds the host side (CPU reference, argument validation, launch planning headers, the bench CLI) with
# AddressSanitizer and UndefinedBehaviorSanitizer, without the sm_90a kernels, and runs the CPU tests:
# the random malformed calls of test_validation_robustness.cpp must be answered without an overflow,
# an out-of-bounds read or a leak, not only without a crash. Any report fails the run (no recovery).
# The kernels' own checks are compute-sanitizer's, on a GPU (scripts/device_tests.sh).
#   scripts/sanitize_host.sh [ctest args...]        e.g. scripts/sanitize_host.sh -R Validation
# Environment: HOPATTN_SANITIZE_BUILD_DIR (default <repo>/build-sanitize).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HOPATTN_SANITIZE_BUILD_DIR:-$ROOT/build-sanitize}"
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

generator=()
if [[ ! -f "$BUILD/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOPATTN_SM90=OFF \
  -DHOPATTN_TESTS=ON -DHOPATTN_BENCH=ON -DHOPATTN_PYTHON=OFF "-DCMAKE_CXX_FLAGS=$FLAGS" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined"
cmake --build "$BUILD" --parallel "$(nproc)"
# package_consumer builds a separate project against the installed package, without these flags.
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
  ctest --test-dir "$BUILD" --output-on-failure --no-tests=error --parallel "$(nproc)" -E '^package_consumer$' "$@"
