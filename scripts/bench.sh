#!/usr/bin/env bash
# Builds hopattn-bench (with the sm_90a kernels) and runs it. Arguments go to the CLI, e.g.
#   scripts/bench.sh --grid quick --json results.json        scripts/bench.sh --help
# Without a Hopper GPU the CLI says so and times the CPU reference on a small problem.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HOPATTN_BUILD_DIR:-$ROOT/build}"
export HOPATTN_BUILD_DIR="$BUILD"

"$ROOT/scripts/build.sh" --target hopattn-bench
exec "$BUILD/bench/hopattn-bench" "$@"
