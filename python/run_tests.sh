#!/usr/bin/env bash
# Builds the Python package with pip and runs its pytest suite (scripts/test.sh calls this).
#   python/run_tests.sh [pytest args...]
#
# The package is built by `pip install .` in a virtual environment, as a user would, but host-only
# (HOPATTN_SM90=OFF): the CPU suite exercises the reference backend, and the host-only build takes
# about a minute on two cores where the sm_90a kernels take several (scripts/build.sh has already
# compiled them once for the C++ tests). The GPU tests skip without torch and a Hopper GPU; on the
# GPU machine use python/device_build.sh instead.
# Environment: HOPATTN_BUILD_DIR (default <repo>/build) holds the virtual environment.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HOPATTN_BUILD_DIR:-$ROOT/build}"
VENV="$BUILD/python-venv"

if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
# No torch here: the torch tests skip; ml_dtypes brings bfloat16 and float8 to NumPy.
"$PY" -m pip install --quiet --disable-pip-version-check numpy pytest ml_dtypes nanobind scikit-build-core
HOPATTN_SM90=OFF "$PY" -m pip install --quiet --disable-pip-version-check --no-build-isolation "$ROOT"

# Run from the repo root so that the installed package, not python/hopattn without _C, is imported.
cd "$ROOT"
set +e
"$PY" -m pytest python/tests -q -p no:cacheprovider "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "python tests: pytest collected no tests; that is a failure here" >&2
  exit 1
fi
exit $rc
