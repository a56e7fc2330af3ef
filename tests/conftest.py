"""Shared fixtures: where the built native pieces are, and environments for the simulator."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NATIVE_SRC = REPO / "tests" / "native"


def _use_installed_cgpu() -> None:
    """Import cgpu as installed (editable or not), never as this checkout's bare folders.

    The checkout keeps cgpu.deviceplugin and cgpu.hooks in deviceplugin/ and hooks/, which only
    an install (scripts/setup.sh: `pip install -e .`) maps into `cgpu`; the native libraries exist
    only in the install. `python -m pytest` puts the checkout first on sys.path; take it off, for
    this process and (PYTHONSAFEPATH) for the Pythons the tests start.
    """
    os.environ["PYTHONSAFEPATH"] = "1"
    sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != REPO]
    import importlib.util

    from cgpu.core import paths as native_paths

    mapped = importlib.util.find_spec("cgpu.deviceplugin") is not None
    if not mapped or not native_paths.shim_path().is_file():
        pytest.exit(
            "cgpu is not installed: run `bash scripts/setup.sh` (an editable install into .venv), "
            "then `.venv/bin/python -m pytest`",
            returncode=4,
        )


_use_installed_cgpu()

from cgpu.core import paths  # noqa: E402


@pytest.fixture(scope="session")
def shim() -> Path:
    """The shim under test (CGPU_TEST_SHIM selects a sanitizer build)."""
    path = Path(os.environ.get("CGPU_TEST_SHIM") or paths.shim_path())
    assert path.is_file(), f"shim not built: {path}"
    return path


@pytest.fixture(scope="session")
def sim_dir() -> Path:
    """Directory with the simulator's libcuda.so.1 and libnvidia-ml.so.1."""
    path = paths.sim_lib_dir()
    assert (path / "libcuda.so.1").is_file(), f"simulator not built in {path}"
    return path


@pytest.fixture
def sim_env(tmp_path: Path, sim_dir: Path) -> Callable[..., dict[str, str]]:
    """Build an environment that runs programs on the simulator.

    Keyword arguments become CGPU_SIM_* variables (devices=2 -> CGPU_SIM_DEVICES=2);
    `extra` adds other variables. Every process started with it shares one simulated
    machine through CGPU_SIM_STATE.
    """

    def make(extra: dict[str, str] | None = None, **sim: object) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CGPU_", "ALIYUN_", "VOLCANO_"))
        }
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(sim_dir), os.environ.get("LD_LIBRARY_PATH", "")) if p
        )
        env["CGPU_SIM_STATE"] = str(tmp_path / "sim.state")
        for key, value in sim.items():
            env[f"CGPU_SIM_{key.upper()}"] = str(value)
        env.update(extra or {})
        return env

    return make


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """An empty cgpu state dir (`--state-dir`) for one test."""
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def cc() -> str:
    """A C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler is needed for the native tests"
    return compiler


def cuda_include() -> str:
    """Directory of the real cuda.h."""
    candidates = [
        os.environ.get("CUDA_HOME", ""),
        "/usr/local/cuda",
        *sorted(glob.glob("/usr/local/cuda-*"), reverse=True),
    ]
    for base in candidates:
        if base and Path(base, "include", "cuda.h").is_file():
            return str(Path(base, "include"))
    pytest.fail("cuda.h not found (set CUDA_HOME)")


@pytest.fixture(scope="session")
def native_build(tmp_path_factory: pytest.TempPathFactory, cc: str, sim_dir: Path) -> Path:
    """Compile the probe and the RTLD_NEXT library once per session."""
    out = tmp_path_factory.mktemp("native")
    subprocess.run(
        [
            cc,
            "-std=gnu11",
            "-O1",
            "-g",
            "-Wall",
            "-Werror",
            "-I",
            cuda_include(),
            str(NATIVE_SRC / "cuda_probe.c"),
            "-o",
            str(out / "cuda_probe"),
            "-L",
            str(sim_dir),
            "-l:libcuda.so.1",
            "-ldl",
            "-lpthread",
        ],
        check=True,
    )
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O2",
            str(NATIVE_SRC / "next_user.c"),
            "-o",
            str(out / "libnext_user.so"),
            "-ldl",
        ],
        check=True,
    )
    return out
