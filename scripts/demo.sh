#!/usr/bin/env bash
# The main job: install cgpu, then run programs under a GPU memory slice.
# With no NVIDIA driver on the machine, cgpu uses its built-in simulated GPU, which hosts
# NVIDIA's own CUDA runtime (PyTorch below runs unchanged) and NVIDIA's nvidia-smi.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo >/dev/null
export PATH="$(pwd)/.venv/bin:$PATH"

echo "# nvidia-smi's view (NVML) inside a 4 GiB slice:"
cgpu run --gpu-mem 4GiB -- cgpu smi
echo
echo "# a CUDA program (cuda-python, driver API) allocating 512 MiB at a time in a 4 GiB slice:"
cgpu run --gpu-mem 4GiB -- python examples/fill_gpu.py --chunk-mib 512
echo
echo "# PyTorch (PyPI's CUDA build, NVIDIA's libcudart) allocating 512 MiB at a time in a 4 GiB slice:"
cgpu run --gpu-mem 4GiB -- python examples/torch_fill.py --chunk-mib 512 2>&1 | grep -v '^\[W'

# --- NVIDIA's nvidia-smi inside the slice: setup.sh --demo unpacked it into
# --- build/nvidia-smi/<version>/ (Debian's non-free package, never installed).
for smi in build/nvidia-smi/*/nvidia-smi; do
  [ -x "$smi" ] || continue
  release="$(basename "$(dirname "$smi")")"
  release="${release%-*}"   # 535.261.03-1 -> 535.261.03 (without the Debian revision)
  case "$release" in
    535.*) cuda=12020 ;;    # the CUDA version a 535 driver reports
    *) cuda=13000 ;;
  esac
  echo
  echo "# NVIDIA's nvidia-smi $release inside a 4 GiB slice, while PyTorch holds 1 GiB of it:"
  # shellcheck disable=SC2016
  SMI="$(pwd)/$smi" RELEASE="$release" CUDA="$cuda" cgpu run --gpu-mem 4GiB -- bash -c '
    out="$(mktemp)"
    python examples/torch_hold.py --mib 1024 >"$out" 2>/dev/null &
    until grep -q ready "$out" || ! kill -0 $! 2>/dev/null; do sleep 0.2; done
    CGPU_SIM_DRIVER_RELEASE="$RELEASE" CGPU_SIM_DRIVER_VERSION="$CUDA" "$SMI"
    kill $! 2>/dev/null; rm -f "$out"'
  break
done
