"""Fixtures for the simulator's tests: the libraries, the C probes and runners for them."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from simkit import REPO, cuda_include, sim_environ

HERE = Path(__file__).resolve().parent

# The sim_bytes probe: the command table first (it names the executable), then
# the helpers its commands share and the commands, by topic.
BYTES_SOURCES = (
    "sim_bytes.c",
    "sim_bytes_common.c",
    "sim_bytes_copies.c",
    "sim_bytes_streams.c",
    "sim_bytes_vmm.c",
    "sim_bytes_host.c",
)


@pytest.fixture(scope="session")
def simlib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulator's libraries: the installed ones, else a fresh build of native/sim."""
    try:
        from cgpu.core import paths

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


def _compile(src: Path | Sequence[Path], out: Path, simlib: Path) -> Path:
    """Build a probe from tests/sim with -Wall -Wextra -Werror against the simulator.

    `src` is one .c file or several; the probe is named after the first.
    """
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("a C compiler is needed")
    sources = [src] if isinstance(src, Path) else list(src)
    exe = out / sources[0].stem
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
            *(str(s) for s in sources),
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


def _runner(exe: Path, simlib: Path):
    """runner("cmd", env vars...) -> CompletedProcess; fails the test on a probe failure."""

    def _run(*args: str, check: bool = True, stdin: str | None = None, **sim: object):
        proc = subprocess.run(
            [str(exe), *args],
            env=sim_environ(simlib, **sim),
            text=True,
            capture_output=True,
            input=stdin,
            timeout=60,
        )
        if check and proc.returncode != 0:
            output = f"{proc.stdout}\n{proc.stderr}"
            pytest.fail(f"{exe.name} {args} failed ({proc.returncode}):\n{output}")
        return proc

    return _run


@pytest.fixture(scope="session")
def probe(tmp_path_factory: pytest.TempPathFactory, simlib: Path) -> Path:
    """sim_probe.c, built: the simulator's own behaviour."""
    return _compile(HERE / "sim_probe.c", tmp_path_factory.mktemp("probe"), simlib)


@pytest.fixture(scope="session")
def surface_probe(tmp_path_factory: pytest.TempPathFactory, simlib: Path) -> Path:
    """sim_surface.c, built: the calls other clients make."""
    return _compile(HERE / "sim_surface.c", tmp_path_factory.mktemp("surface"), simlib)


@pytest.fixture(scope="session")
def timeline_probe(tmp_path_factory: pytest.TempPathFactory, simlib: Path) -> Path:
    """sim_timeline.c, built: kernels on the timeline."""
    return _compile(HERE / "sim_timeline.c", tmp_path_factory.mktemp("timeline"), simlib)


@pytest.fixture(scope="session")
def bytes_probe(tmp_path_factory: pytest.TempPathFactory, simlib: Path) -> Path:
    """sim_bytes.c and its topic files, built: the contents of simulated memory."""
    return _compile(
        [HERE / name for name in BYTES_SOURCES], tmp_path_factory.mktemp("bytes"), simlib
    )


@pytest.fixture
def run_bytes(bytes_probe: Path, simlib: Path):
    """run_bytes("cmd", args..., env vars...) runs sim_bytes."""
    return _runner(bytes_probe, simlib)


@pytest.fixture
def run_timeline(timeline_probe: Path, simlib: Path):
    """run_timeline("cmd", args..., env vars...) runs sim_timeline."""
    return _runner(timeline_probe, simlib)


@pytest.fixture
def run(probe: Path, simlib: Path):
    """run("cmd", env vars...) runs sim_probe."""
    return _runner(probe, simlib)


@pytest.fixture
def run_surface(surface_probe: Path, simlib: Path):
    """run_surface("cmd", env vars...) runs sim_surface."""
    return _runner(surface_probe, simlib)


@pytest.fixture(scope="session")
def pynvml_ok() -> None:
    pytest.importorskip("pynvml")
