"""Fixtures for the exporter tests: container dirs, live charging processes, a fake NVML."""

from __future__ import annotations

import glob
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter_helpers import GIB, UUID0, UUID1, FakeNvml, Holder

HERE = Path(__file__).resolve().parent


@pytest.fixture
def hold() -> Iterator[Callable[[Path, dict[int, int]], Holder]]:
    """hold(ledger_path, {device_index: bytes}) -> a live charging process (reaped at teardown)."""
    holders: list[Holder] = []

    def make(ledger: Path, charges: dict[int, int]) -> Holder:
        holder = Holder(ledger, charges)
        holders.append(holder)
        return holder

    yield make
    for holder in holders:
        holder.release()


@pytest.fixture
def make_container(state_dir: Path) -> Callable[..., Path]:
    """make_container(key, {uuid: bytes}, **meta) -> the container dir, made as the plugin does."""
    from cgpu.core.containers import create_container_dir

    def make(key: str, limits: dict[str, int], **meta: Any) -> Path:
        meta.setdefault("source", "device-plugin")
        return create_container_dir(state_dir, key, limits, meta)

    return make


@pytest.fixture
def fake_nvml() -> FakeNvml:
    """Two 16 GiB GPUs, 1 GiB used on the first."""
    return FakeNvml(
        [(UUID0, "Tesla V100-SXM2-16GB", 16 * GIB, GIB), (UUID1, "Tesla T4", 16 * GIB, 0)]
    )


def _cuda_include() -> Path | None:
    for base in [
        os.environ.get("CUDA_HOME", ""),
        "/usr/local/cuda",
        *sorted(glob.glob("/usr/local/cuda-*")),
    ]:
        if base and Path(base, "include", "cuda.h").is_file():
            return Path(base, "include")
    return None


@pytest.fixture(scope="session")
def workload(tmp_path_factory: pytest.TempPathFactory, cc: str, sim_dir: Path) -> Path:
    """workload.c built against cuda.h and the simulator's libcuda.so.1."""
    include = _cuda_include()
    assert include is not None, "cuda.h not found (set CUDA_HOME)"
    out = tmp_path_factory.mktemp("exporter-native") / "workload"
    subprocess.run(
        [
            cc,
            "-O1",
            "-Wall",
            "-Werror",
            "-I",
            str(include),
            str(HERE / "workload.c"),
            "-o",
            str(out),
            "-L",
            str(sim_dir),
            "-l:libcuda.so.1",
        ],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def compute_workload(tmp_path_factory: pytest.TempPathFactory, cc: str, sim_dir: Path) -> Path:
    """compute_workload.c (saturating cgpu_sim_busy kernels) built against the simulator."""
    include = _cuda_include()
    assert include is not None, "cuda.h not found (set CUDA_HOME)"
    out = tmp_path_factory.mktemp("compute-native") / "compute_workload"
    source = HERE / "compute_workload.c"
    flags = ["-O1", "-Wall", "-Werror", "-I", str(include)]
    libs = ["-L", str(sim_dir), "-l:libcuda.so.1", "-lpthread"]
    subprocess.run([cc, *flags, str(source), "-o", str(out), *libs], check=True)
    return out
