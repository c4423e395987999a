#!/usr/bin/env bash
# scripts/setup.sh — make this machine able to build tilewire. Idempotent, and fast when
# everything is already there (no package manager call, no network).
#
#   scripts/setup.sh [--no-gtest] [--nccl-wheel]
#     --no-gtest    GoogleTest is optional (the demo needs no tests): neither installed nor required
#     --nccl-wheel  use the PyPI wheel nvidia-nccl-cu13==2.28.9 even if another NCCL fits
#
# What it checks, and installs when missing:
#   cmake >= 3.25, ninja, GoogleTest (libgtest-dev)   apt-get (sudo only when not root)
#   nvcc                                              checked only: install the CUDA 13 toolkit yourself
#   NCCL headers >= 2.28.9 with the device API        $TILEWIRE_NCCL_ROOT, $NCCL_ROOT, the NCCL of the
#     (exactly torch's version when python3           environment's torch, the CUDA toolkit, the GPU
#      imports torch)                                 boxes' torch venv; else the PyPI wheel of that
#                                                     version into build-deps/ (a venv, or pip --target)
#   CUTLASS/CuTe headers (nvidia-cutlass==4.2.0.0)    $TILEWIRE_CUTLASS_INCLUDE, an importable cutlass_library
#                                                     of that version; else the PyPI wheel (headers only,
#                                                     --no-deps) into build-deps/cutlass-4.2.0.0 (pip --target)
#   matplotlib (optional: scripts/plot_trace.py)      python3's own, else the PyPI wheel into build-deps/python
# It writes ./build-env.sh (PATH, CUDACXX, TILEWIRE_NCCL_ROOT, TILEWIRE_CUTLASS_INCLUDE, LD_LIBRARY_PATH), which
# scripts/test.sh, scripts/demo.sh and scripts/pack_dist.sh source. Downloads go to build-deps/
# (git-ignored by /build*/).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/build-deps"
ENV_FILE="$ROOT/build-env.sh"
NCCL_WANT="2.28.9"
CMAKE_WANT="3.25"
CUTLASS_WANT="4.2.0.0"  # the PyPI nvidia-cutlass version (its headers say CUTLASS 4.2.0)
TORCH_NCCL="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl"

need_gtest=1
force_wheel=0
for a in "$@"; do
  case "$a" in
    --no-gtest) need_gtest=0 ;;
    --nccl-wheel) force_wheel=1 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "setup: unknown argument '$a' (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "setup: $*"; }
die() { echo "setup: ERROR: $*" >&2; exit 1; }
# ver_ge A B: is version A >= version B?
ver_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# ------------------------------------------------------------------ apt packages
cmake_version() { cmake --version 2>/dev/null | head -n1 | awk '{print $3}'; }

have_gtest() {
  [ -n "${GTEST_ROOT:-}" ] || [ -n "${GTest_DIR:-}" ] && return 0
  local inc="" lib=""
  for d in /usr/include /usr/local/include; do [ -f "$d/gtest/gtest.h" ] && inc=1; done
  for d in /usr/lib /usr/lib64 /usr/local/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu; do
    compgen -G "$d/libgtest.*" >/dev/null && lib=1
  done
  [ -n "$inc" ] && [ -n "$lib" ]
}

apt_pkgs=()
if ! command -v cmake >/dev/null || ! ver_ge "$(cmake_version)" "$CMAKE_WANT"; then apt_pkgs+=(cmake); fi
if ! command -v ninja >/dev/null; then apt_pkgs+=(ninja-build); fi
# With --no-gtest nothing is installed for it (the GPU machines may have no package mirror).
if ! have_gtest && [ "$need_gtest" = 1 ]; then apt_pkgs+=(libgtest-dev); fi

