"""Whether `cgpu run` finds a real driver: the file behind libcuda.so.1, not its name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cgpu.core.paths import sim_lib_dir

ASK = "from cgpu.core import gpus; print(gpus.real_driver_present())"


def _present(libdir: Path | None) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = str(libdir)
    out = subprocess.run(
        [sys.executable, "-c", ASK], env=env, capture_output=True, text=True, check=True
    )
    return {"True": True, "False": False}[out.stdout.strip()]


@pytest.fixture
def versioned_driver(tmp_path: Path) -> Path:
    """A driver laid out as NVIDIA installs it: libcuda.so.1 -> libcuda.so.580.159.04."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.fail("a C compiler is needed (scripts/setup.sh installs one)")
    src = tmp_path / "cuda.c"
    src.write_text("int cuInit(unsigned int flags) { (void)flags; return 0; }\n")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    real = libdir / "libcuda.so.580.159.04"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(real)], check=True)
    (libdir / "libcuda.so.1").symlink_to(real.name)
    return libdir


def test_a_driver_file_named_by_its_version_is_found(versioned_driver: Path) -> None:
    assert _present(versioned_driver) is True


def test_the_simulator_is_not_a_real_driver() -> None:
    assert _present(sim_lib_dir()) is False


def test_a_link_to_the_simulator_is_not_a_real_driver(tmp_path: Path) -> None:
    (tmp_path / "libcuda.so.1").symlink_to(sim_lib_dir() / "libcuda.so.1")
    assert _present(tmp_path) is False

