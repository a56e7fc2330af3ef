#!/usr/bin/env bash
# The main job: install cgpu, then run programs under a GPU memory slice.
# With no NVIDIA driver on the machine, cgpu uses its built-in simulated GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
export PATH="$(pwd)/.venv/bin:$PATH"

echo "# nvidia-smi's view (NVML) inside a 4 GiB slice:"
cgpu run --gpu-mem 4GiB -- cgpu smi
echo
echo "# a CUDA program (cuda-python, driver API) allocating 512 MiB at a time in a 4 GiB slice:"
cgpu run --gpu-mem 4GiB -- python examples/fill_gpu.py --chunk-mib 512
