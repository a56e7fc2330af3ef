"""NVML clients from PyPI under `cgpu run --gpu-mem 4GiB`: while the process holds 1 GiB, each
shows the slice as the GPU's total, the container's use as used, and the process with it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from clientkit import require
from inside import SLICE

Run = Callable[..., dict[str, Any]]
MiB = 1 << 20

HOLD = """
    import json, os, subprocess
    import inside
    from cuda.bindings import driver as drv

    drv.cuInit(0)
    err, dev = drv.cuDeviceGet(0)
    err, ctx = drv.cuDevicePrimaryCtxRetain(dev)
    drv.cuCtxSetCurrent(ctx)
    err, held = drv.cuMemAlloc(1 << 30)
    assert err == drv.CUresult.CUDA_SUCCESS, err
    used = inside.ledger_used()  # 1 GiB and the context
"""


def test_nvidia_ml_py_v1_and_v2(run_client: Run) -> None:
    require("nvidia-ml-py")
    result = run_client(HOLD + """
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    procs = {
        name: [[p.pid, p.usedGpuMemory] for p in getattr(pynvml, name)(h)]
        for name in ("nvmlDeviceGetComputeRunningProcesses",
                     "nvmlDeviceGetComputeRunningProcesses_v2",
                     "nvmlDeviceGetComputeRunningProcesses_v3")
    }
    inside.report(pid=os.getpid(), used=used, v1=[v1.total, v1.used, v1.free],
                  v2=[v2.total, v2.used, v2.free, v2.reserved], procs=procs)
    """)
    used = result["used"]
    assert used > 1 << 30
    assert result["v1"] == [SLICE, used, SLICE - used]
    total, v2_used, free, reserved = result["v2"]
    assert (total, free) == (SLICE, SLICE - used) and v2_used + reserved == used
    for name, procs in result["procs"].items():
        assert procs == [[result["pid"], used]], name


def test_gpustat_cli(run_client: Run) -> None:
    require("gpustat")
    result = run_client(HOLD + """
    out = subprocess.run(["gpustat", "--json"], capture_output=True, text=True, check=True)
    inside.report(pid=os.getpid(), used=used, gpustat=json.loads(out.stdout))
    """)
    [gpu] = result["gpustat"]["gpus"]
    assert gpu["memory.total"] == SLICE // MiB
    assert gpu["memory.used"] == result["used"] // MiB
    assert [(p["pid"], p["gpu_memory_usage"]) for p in gpu["processes"]] == [
        (result["pid"], result["used"] // MiB)
    ]


def test_nvitop_cli_and_api(run_client: Run) -> None:
    require("nvitop")
    result = run_client(HOLD + """
    from nvitop import Device

    out = subprocess.run(["nvitop", "--once"], capture_output=True, text=True, check=True)
    d = Device(0)
    procs = {str(p.pid): p.gpu_memory() for p in d.processes().values()}
    inside.report(pid=os.getpid(), used=used, screen=out.stdout,
                  api=[d.memory_total(), d.memory_used(), d.memory_free()], procs=procs)
    """)
    used = result["used"]
    assert result["api"] == [SLICE, used, SLICE - used]
    assert result["procs"] == {str(result["pid"]): used}
    screen = result["screen"]
    assert f"{used // MiB}MiB / {SLICE // MiB}MiB" in screen, screen
    assert re.search(rf"\b{result['pid']}\b", screen), screen


def test_cuda_core_system(run_client: Run) -> None:
    require("cuda-core")
    result = run_client(HOLD + """
    from cuda.core import system

    d = system.Device(index=0)
    m = d.memory_info
    procs = [[p.pid, p.used_gpu_memory] for p in d.compute_running_processes]
    inside.report(pid=os.getpid(), used=used, memory=[m.total, m.used, m.free], procs=procs)
    """)
    used = result["used"]
    assert result["memory"] == [SLICE, used, SLICE - used]
    assert result["procs"] == [[result["pid"], used]]
