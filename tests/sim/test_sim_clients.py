"""Real clients from PyPI on the simulator: cuda.core, numba's CUDA target, pycuda, gpustat
and nvitop.  Each test runs when its client is installed in this interpreter."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from simkit import GiB, MiB, run_py, sim_environ


@contextlib.contextmanager
def holder(probe: Path, env: dict[str, str], size: int) -> Iterator[int]:
    """A process that holds `size` bytes of device memory until the block ends."""
    proc = subprocess.Popen(
        [str(probe), "hold", str(size)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().split()[0] == "0"
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def needs(package: str) -> None:
    """Skip unless the client is installed (imported only in the child, on the simulator)."""
    try:
        found = importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        pytest.skip(f"{package} is not installed")


def run_client(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
    )


def test_cuda_core_default_memory_resource(simlib: Path) -> None:
    needs("cuda.core")
    code = """
        import json
        from cuda.core import Device
        import cuda.bindings.driver as drv
        d = Device()
        d.set_current()
        s = d.create_stream()
        free0 = drv.cuMemGetInfo()[1]
        buf = d.allocate(3 << 20, stream=s)
        free1 = drv.cuMemGetInfo()[1]
        buf.close(s)
        s.sync()
        kept = drv.cuMemGetInfo()[1] - free0
        err, pool = drv.cuDeviceGetMemPool(drv.cuDeviceGet(0)[1])
        assert drv.cuMemPoolTrimTo(pool, 0)[0] == 0
        print(json.dumps([type(d.memory_resource).__name__, free0 - free1, kept,
                          drv.cuMemGetInfo()[1] - free0]))
    """
    proc = run_py(simlib, code, memory="2GiB")
    assert proc.returncode == 0, proc.stderr
    # cuda.core raises the default pool's release threshold, so the pool keeps what was
    # freed across the sync, as on the driver, until it is trimmed.
    assert json.loads(proc.stdout) == ["DeviceMemoryResource", 4 * MiB, -4 * MiB, 0]


def test_numba_ctypes_binding(simlib: Path) -> None:
    needs("numba")
    code = """
        import json
        import numpy as np
        from numba import cuda
        assert cuda.is_available()
        a = cuda.to_device(np.zeros(1 << 20, dtype=np.uint8))
        assert a.copy_to_host().shape == (1 << 20,)  # copies are validated no-ops
        a.get_ipc_handle()
        free, total = cuda.current_context().get_memory_info()
        print(json.dumps([free, total]))
    """
    env = sim_environ(simlib, memory="1GiB")
    env["NUMBA_CUDA_USE_NVIDIA_BINDING"] = "0"
    proc = run_client(env, code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == [GiB - 2 * MiB, GiB]


def test_pycuda(simlib: Path) -> None:
    needs("pycuda")
    code = """
        import json
        import numpy as np
        import pycuda.driver as drv
        drv.init()
        ctx = drv.Device(0).make_context()
        a = drv.mem_alloc(3 << 20)
        drv.memcpy_htod(a, np.arange(16, dtype=np.float32))
        used = drv.mem_get_info()
        a.free()
        ctx.pop()
        ctx.detach()
        print(json.dumps(list(used)))
    """
    proc = run_client(sim_environ(simlib, memory="1GiB"), code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [GiB - 4 * MiB, GiB]


def test_gpustat_shows_processes(simlib: Path, probe: Path, tmp_path: Path) -> None:
    needs("gpustat")
    env = sim_environ(simlib, memory="4GiB", ctx_overhead="100MiB", state=tmp_path / "state")
    with holder(probe, env, GiB) as pid:
        proc = subprocess.run(
            [sys.executable, "-m", "gpustat", "--json"],
            env=env,
            text=True,
            capture_output=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    [gpu] = json.loads(proc.stdout)["gpus"]
    assert gpu["name"] == "cgpu Simulated GPU"
    assert gpu["memory.total"] == 4096 and gpu["memory.used"] == 1124
    assert [(p["pid"], p["gpu_memory_usage"]) for p in gpu["processes"]] == [(pid, 1124)]


def test_nvitop_shows_processes(simlib: Path, probe: Path, tmp_path: Path) -> None:
    needs("nvitop")
    env = sim_environ(simlib, memory="4GiB", state=tmp_path / "state")
    code = """
        import json
        from nvitop import Device
        d = Device(0)
        procs = {p.pid: p.gpu_memory() for p in d.processes().values()}
        print(json.dumps([d.name(), d.memory_total(), d.power_limit(), d.persistence_mode(),
                          {str(k): v for k, v in procs.items()}]))
    """
    with holder(probe, env, 512 * MiB) as pid:
        proc = run_client(env, code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [
        "cgpu Simulated GPU",
        4 * GiB,
        700000,
        "Enabled",
        {str(pid): 512 * MiB},
    ]
