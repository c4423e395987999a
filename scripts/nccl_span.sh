#!/usr/bin/env bash
# scripts/nccl_span.sh — compile the translation units that include NCCL's headers against NCCL
# versions other than the build's: torch 2.15's 2.30.7 and the newest 2.32.x by default
# (NCCL_SPAN_VERSIONS). The device API changes between versions (src/runtime/nccl_compat.hpp
# lists how); only the build's version (2.28.9, torch 2.11's: the GPU machines') can run here and
# there, so the others are compiled, not run.
#
# Each version's headers come from its PyPI wheel (nvidia-nccl-cu13), include/ kept under
# build-deps/nccl-headers-<version>/ so that a second run downloads nothing. The compile commands are the
# configured build's (BUILD, default build: configure it first), with that version's include
# directory put ahead of the build's NCCL and the objects written to a scratch directory.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build-env.sh ] && . ./build-env.sh
BUILD=${BUILD:-build}
VERSIONS=${NCCL_SPAN_VERSIONS:-2.30.7 2.32.6}
# Every source that includes nccl.h or nccl_device.h without CUTLASS: the runtime, the device API's
# users (all-reduce, EP, the clock sync, the workspace reinit), the device API's own test.
TUS=(
  src/runtime/comm.cpp src/runtime/topology.cpp src/runtime/errors.cpp src/runtime/version.cpp
  src/trace/trace.cpp src/runtime/nccl_window.cu src/ops/allreduce/allreduce.cu src/ops/ep/kernels.cu
  src/ops/ep/ll.cu src/ops/ep/ep.cu src/trace/clock_sync.cu src/ops/gemm_allreduce/reinit.cu
)
[ -n "${NCCL_SPAN_TUS:-}" ] && read -ra TUS <<<"$NCCL_SPAN_TUS"  # a subset, for a quick look
[ -f "$BUILD/build.ninja" ] || { echo "nccl_span: no configured build in $BUILD (cmake -S . -B $BUILD -G Ninja)" >&2; exit 2; }
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
fail=0
for v in $VERSIONS; do
  dir=build-deps/nccl-headers-$v
  if [ ! -f "$dir/include/nccl.h" ]; then
    echo "nccl_span: fetching the headers of NCCL $v (nvidia-nccl-cu13==$v)"
    if ! python3 -m pip download -q --no-deps "nvidia-nccl-cu13==$v" -d "$SCRATCH/wheel"; then
      # Offline, or no pip: CI must compile every version (NCCL_SPAN_REQUIRED=1 there); elsewhere
      # the step says so and passes.
      if [ "${NCCL_SPAN_REQUIRED:-0}" = 1 ]; then echo "nccl_span: cannot fetch NCCL $v" >&2; exit 1; fi
      echo "nccl_span: SKIPPED NCCL $v (cannot fetch nvidia-nccl-cu13==$v: offline, or no pip)"
      continue
    fi
    python3 - "$SCRATCH"/wheel/*.whl "$dir" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if "/include/" in n and not n.endswith("/"):
            dst = os.path.join(out, "include", n.split("/include/", 1)[1])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "wb") as f:
                f.write(z.read(n))
PY
    rm -rf "$SCRATCH/wheel"
  fi
  inc=$(cd "$dir/include" && pwd)
  got=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH)/ {printf "%s%s", sep, $3; sep="."}' "$inc/nccl.h")
  [ "$got" = "$v" ] || { echo "nccl_span: $inc/nccl.h is NCCL $got, not $v" >&2; exit 1; }
  # The version-dependent host logic, run: tests/nccl_compat_check.cpp against these headers.
  # Every compile includes this first: it fails unless nccl.h is this version's (a -I that the
  # compiler driver adds itself, nvcc's toolkit include with a toolkit NCCL in it, would otherwise
  # win over ours and compile against the build's NCCL without a word).
  guard="$SCRATCH/guard-$v.h"
  printf '#include <nccl.h>\nstatic_assert(NCCL_VERSION_CODE == NCCL_VERSION(%s), "not NCCL %s");\n' \
    "$(tr . , <<<"$v")" "$v" >"$guard"
  if c++ -std=c++20 -I include -I "$inc" -isystem "${CUDA_HOME:-/usr/local/cuda}/include" -include "$guard" \
      tests/nccl_compat_check.cpp -o "$SCRATCH/compat" >"$SCRATCH/log" 2>&1 && "$SCRATCH/compat"; then
    :
  else
    echo "nccl_span: NCCL $v  nccl_compat_check FAILED"; { sed 's/^/    /' "$SCRATCH/log" | head -20; } || true
    fail=1
  fi
  # The translation units, NCCL_SPAN_JOBS (default: the cores) at a time.
  compile() {  # compile <tu>: writes $SCRATCH/<name>.status (ok | FAILED) and .log
    local tu=$1 name obj cmd compiler rest
    name=$(basename "$tu")
    obj=CMakeFiles/tilewire.dir/$tu.o
    cmd=$(ninja -C "$BUILD" -t commands "$obj" 2>/dev/null | tail -n1 || true)
    if [ -z "$cmd" ]; then echo "no compile command for $obj" >"$SCRATCH/$name.log"; echo FAILED >"$SCRATCH/$name.status"; return; fi
    compiler=${cmd%% *}
    rest=${cmd#* }
    rest=$(sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -o [^ ]+//' <<<"$rest")
    if (cd "$BUILD" && eval "$compiler -I $inc -include $guard $rest -o $SCRATCH/$name.o") >"$SCRATCH/$name.log" 2>&1; then
      echo ok >"$SCRATCH/$name.status"
    else
      echo FAILED >"$SCRATCH/$name.status"
    fi
  }
  jobs_max=${NCCL_SPAN_JOBS:-$(nproc)}
  for tu in "${TUS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    compile "$tu" &
  done
  wait
  for tu in "${TUS[@]}"; do
    name=$(basename "$tu")
    st=$(cat "$SCRATCH/$name.status" 2>/dev/null || echo FAILED)
    echo "nccl_span: NCCL $v  $tu  $st"
    if [ "$st" != ok ]; then
      { sed 's/^/    /' "$SCRATCH/$name.log" | grep -v Wrestrict | head -40; } || true
      fail=1
    fi
  done
done
exit $fail
