"""The shim over a driver that is not the simulator: benchmarks/standin, the stand-in that the
hot path is timed against. It must charge, refuse over the slice, and end at zero there too."""

from __future__ import annotations

import glob
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cgpu.core.config import write_config
from cgpu.core.ledger import read_ledger

ROOT = Path(__file__).resolve().parents[2]
UUID = "GPU-57a1d100-be0c-4a11-9e5e-000000000001"  # the stand-in's one device
GiB = 1 << 30
MiB = 1 << 20


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory, cc: str) -> tuple[Path, Path]:
    """The stand-in's libcuda.so.1 (its directory) and shim_bench linked against it."""
    out = tmp_path_factory.mktemp("standin")
    inc = next(
        p
        for p in ["/usr/local/cuda/include", *sorted(glob.glob("/usr/local/cuda-*/include"))]
        if Path(p, "cuda.h").is_file()
    )
    flags = ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", inc]
    subprocess.run(
        [cc, *flags, "-shared", "-fPIC", "-fvisibility=hidden", "-ftls-model=initial-exec",
         str(ROOT / "benchmarks" / "standin" / "standin.c"), "-Wl,-soname,libcuda.so.1",
         "-o", str(out / "libcuda.so.1")],
        check=True,
    )
    subprocess.run(
        [cc, *flags, str(ROOT / "benchmarks" / "shim_bench.c"), "-o", str(out / "shim_bench"),
         "-L", str(out), "-l:libcuda.so.1"],
        check=True,
    )
    return out, out / "shim_bench"


def run(standin: tuple[Path, Path], env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """shim_bench on the stand-in, the shim preloaded (shim_env with its driver swapped)."""
    lib_dir, exe = standin
    env = dict(env, LD_LIBRARY_PATH=str(lib_dir))
    return subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, timeout=60)


ShimEnv = Callable[..., dict[str, str]]


def test_pairs_on_the_standin_are_charged_and_end_at_zero(standin, shim_env: ShimEnv, ledger_dir):
    write_config(ledger_dir, {UUID: GiB}, contexts={UUID: 0})
    r = run(standin, shim_env(), "pairs", "20000", str(2 * MiB))
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) > 0
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert snap.devices[0].uuid == UUID
    assert snap.devices[0].used == 0
    assert snap.devices[0].peak == 2 * MiB  # each pair charged its 2 MiB, one at a time


def test_cold_pairs_are_charged_and_end_at_zero(standin, shim_env: ShimEnv, ledger_dir):
    """shim_bench cold (shim_overhead.py's "caches cold" row) times real, charged pairs."""
    write_config(ledger_dir, {UUID: GiB}, contexts={UUID: 0})
    r = run(standin, shim_env(), "cold", "2000", str(2 * MiB), "8")
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) > 0
    dev = read_ledger(ledger_dir / "cgpu.ledger").devices[0]
    assert (dev.used, dev.peak) == (0, 2 * MiB)


def test_the_slice_holds_on_the_standin(standin, shim_env: ShimEnv, ledger_dir):
    write_config(ledger_dir, {UUID: GiB}, contexts={UUID: 0})
    r = run(standin, shim_env(), "pairs", "10", str(2 * GiB))  # the driver has 80 GiB
    assert r.returncode == 1
    assert "out of GPU memory slice" in r.stderr
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0
