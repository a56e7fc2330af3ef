"""GPU tests: run only where a real NVIDIA GPU and driver are present."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cgpu.core import gpus


def _real_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        subprocess.run(["nvidia-smi", "-L"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return gpus.real_driver_present()


HAVE_GPU = _real_gpu()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine")
    for item in items:
        if "tests/gpu/" in str(item.fspath) and not HAVE_GPU:
            item.add_marker(skip)


@pytest.fixture
def cgpu_run(tmp_path: Path):
    """cgpu_run(size, *cmd, env=None) -> CompletedProcess, on the real driver."""

    def run(size: str, *cmd: str, env: dict[str, str] | None = None, timeout: float = 300):
        cgpu = Path(sys.executable).parent / "cgpu"
        return subprocess.run(
            [
                str(cgpu),
                "run",
                "--gpu-mem",
                size,
                "--gpu",
                "0",
                "--state-dir",
                str(tmp_path),
                "--",
                *cmd,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )

    return run
