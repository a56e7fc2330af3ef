"""Two processes share a slice, and the host's NVML view stays within it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

MiB = 1 << 20

HOLD = """
import sys, torch
held = []
try:
    while len(held) * 256 < int(sys.argv[1]):
        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError:
    pass
print("held", len(held) * 256, flush=True)
sys.stdin.read()
"""


@pytest.mark.gpu
def test_two_processes_share_one_slice_and_host_sees_it(tmp_path):
    torch = pytest.importorskip("torch")
    del torch
    import pynvml

    cgpu = Path(sys.executable).parent / "cgpu"
    state = tmp_path / "state"
    # One container directory, two processes in it: the second sees what the first holds.
    first = subprocess.Popen(
        [
            str(cgpu),
            "run",
            "--gpu-mem",
            "4GiB",
            "--gpu",
            "0",
            "--state-dir",
            str(state),
            "--keep",
            "--",
            sys.executable,
            "-c",
            HOLD,
            "3072",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = first.stdout.readline()
    assert line.startswith("held ")
    first_held = int(line.split()[1])
    (container,) = (state / "containers").iterdir()
    env = dict(
        __import__("os").environ,
        CGPU_LEDGER_DIR=str(container),
        LD_PRELOAD=subprocess.check_output([str(cgpu), "shim-path"], text=True).strip(),
    )
    second = subprocess.Popen(
        [sys.executable, "-c", HOLD, "4096"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    second_held = int(second.stdout.readline().split()[1])
    assert first_held + second_held <= 4096
    # The host's view: NVML per-process memory of both, summed, within the slice.
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    time.sleep(1)
    pids = {first.pid, second.pid}
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    used = sum(p.usedGpuMemory or 0 for p in procs if p.pid in pids or p.pid in _children(pids))
    pynvml.nvmlShutdown()
    for p in (first, second):
        p.communicate("", timeout=60)
    assert 0 < used <= 4096 * MiB, used


def _children(pids: set[int]) -> set[int]:
    import psutil

    found: set[int] = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    return found
