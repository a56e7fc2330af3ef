"""Processes of one container share its slice, and the host's NVML view stays within it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

MiB = 1 << 20

HOLD = """
import sys, torch
held, why = [], "asked for less"
try:
    while len(held) * 256 < int(sys.argv[1]):
        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except RuntimeError as e:  # OutOfMemoryError, or CUDA's own error when no context fits
    why = str(e).splitlines()[0]
print("held", len(held) * 256, why, flush=True)
sys.stdin.read()
"""


@pytest.mark.gpu
def test_processes_share_one_slice_and_host_sees_it(tmp_path):
    """Three processes of one container: the first holds 2 GiB, the second takes what is
    left, the third finds no room even for its CUDA context. NVML's per-process memory on
    the host, contexts included, stays within the slice."""
    torch = pytest.importorskip("torch")
    del torch
    import pynvml

    cgpu = Path(sys.executable).parent / "cgpu"
    state = tmp_path / "state"
    first = subprocess.Popen(
        [str(cgpu), "run", "--gpu-mem", "4GiB", "--gpu", "0", "--state-dir", str(state), "--keep",
         "--", sys.executable, "-c", HOLD, "2048"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    procs = [first]
    try:
        line = first.stdout.readline()
        assert line.startswith("held 2048 "), line
        (container,) = (state / "containers").iterdir()
        env = dict(
            os.environ,
            CGPU_LEDGER_DIR=str(container),
            LD_PRELOAD=subprocess.check_output([str(cgpu), "shim-path"], text=True).strip(),
        )
        held = []
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", HOLD, "4096"],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            held.append(procs[-1].stdout.readline().split(maxsplit=2))
        second, third = held
        assert int(second[1]) >= 256, second  # the second shares the slice
        assert int(third[1]) == 0 and "out of memory" in third[2].lower(), third
        # The host's view: NVML per-process memory of all three, summed, within the slice.
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        time.sleep(1)
        pids = {p.pid for p in procs}
        running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        ours = pids | _children(pids)
        used = sum(p.usedGpuMemory or 0 for p in running if p.pid in ours)
        pynvml.nvmlShutdown()
        assert 2048 * MiB < used <= 4096 * MiB, used
    finally:
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.communicate("", timeout=60)


def _children(pids: set[int]) -> set[int]:
    import psutil

    found: set[int] = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    return found
