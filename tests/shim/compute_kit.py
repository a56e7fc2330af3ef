"""Run saturating containers on the simulator and measure their share of the GPU's time.

Shared by tests/shim/test_compute.py and benchmarks/compute_share.py. A "container" is a set of
processes with one ledger directory (the shim's container-wide state). Shares come from the
simulator's NVML per-process utilization, read by this process without the shim: the
simulator's own accounting of kernel time, independent of the shim's bookkeeping.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build_load(cc: str, include: Path, sim_dir: Path, out: Path) -> Path:
    """Compile compute_load.c against the simulator's libcuda."""
    exe = out / "compute_load"
    subprocess.run(
        [
            cc,
            "-std=gnu11",
            "-O2",
            "-Wall",
            "-Werror",
            "-I",
            str(include),
            str(HERE / "compute_load.c"),
            "-o",
            str(exe),
            "-L",
            str(sim_dir),
            "-l:libcuda.so.1",
            "-ldl",
            "-lpthread",
        ],
        check=True,
    )
    return exe


class _Sample(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("timeStamp", ctypes.c_ulonglong),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
    ]


class Nvml:
    """The simulator's NVML, loaded in this process (no shim here)."""

    def __init__(self, sim_dir: Path, state: Path) -> None:
        os.environ["CGPU_SIM_STATE"] = str(state)
        self.lib = ctypes.CDLL(str(sim_dir / "libnvidia-ml.so.1"))
        assert self.lib.nvmlInit_v2() == 0

    def handle(self, index: int) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        assert self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(h)) == 0
        return h

    def utilization(self, index: int, since_us: int) -> dict[int, int]:
        """Each process's busy share (percent) of device `index` from `since_us` to now."""
        samples = (_Sample * 1024)()
        count = ctypes.c_uint(1024)
        rc = self.lib.nvmlDeviceGetProcessUtilization(
            self.handle(index), samples, ctypes.byref(count), ctypes.c_ulonglong(since_us)
        )
        if rc == 6:  # NVML_ERROR_NOT_FOUND: nobody ran a kernel
            return {}
        assert rc == 0, rc
        return {samples[i].pid: samples[i].smUtil for i in range(count.value)}


@dataclass
class Container:
    """Processes sharing one ledger directory, each saturating the GPU."""

    name: str
    ledger: Path
    env: dict[str, str]
    processes: int = 1
    kernel_ns: int = 10_000
    seconds: float = 11.0
    path: str = "kernel"
    procs: list[subprocess.Popen] = field(default_factory=list)

    def start(self, load: Path) -> None:
        self.ledger.mkdir(parents=True, exist_ok=True)
        env = {**self.env, "CGPU_LEDGER_DIR": str(self.ledger)}
        args = [str(load), "run", self.path, str(self.kernel_ns), str(self.seconds)]
        self.procs = [
            subprocess.Popen(
                args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(self.processes)
        ]

    def pids(self) -> set[int]:
        return {p.pid for p in self.procs}

    def wait(self) -> list[str]:
        """Wait for every process; returns the failures (stderr of a non-zero exit)."""
        bad = []
        for p in self.procs:
            _out, err = p.communicate(timeout=60)
            if p.returncode != 0:
                bad.append(f"{self.name} pid {p.pid} rc {p.returncode}: {err.strip()[-500:]}")
        return bad


def now_us() -> int:
    return time.time_ns() // 1000


def run(
    nvml: Nvml,
    load: Path,
    device: int,
    containers: list[Container],
    windows: list[tuple[float, float]],
) -> list[dict[str, float]]:
    """Start the containers together; for each (start, end) window in seconds from the start,
    the share (percent of the device's time) each container's processes got."""
    t0 = time.monotonic()
    for c in containers:
        c.start(load)
    shares: list[dict[str, float]] = []
    try:
        for start, end in windows:
            time.sleep(max(0.0, t0 + start - time.monotonic()))
            since = now_us()
            time.sleep(max(0.0, t0 + end - time.monotonic()))
            util = nvml.utilization(device, since)
            shares.append(
                {c.name: float(sum(util.get(pid, 0) for pid in c.pids())) for c in containers}
            )
    finally:
        failures = [f for c in containers for f in c.wait()]
    assert not failures, failures
    return shares
