#!/bin/bash
# CUDA_MODULE_LOADING=EAGER on the bare simulator: torch alone fails at init; ctypes libcudart first, then torch, works.
export CGPU_SIM_MEMORY=8GiB CGPU_SIM_STATE=/work/wt/check24/out/eager_sim CUDA_MODULE_LOADING=EAGER
export LD_LIBRARY_PATH=$(/work/main/.venv/bin/python -c 'from cgpu.core.paths import sim_lib_dir; print(sim_lib_dir())')
/work/main/.venv/bin/python -c "import torch; torch.zeros(1, device='cuda'); print('torch alone: works')" 2>&1 | tail -1
/work/main/.venv/bin/python /work/wt/check24/repro_eager.py 2>&1 | tail -3
