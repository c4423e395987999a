#!/usr/bin/env bash
# scripts/test.sh — set up, build, run the tests; CI runs this (.ci/run).
#
#   1. scripts/setup.sh                       tools, GoogleTest, NCCL >= 2.28.9
#   2. configure + build into build/          Release, Ninja, tests on
#   3. ctest                                  CPU tests; GPU tests SKIP without a GPU
#      + scripts/nccl_span.sh                 NCCL 2.30.7 and 2.32.x: compile the NCCL users, run the shims
#   4. cmake --install into a temp prefix, then build and run tests/install_consumer
#      against it (find_package(tilewire) + tilewire::tilewire, a .cpp and a .cu)
#   5. the Python package: `pip install .` against that install (links it: no rebuild of the
#      library), in a venv under build-deps/ with the pinned build tools, then pytest tests/python
#
# Environment: TILEWIRE_BUILD_DIR (default build), CMAKE_BUILD_PARALLEL_LEVEL, extra configure
# flags in TILEWIRE_CMAKE_ARGS (e.g. -DCMAKE_CUDA_ARCHITECTURES=90a).
# Exits non-zero on the first failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${TILEWIRE_BUILD_DIR:-build}"
step() { printf '\n== test: %s\n' "$*"; }

step "setup"
scripts/setup.sh
# shellcheck source=/dev/null
source ./build-env.sh

step "configure ($BUILD)"
fresh=()
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD/CMakeCache.txt"; then
  fresh=(--fresh)  # an older configure with another generator: start the cache over
fi
# shellcheck disable=SC2086
cmake "${fresh[@]}" -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTILEWIRE_BUILD_TESTS=ON -DTILEWIRE_BUILD_TOOLS=ON ${TILEWIRE_CMAKE_ARGS:-}

step "build"
cmake --build "$BUILD"

step "ctest"
# --no-tests=error: a build that registered no tests is a broken build, not a pass.
ctest --test-dir "$BUILD" --output-on-failure --no-tests=error

step "NCCL version span"
# The translation units that include NCCL's headers, compiled against the other NCCL versions users
# have (torch 2.15's 2.30.7, the newest 2.32.x), and the version shims run against each.
# CI (CI=true) requires every version; elsewhere a machine that cannot fetch them skips, saying so.
NCCL_SPAN_REQUIRED=$([ "${CI:-}" = true ] && echo 1 || echo 0) BUILD="$BUILD" scripts/nccl_span.sh

step "install + consumer"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tilewire-test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/install" >/dev/null
echo "installed into $TMP/install"
# shellcheck disable=SC2086
cmake -S tests/install_consumer -B "$TMP/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TMP/install" ${TILEWIRE_CMAKE_ARGS:-}
cmake --build "$TMP/consumer"
"$TMP/consumer/tilewire_consumer"

step "python package"
PYV="$ROOT/build-deps/pyvenv"
if [ ! -x "$PYV/bin/python" ]; then python3 -m venv "$PYV"; fi
PIP_ROOT_USER_ACTION=ignore "$PYV/bin/python" -m pip install -q --disable-pip-version-check \
  scikit-build-core==0.10.7 nanobind==2.4.0 pytest==8.3.4
CMAKE_PREFIX_PATH="$TMP/install" PIP_ROOT_USER_ACTION=ignore "$PYV/bin/python" -m pip install -q \
  --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps .
(cd "$TMP" && "$PYV/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/python")

printf '\ntest: all passed\n'
