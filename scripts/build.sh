#!/usr/bin/env bash
# Configures (once) and builds hopattn with the sm_90a kernels. Used by bench.sh and test.sh.
#   scripts/build.sh [cmake --build args...]     e.g. scripts/build.sh --target hopattn-bench
# Environment: HOPATTN_BUILD_DIR (default <repo>/build), HOPATTN_CMAKE_ARGS (extra configure flags).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HOPATTN_BUILD_DIR:-$ROOT/build}"

# nvcc is often installed without being on PATH; CMake's CUDA detection looks at CUDACXX then PATH.
if [[ -z "${CUDACXX:-}" ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

# Ninja when present; otherwise CMake's default generator (Makefiles) with one job per core. An
# existing build folder keeps the generator it was configured with.
generator=()
if [[ ! -f "$BUILD/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi

# HOPATTN_CMAKE_ARGS is split on spaces on purpose: it carries several -D flags.
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DHOPATTN_SM90=ON \
  ${HOPATTN_CMAKE_ARGS:-}
cmake --build "$BUILD" --parallel "$(nproc)" "$@"
