#!/usr/bin/env bash
# scripts/demo.sh — set up, build, run the demo on all visible GPUs:
#   tilewire info, then tilewire bench allreduce -b 8K -e 1G -f 4 (tilewire vs NCCL, checked).
#
# Builds only what it runs (the library and the CLI, target tilewire_cli) in build/.
# Runs with NCCL_NVLS_ENABLE=0 (no multicast, by policy) and, where the GPU boxes' torch venv
# exists, its NCCL 2.28.9 first on LD_LIBRARY_PATH: the system NCCL there is 2.28.3, and the
# device API must run with the NCCL its headers came from.
# Without a GPU: prints the info report, then one line, and exits 1.
#
# Environment: TILEWIRE_BUILD_DIR (default build), TILEWIRE_CMAKE_ARGS (extra configure flags),
# TILEWIRE_DEMO_ARGS (replace the bench arguments).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${TILEWIRE_BUILD_DIR:-build}"
TORCH_NCCL_LIB="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib"

scripts/setup.sh --no-gtest
# shellcheck source=/dev/null
source ./build-env.sh

# Same cache as scripts/test.sh; tests are configured only where GoogleTest exists (the GPU boxes
# may lack it), and never built here.
fresh=()
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD/CMakeCache.txt"; then
  fresh=(--fresh)
fi
tests=OFF
[ "${TILEWIRE_HAVE_GTEST:-0}" = 1 ] && tests=ON
# shellcheck disable=SC2086
cmake "${fresh[@]}" -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEWIRE_BUILD_TOOLS=ON \
  -DTILEWIRE_BUILD_TESTS=$tests ${TILEWIRE_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" --target tilewire_cli

CLI="$BUILD/tools/tilewire"
[ -x "$CLI" ] || { echo "demo: $CLI was not built" >&2; exit 1; }

export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if [ -d "$TORCH_NCCL_LIB" ]; then
  export LD_LIBRARY_PATH="$TORCH_NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

echo
echo "\$ $CLI info"
"$CLI" info

# A GPU is there when tilewire itself sees one (this honours CUDA_VISIBLE_DEVICES); if the
# report format is not understood, fall back to nvidia-smi.
info_json="$("$CLI" info --json 2>/dev/null || true)"
if [[ "$info_json" == *'"gpu_present":true'* ]]; then
  gpu=1
elif [[ "$info_json" == *'"gpu_present":false'* ]]; then
  gpu=0
elif command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  gpu=1
else
  gpu=0
fi
if [ "$gpu" = 0 ]; then
  echo "demo: no CUDA GPU on this machine; nothing to run"
  exit 1
fi

# shellcheck disable=SC2206
bench_args=(${TILEWIRE_DEMO_ARGS:--b 8K -e 1G -f 4})
echo
echo "\$ $CLI bench allreduce ${bench_args[*]}"
exec "$CLI" bench allreduce "${bench_args[@]}"
