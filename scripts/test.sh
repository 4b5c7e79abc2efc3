#!/usr/bin/env bash
# Builds everything (library with the sm_90a kernels, CPU and GPU tests, bench) and runs the whole
# test suite. GPU tests skip themselves without a Hopper GPU; the CPU tests run anywhere.
#   scripts/test.sh [ctest args...]        e.g. scripts/test.sh -R Validation
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HOPATTN_BUILD_DIR:-$ROOT/build}"
export HOPATTN_BUILD_DIR="$BUILD"

"$ROOT/scripts/build.sh"
ctest --test-dir "$BUILD" --output-on-failure --no-tests=error --parallel "$(nproc)" "$@"

# ---- Python package tests ---------------------------------------------------------------------
# (owned by the Python engineer: append the pytest step here; it runs after the C++ suite passed)
"$ROOT/python/run_tests.sh"
