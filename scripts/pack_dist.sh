#!/usr/bin/env bash
# Build what a GPU run needs and gather it into dist/ (git-ignored; carried to the device by
# the device tool's `carry`): libtilewire installed with its headers and CMake package, the CLI,
# the GPU test binary, the examples.
# DIST_DIR (default dist) names the folder: e.g. a worktree of an older commit packs into
# ../main/dist-before for gpu_run.sh's `hardening` mode (DIST_BEFORE).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build-env.sh ] && . ./build-env.sh
BUILD=${BUILD:-build}
# The measurement build: the benches' tracing-off row needs the kernels without trace code.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEWIRE_BENCH_KERNELS=ON >/dev/null
cmake --build "$BUILD" --target tilewire tilewire_cli tilewire_gpu_tests 02_allreduce 04_moe_dispatch_combine nvlink_ceiling coresidency_probe ep_ll_ceiling
D=${DIST_DIR:-dist}
rm -rf "$D" && mkdir -p "$D/bin" "$D/lib"
# An install prefix (lib/, include/, lib/cmake/tilewire: what `pip install .` links there with
# CMAKE_PREFIX_PATH=dist), plus the test binary, the examples and the ceiling probe in bin/.
cmake --install "$BUILD" --prefix "$D" >/dev/null
cp "$BUILD"/tests/tilewire_gpu_tests "$BUILD"/examples/02_allreduce "$BUILD"/examples/04_moe_dispatch_combine \
  "$BUILD"/nvlink_ceiling "$BUILD"/coresidency_probe "$BUILD"/ep_ll_ceiling "$D/bin/"
git rev-parse --short HEAD >"$D/COMMIT"
git diff --quiet HEAD -- src include tools tests examples || echo "$(cat "$D/COMMIT")+dirty" >"$D/COMMIT"
du -sh "$D"