apt_install() {
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "setup: need root to install: $*; run: sudo apt-get install -y $*" >&2
      return 1
    fi
  fi
  command -v apt-get >/dev/null || { echo "setup: no apt-get here; install yourself: $*" >&2; return 1; }
  say "installing $* (apt-get)"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if [ ${#apt_pkgs[@]} -gt 0 ]; then
  apt_install "${apt_pkgs[@]}" || die "could not install ${apt_pkgs[*]}"
fi

# apt's cmake may still be too old (older distributions): fall back to the PyPI cmake.
extra_path=""
if ! ver_ge "$(cmake_version)" "$CMAKE_WANT"; then
  say "cmake $(cmake_version) < $CMAKE_WANT; installing cmake from PyPI into $DEPS/cmake"
  python3 -m pip install -q --target "$DEPS/cmake" "cmake>=$CMAKE_WANT,<4" ||
    die "cmake >= $CMAKE_WANT is required and could not be installed"
  extra_path="$DEPS/cmake/bin"
  export PATH="$extra_path:$PATH"
  export PYTHONPATH="$DEPS/cmake${PYTHONPATH:+:$PYTHONPATH}"
  ver_ge "$(cmake_version)" "$CMAKE_WANT" || die "cmake from PyPI did not run"
fi
command -v ninja >/dev/null || die "ninja is required (apt-get install ninja-build)"
gtest=0
have_gtest && gtest=1
[ "$gtest" = 1 ] || [ "$need_gtest" = 0 ] || die "GoogleTest is required (apt-get install libgtest-dev)"
[ "$gtest" = 1 ] || say "GoogleTest not found: tests will not be configured"

# ------------------------------------------------------------------ nvcc
NVCC="${CUDACXX:-}"
[ -n "$NVCC" ] && [ -x "$NVCC" ] || NVCC="$(command -v nvcc || true)"
for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [ -z "$NVCC" ] && [ -n "$c" ] && [ -x "$c/bin/nvcc" ] && NVCC="$c/bin/nvcc"
done
[ -n "$NVCC" ] || die "nvcc not found (PATH, \$CUDACXX, \$CUDA_HOME, /usr/local/cuda/bin). tilewire needs the CUDA 13 \
toolkit: install it (https://developer.nvidia.com/cuda-downloads) or put its bin/ on PATH."
NVCC="$(readlink -f "$NVCC")"
CUDA_ROOT="$(dirname "$(dirname "$NVCC")")"
NVCC_VERSION="$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
ver_ge "$NVCC_VERSION" 13.0 || say "WARNING: nvcc $NVCC_VERSION; tilewire is developed with CUDA 13.0"

# ------------------------------------------------------------------ NCCL
# nccl_version DIR: "2.28.9" from DIR/include/nccl.h, or nothing.
nccl_version() {
  local h="$1/include/nccl.h"
  [ -f "$h" ] || return 0
  local ma mi pa
  ma="$(sed -n 's/^#define NCCL_MAJOR *\([0-9]*\).*/\1/p' "$h")"
  mi="$(sed -n 's/^#define NCCL_MINOR *\([0-9]*\).*/\1/p' "$h")"
  pa="$(sed -n 's/^#define NCCL_PATCH *\([0-9]*\).*/\1/p' "$h")"
  [ -n "$ma" ] && [ -n "$mi" ] && [ -n "$pa" ] && echo "$ma.$mi.$pa"
}
# nccl_libdir DIR: the folder holding libnccl.so(.2), or nothing.
nccl_libdir() {
  local d
  for d in "$1/lib" "$1/lib64" "$1/lib/x86_64-linux-gnu"; do
    if [ -e "$d/libnccl.so.2" ] || [ -e "$d/libnccl.so" ]; then echo "$d"; return 0; fi
  done
}
# nccl_ok DIR: headers >= 2.28.9 with the device API, and a library next to them.
nccl_ok() {
  local v
  v="$(nccl_version "$1")"
  [ -n "$v" ] && ver_ge "$v" "$NCCL_WANT" && [ -f "$1/include/nccl_device.h" ] && [ -n "$(nccl_libdir "$1")" ]
}

# The NCCL of the environment's torch, when python3 imports torch: tilewire's Python package must
# load the NCCL torch loads (one libnccl per process, and the device-API structs change between
# versions), so its version is the one to build against, and its own files the first choice.
# TILEWIRE_TORCH_PYTHON picks the interpreter (default python3).
TORCH_PY="${TILEWIRE_TORCH_PYTHON:-python3}"
TORCH_NCCL_VERSION="$("$TORCH_PY" -c 'import torch; v = torch.cuda.nccl.version(); print(".".join(map(str, v[:3])) if isinstance(v, tuple) else "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100))' 2>/dev/null || true)"
if [ -n "$TORCH_NCCL_VERSION" ] && ! ver_ge "$TORCH_NCCL_VERSION" "$NCCL_WANT"; then
  say "torch here ships NCCL $TORCH_NCCL_VERSION, older than the device API tilewire needs ($NCCL_WANT):" \
    "building against $NCCL_WANT; tilewire's Python package will refuse to import beside this torch"
  TORCH_NCCL_VERSION=""
fi
TORCH_NCCL_DIR=""
if [ -n "$TORCH_NCCL_VERSION" ]; then
  TORCH_NCCL_DIR="$("$TORCH_PY" -c 'import nvidia.nccl as m, os; print(next((p for p in m.__path__ if os.path.isfile(os.path.join(p, "include", "nccl.h"))), ""))' 2>/dev/null || true)"
  say "torch here ships NCCL $TORCH_NCCL_VERSION${TORCH_NCCL_DIR:+ ($TORCH_NCCL_DIR)}: building against that version"
  NCCL_WANT="$TORCH_NCCL_VERSION"
fi
# nccl_fits DIR: nccl_ok, and the very version torch ships when there is a torch.
nccl_fits() { nccl_ok "$1" && { [ -z "$TORCH_NCCL_VERSION" ] || [ "$(nccl_version "$1")" = "$TORCH_NCCL_VERSION" ]; }; }

WHEEL_DIR="$DEPS/nccl-$NCCL_WANT"  # pip --target layout: $WHEEL_DIR/nvidia/nccl
VENV="$DEPS/venv"
wheel_root() {  # where an earlier run put the wheel, if it did
  local sp
  for sp in "$VENV"/lib/python3*/site-packages "$WHEEL_DIR"; do
    [ -d "$sp/nvidia/nccl" ] && nccl_fits "$sp/nvidia/nccl" &&
      [ "$(nccl_version "$sp/nvidia/nccl")" = "$NCCL_WANT" ] && { echo "$sp/nvidia/nccl"; return 0; }
  done
}

NCCL_ROOT_FOUND=""
if [ "$force_wheel" = 0 ]; then
  # An explicit root wins (any version with the device API: the caller chose it); then torch's
  # own NCCL; then the CUDA toolkit's and the GPU boxes' venv, at torch's version when there is one.
  for c in "${TILEWIRE_NCCL_ROOT:-}" "${NCCL_ROOT:-}"; do
    if [ -n "$c" ] && [ -z "$NCCL_ROOT_FOUND" ] && nccl_ok "$c"; then NCCL_ROOT_FOUND="$(readlink -f "$c")"; fi
  done
  for c in "$TORCH_NCCL_DIR" "$CUDA_ROOT" /usr/local/cuda "$TORCH_NCCL"; do
    if [ -z "$c" ] || [ -n "$NCCL_ROOT_FOUND" ]; then continue; fi
    if nccl_fits "$c"; then NCCL_ROOT_FOUND="$(readlink -f "$c")"; break; fi
    if [ -n "$(nccl_version "$c")" ]; then
      say "NCCL $(nccl_version "$c") at $c does not fit (need ${TORCH_NCCL_VERSION:->= $NCCL_WANT} with nccl_device.h and libnccl)"
    fi
  done
fi
[ -n "$NCCL_ROOT_FOUND" ] || NCCL_ROOT_FOUND="$(wheel_root || true)"
if [ -z "$NCCL_ROOT_FOUND" ]; then
  say "installing NCCL $NCCL_WANT from PyPI (nvidia-nccl-cu13==$NCCL_WANT) under $DEPS"
  mkdir -p "$DEPS"
  export PIP_ROOT_USER_ACTION=ignore
  if python3 -m venv "$VENV" >/dev/null 2>&1 && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "nvidia-nccl-cu13==$NCCL_WANT" ||
      die "pip install nvidia-nccl-cu13==$NCCL_WANT failed (is PyPI reachable?)"
  else
    rm -rf "$VENV"
    { command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; } ||
      die "need python3 with pip (apt-get install python3-pip python3-venv) to fetch NCCL $NCCL_WANT"
    python3 -m pip install -q --disable-pip-version-check --target "$WHEEL_DIR" "nvidia-nccl-cu13==$NCCL_WANT" ||
      die "pip install nvidia-nccl-cu13==$NCCL_WANT failed (is PyPI reachable?)"
  fi
  NCCL_ROOT_FOUND="$(wheel_root || true)"
  [ -n "$NCCL_ROOT_FOUND" ] || die "the nvidia-nccl-cu13 wheel installed, but no usable include/nccl.h + lib/libnccl.so.2 in it"
fi
NCCL_VERSION="$(nccl_version "$NCCL_ROOT_FOUND")"
NCCL_LIBDIR="$(nccl_libdir "$NCCL_ROOT_FOUND")"

# ------------------------------------------------------------------ CUTLASS (headers only)
# cutlass_ok DIR: DIR/cutlass/version.h says 4.2.x and DIR/cute/tensor.hpp exists.
cutlass_ok() {
  local h="$1/cutlass/version.h" ma mi
  [ -f "$h" ] && [ -f "$1/cute/tensor.hpp" ] || return 1
  ma="$(sed -n 's/^#define CUTLASS_MAJOR *\([0-9]*\).*/\1/p' "$h")"
  mi="$(sed -n 's/^#define CUTLASS_MINOR *\([0-9]*\).*/\1/p' "$h")"
  [ "$ma.$mi" = "$(echo "$CUTLASS_WANT" | cut -d. -f1-2)" ]
}
CUTLASS_DIR="$DEPS/cutlass-$CUTLASS_WANT"  # pip --target layout: $CUTLASS_DIR/cutlass_library/source/include
CUTLASS_INC=""
for c in "${TILEWIRE_CUTLASS_INCLUDE:-}" "$CUTLASS_DIR/cutlass_library/source/include"; do
  [ -n "$c" ] && cutlass_ok "$c" && { CUTLASS_INC="$(readlink -f "$c")"; break; }
done
if [ -z "$CUTLASS_INC" ] && command -v python3 >/dev/null; then  # an installed wheel of the pinned version
  c="$(python3 -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))' 2>/dev/null || true)"
  [ -n "$c" ] && cutlass_ok "$c" && CUTLASS_INC="$(readlink -f "$c")"
fi
if [ -z "$CUTLASS_INC" ]; then
  say "installing CUTLASS headers from PyPI (nvidia-cutlass==$CUTLASS_WANT, --no-deps) under $DEPS"
  { command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; } ||
    die "need python3 with pip (apt-get install python3-pip) to fetch nvidia-cutlass==$CUTLASS_WANT"
  rm -rf "$CUTLASS_DIR"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-deps \
    --target "$CUTLASS_DIR" "nvidia-cutlass==$CUTLASS_WANT" ||
    die "pip install --target $CUTLASS_DIR nvidia-cutlass==$CUTLASS_WANT failed (is PyPI reachable?)"
  cutlass_ok "$CUTLASS_DIR/cutlass_library/source/include" ||
    die "nvidia-cutlass==$CUTLASS_WANT installed, but $CUTLASS_DIR/cutlass_library/source/include has no CUTLASS 4.2 headers"
  CUTLASS_INC="$CUTLASS_DIR/cutlass_library/source/include"
fi

# ------------------------------------------------------------------ matplotlib (optional: trace plots)
# scripts/plot_trace.py (tilewire trace summarize --plot) draws with matplotlib. When python3 cannot
# import it, pip installs it with --target into build-deps/python, which plot_trace.py puts on its
# sys.path itself. Optional: without PyPI (the GPU boxes) the build goes on and plots are unavailable.
PYLIB="$DEPS/python"
have_matplotlib() { PYTHONPATH="$PYLIB${PYTHONPATH:+:$PYTHONPATH}" python3 -c 'import matplotlib' >/dev/null 2>&1; }
mpl=no
if command -v python3 >/dev/null && have_matplotlib; then
  mpl=yes
elif command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
  say "installing matplotlib from PyPI under $PYLIB (pip --target; for scripts/plot_trace.py)"
  rm -rf "$PYLIB"
  if PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-warn-conflicts --target "$PYLIB" \
    "matplotlib>=3.5" && have_matplotlib; then
    mpl=yes
  else
    say "WARNING: could not install matplotlib: trace plots (scripts/plot_trace.py) unavailable"
  fi
else
  say "WARNING: no python3 with pip: trace plots (scripts/plot_trace.py, needs matplotlib) unavailable"
fi

# ------------------------------------------------------------------ build-env.sh
py_line="# (cmake from the system)"
[ -z "$extra_path" ] || py_line="export PYTHONPATH=\"$DEPS/cmake\${PYTHONPATH:+:\$PYTHONPATH}\""
new_env="$(cat <<EOF
# Written by scripts/setup.sh; sourced by scripts/test.sh, demo.sh, pack_dist.sh. Do not edit.
export PATH="$(dirname "$NVCC")${extra_path:+:$extra_path}:\$PATH"
$py_line
export CUDACXX="$NVCC"
export TILEWIRE_NCCL_ROOT="$NCCL_ROOT_FOUND"
export TILEWIRE_CUTLASS_INCLUDE="$CUTLASS_INC"
# The NCCL runtime must be the NCCL the headers came from (device-API structs change per patch).
export LD_LIBRARY_PATH="$NCCL_LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export TILEWIRE_HAVE_GTEST=$gtest
EOF
)"
if [ ! -f "$ENV_FILE" ] || [ "$(cat "$ENV_FILE")" != "$new_env" ]; then
  printf '%s\n' "$new_env" >"$ENV_FILE.tmp" && mv "$ENV_FILE.tmp" "$ENV_FILE"
fi

say "cmake $(cmake_version), ninja $(ninja --version), nvcc $NVCC_VERSION ($CUDA_ROOT), \
NCCL $NCCL_VERSION ($NCCL_ROOT_FOUND), CUTLASS $CUTLASS_WANT ($CUTLASS_INC), GoogleTest $([ "$gtest" = 1 ] && echo yes || echo no), \
matplotlib $mpl"
say "export TILEWIRE_NCCL_ROOT=$NCCL_ROOT_FOUND   (all of it in ${ENV_FILE#"$ROOT"/})"
