#!/usr/bin/env bash
# Install the CUDA and NVML clients that tests/clients runs, at the versions pinned in
# tests/clients/requirements.txt, and NVIDIA's CUDA stack that tests/realstack runs (PyTorch,
# CuPy, libcudart), pinned in tests/realstack/requirements.txt, into .venv.  Safe to run again:
# what is installed at its pinned version is skipped, and pycuda's wheel, once built, is kept
# under .venv/cgpu-clients.
#   - pycuda is built from its sdist against the CUDA headers, linked to the simulator's
#     libcuda.so.1 (no driver here);
#   - numba-cuda goes into a directory of its own (.venv/cgpu-clients/numba-cuda): installed
#     in the venv, its import hook would replace numba's built-in CUDA target, which the
#     matrix also runs;
#   - libcudart 11.8 too (.venv/cgpu-clients/cudart-cu11): its headers share a folder with
#     libcudart 12.9's, which CuPy compiles with.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$(pwd)/.venv/bin/python"
REQ=tests/clients/requirements.txt
CACHE="$(pwd)/.venv/cgpu-clients"
SEPARATE='^(pycuda|numba-cuda)=='
mkdir -p "$CACHE"

pin() { grep -E "^$1==" "$REQ" | cut -d= -f3; }

# Which of the requirement lines given on stdin are not installed at their version.
missing() {
  "$PY" -c '
import sys
from importlib.metadata import PackageNotFoundError, version
for line in sys.stdin:
    name, _, want = line.strip().partition("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    if have != want:
        print(line.strip())
'
}

plain="$(grep -E '^[A-Za-z]' "$REQ" | grep -v -E "$SEPARATE" | missing)"
if [ -n "$plain" ]; then
  echo "clients: installing $(echo "$plain" | tr '\n' ' ')"
  # shellcheck disable=SC2086
  "$PY" -m pip install -q $plain
fi

# The real CUDA stack: the pip lines of tests/realstack/requirements.txt (not the `deb:` ones),
# torch with its nvidia-* wheels (about 3 GB), CuPy and libcudart 12.9.
REAL=tests/realstack/requirements.txt
real="$(grep -E '^[A-Za-z]' "$REAL" | grep -v -E '^deb:|^nvidia-cuda-runtime-cu11==' | missing)"
if [ -n "$real" ]; then
  echo "clients: installing $(echo "$real" | tr '\n' ' ')"
  # shellcheck disable=SC2086
  "$PY" -m pip install -q $real
fi

# numba-cuda, beside the venv; its dependencies (numba, cuda-bindings, cuda-core) are above.
v="$(pin numba-cuda)"
target="$CACHE/numba-cuda"
if ! ls "$target"/numba_cuda-"$v".dist-info >/dev/null 2>&1; then
  echo "clients: installing numba-cuda $v into $target"
  rm -rf "$target"
  "$PY" -m pip install -q --no-deps --target "$target" "numba-cuda==$v"
fi

# libcudart 11.8, beside the venv (its headers share a folder with 12.9's).
v="$(grep -E '^nvidia-cuda-runtime-cu11==' "$REAL" | cut -d= -f3)"
target="$CACHE/cudart-cu11"
if ! ls "$target"/nvidia_cuda_runtime_cu11-"$v".dist-info >/dev/null 2>&1; then
  echo "clients: installing nvidia-cuda-runtime-cu11 $v into $target"
  rm -rf "$target"
  "$PY" -m pip install -q --no-deps --target "$target" "nvidia-cuda-runtime-cu11==$v"
fi

# pycuda, from its sdist.
v="$(pin pycuda)"
if [ -n "$(echo "pycuda==$v" | missing)" ]; then
  wheel="$(ls "$CACHE"/wheels/pycuda-"$v"-*.whl 2>/dev/null | head -1 || true)"
  if [ -z "$wheel" ]; then
    cuda_root="${CUDA_HOME:-$(dirname "$(dirname "$(ls /usr/local/cuda*/include/cuda.h | head -1)")")}"
    sim="$("$PY" -c 'from cgpu.core.paths import sim_lib_dir; print(sim_lib_dir())')"
    echo "clients: building pycuda $v against $cuda_root and the simulator's libcuda"
    src="$CACHE/src"
    rm -rf "$src" && mkdir -p "$src/link"
    ln -s "$sim/libcuda.so.1" "$src/link/libcuda.so"
    "$PY" -m pip download -q --no-deps --no-binary pycuda "pycuda==$v" -d "$src"
    tar -C "$src" -xzf "$src/pycuda-$v.tar.gz"
    log="$CACHE/pycuda-build.log"
    if ! (
      cd "$src/pycuda-$v"
      "$PY" configure.py --cuda-root="$cuda_root" \
        --cudadrv-lib-dir="$src/link" --no-cuda-enable-curand
      "$PY" -m pip wheel -q --no-deps -w "$CACHE/wheels" .
    ) >"$log" 2>&1; then
      tail -n 40 "$log" >&2
      echo "clients: building pycuda failed (full log: $log)" >&2
      exit 1
    fi
    wheel="$(ls "$CACHE"/wheels/pycuda-"$v"-*.whl | head -1)"
    rm -rf "$src"
  fi
  "$PY" -m pip install -q "$wheel"
fi
