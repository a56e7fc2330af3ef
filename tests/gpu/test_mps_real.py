"""`cgpu mps-daemon` with NVIDIA's real nvidia-cuda-mps-control, on a real GPU.

The GPU's compute mode is left as it is (--compute-mode none): the test must not change the
machine's settings.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# A CUDA client through the driver API (no framework needed): allocates each size in turn
# and prints CUDA's status for each.
PROBE = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
out = []
for mib in map(int, sys.argv[1:]):
    ptr = ctypes.c_uint64()
    status = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib << 20))
    out.append(status)
    if status == 0:
        cuda.cuMemFree_v2(ptr)
print(" ".join(map(str, out)), flush=True)
"""


def _uuid() -> str:
    out = subprocess.check_output(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"])
    return out.decode().splitlines()[0].strip()


@pytest.mark.gpu
def test_real_mps_daemon_enforces_the_pinned_limit() -> None:
    if shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("nvidia-cuda-mps-control is not installed")
    uuid = _uuid()
    base = Path(tempfile.mkdtemp(prefix="cgmps-", dir="/tmp"))
    root = base / "mps"
    cgpu = [sys.executable, "-m", "cgpu.cli", "mps-daemon"]
    daemon = subprocess.Popen(
        [*cgpu, "--root", str(root), "--gpu", uuid, "--compute-mode", "none", "--interval", "0.5"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        health = root / uuid / "health.json"
        deadline = time.monotonic() + 60
        while not (health.exists() and json.loads(health.read_text())["state"] == "ready"):
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            assert time.monotonic() < deadline, "the real MPS daemon never became ready"
            time.sleep(0.2)
        assert subprocess.run([*cgpu, "--check", "--root", str(root)]).returncode == 0

        env = {
            **os.environ,
            "CUDA_MPS_PIPE_DIRECTORY": str(root / uuid / "pipe"),
            "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        }
        done = subprocess.run(
            [sys.executable, "-c", PROBE, "256", "2048"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        small, large = map(int, done.stdout.split())
        assert small == 0  # within the pinned limit
        assert large == 2  # CUDA_ERROR_OUT_OF_MEMORY: MPS holds the client to 1024 MiB
        # The client went through the daemon: it started an MPS server for it.
        log = (root / uuid / "log" / "control.log").read_text()
        assert "server" in log.lower()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    assert daemon.returncode == 0
