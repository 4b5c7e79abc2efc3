#!/usr/bin/env bash
# Builds only the Python extension against an installed hopattn, for a machine whose Python differs
# from the one the library was built with (the GPU machine: Python 3.12 with torch), so that the
# sm_90a kernels are not compiled again there.
#
#   python/device_build.sh PREFIX [OUTDIR]
#
# PREFIX: a hopattn install prefix (cmake --install <build with HOPATTN_SM90=ON> --prefix PREFIX).
# OUTDIR: where to build (default build-python-device); the package lands in OUTDIR/site.
# Needs cmake, a C++17 compiler, the CUDA toolkit and `python3 -m nanobind` on that machine.
# The last line printed is the PYTHONPATH to use, e.g.
#   export PYTHONPATH=$(python/device_build.sh .carry/hopattn | tail -1 | cut -d= -f2)
set -euo pipefail

if [[ $# -lt 1 || ! -d "$1" ]]; then
  echo "usage: $0 HOPATTN_INSTALL_PREFIX [OUTDIR]" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="$(cd "$1" && pwd)"
OUTDIR="$(mkdir -p "${2:-build-python-device}" && cd "${2:-build-python-device}" && pwd)"
PYTHON="${PYTHON:-python3}"

if [[ -z "${CUDACXX:-}" ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"  # lets find_package(CUDAToolkit) locate the toolkit
fi
generator=()
if [[ ! -f "$OUTDIR/build/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi

cmake -S "$ROOT/python" -B "$OUTDIR/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX" -DPython_EXECUTABLE="$(command -v "$PYTHON")" >&2
cmake --build "$OUTDIR/build" --parallel "$(nproc)" >&2
cmake --install "$OUTDIR/build" --prefix "$OUTDIR/site" --component python >&2
echo "PYTHONPATH=$OUTDIR/site"
