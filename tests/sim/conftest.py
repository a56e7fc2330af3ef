"""Fixtures for the simulator's tests: the libraries, the C probe and a runner for it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from simkit import REPO, cuda_include, sim_environ

PROBE_SRC = Path(__file__).resolve().parent / "sim_probe.c"


@pytest.fixture(scope="session")
def simlib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulator's libraries: the installed ones, else a fresh build of native/sim."""
    try:
        from cgpu import paths

        installed = paths.sim_lib_dir()
        if (installed / "libcuda.so.1").is_file() and (installed / "libnvidia-ml.so.1").is_file():
            newest_src = max(p.stat().st_mtime for p in (REPO / "native" / "sim").iterdir())
            if (installed / "libcuda.so.1").stat().st_mtime >= newest_src:
                return installed
    except ImportError:
        pass
    if not shutil.which("cmake"):
        pytest.skip("cmake is needed to build the simulator")
    build = tmp_path_factory.mktemp("simbuild")
    subprocess.run(
        ["cmake", "-S", str(REPO), "-B", str(build)], check=True, stdout=subprocess.DEVNULL
    )
    subprocess.run(
        ["cmake", "--build", str(build), "-j2", "--target", "cgpusim_cuda", "cgpusim_nvml"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return build / "sim"


@pytest.fixture(scope="session")
def probe(tmp_path_factory: pytest.TempPathFactory, simlib: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("a C compiler is needed")
    out = tmp_path_factory.mktemp("probe")
    exe = out / "probe"
    subprocess.run(
        [
            cc,
            "-std=gnu11",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-result",
            "-I",
            str(cuda_include()),
            "-I",
            str(REPO / "native" / "include"),
            str(PROBE_SRC),
            "-o",
            str(exe),
            "-L",
            str(simlib),
            "-l:libcuda.so.1",
            "-l:libnvidia-ml.so.1",
            f"-Wl,-rpath,{simlib}",
            "-ldl",
            "-pthread",
        ],
        check=True,
    )
    return exe


@pytest.fixture
def run(probe: Path, simlib: Path):
    """run("cmd", env vars...) -> CompletedProcess; fails the test on a probe failure."""

    def _run(*args: str, check: bool = True, stdin: str | None = None, **sim: object):
        proc = subprocess.run(
            [str(probe), *args],
            env=sim_environ(simlib, **sim),
            text=True,
            capture_output=True,
            input=stdin,
            timeout=60,
        )
        if check and proc.returncode != 0:
            pytest.fail(f"probe {args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return _run


@pytest.fixture(scope="session")
def pynvml_ok() -> None:
    pytest.importorskip("pynvml")
