#!/usr/bin/env bash
# Install everything cgpu and its tests need on a fresh Debian/Ubuntu machine, then build
# and install cgpu into .venv.  Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in runc busybox-static podman prometheus cmake gcc g++ make; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! ls /usr/local/cuda*/include/cuda.h >/dev/null 2>&1 && [ -z "${CUDA_HOME:-}" ]; then
  echo "setup: cuda.h not found; install the CUDA toolkit headers or set CUDA_HOME" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q ".[test]"
# The CUDA and NVML clients tests/clients runs (pinned in tests/clients/requirements.txt).
bash scripts/install-clients.sh
echo "setup: cgpu installed in $(pwd)/.venv ($(.venv/bin/cgpu shim-path))"
