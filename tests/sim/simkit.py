"""Helpers for the simulator's tests: environments, runs and symbol lists."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CUDA_VERSION = 13000
# Every header with PFN_ typedefs of driver entry points a real libcuda exports.
TYPEDEF_HEADERS = (
    "cudaTypedefs.h",
    "cudaProfilerTypedefs.h",
    "cudaGLTypedefs.h",
    "cudaEGLTypedefs.h",
    "cudaVDPAUTypedefs.h",
)
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
# The start of a test script on the simulated driver: `cu` (libcuda through ctypes), `ok` (a
# call that must succeed), and device 0's primary context current as `ctx`.
PRIMARY_CONTEXT = """
import ctypes, json, sys
cu = ctypes.CDLL("libcuda.so.1")
def ok(rc):
    assert rc == 0, rc
ok(cu.cuInit(0))
ctx = ctypes.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
ok(cu.cuCtxSetCurrent(ctx))
"""


def cuda_include() -> Path:
    """Directory of the real cuda.h."""
    for base in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/usr/local/cuda-13.0"):
        if base and (Path(base) / "include" / "cuda.h").is_file():
            return Path(base) / "include"
    pytest.skip("cuda.h not found (set CUDA_HOME)")


def sim_environ(simlib: Path, **sim: object) -> dict[str, str]:
    """This environment minus cgpu's variables, on the simulator; sim=... sets CGPU_SIM_*."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CGPU_") and k != "CUDA_VISIBLE_DEVICES"
    }
    env["LD_LIBRARY_PATH"] = str(simlib)
    for key, value in sim.items():
        if key == "cuda_visible_devices":
            env["CUDA_VISIBLE_DEVICES"] = str(value)
        else:
            env[f"CGPU_SIM_{key.upper()}"] = str(value)
    return env


def run_py(simlib: Path, code: str, **sim: object) -> subprocess.CompletedProcess:
    """Run Python code in a fresh interpreter on the simulator."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=sim_environ(simlib, **sim),
        text=True,
        capture_output=True,
        timeout=60,
    )


def json_out(proc: subprocess.CompletedProcess):
    """The JSON document on a run's last line of output."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def exported(lib: Path) -> list[str]:
    """The dynamic symbols a library defines."""
    if not shutil.which("nm"):
        pytest.skip("nm (binutils) is needed")
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    return [line.split()[-1] for line in out.splitlines() if line.split()]


def typedef_variants() -> dict[str, list[tuple[int, str]]]:
    """base -> sorted [(version, "" or "_ptsz"/"_ptds")] from the CUDA typedef headers."""
    out: dict[str, set[tuple[int, str]]] = {}
    pfn = re.compile(r"\bPFN_(cu[A-Za-z0-9]+(?:_v[0-9]+)*?)_v([0-9]+)(_ptsz|_ptds)?\b")
    for header in TYPEDEF_HEADERS:
        for m in pfn.finditer((cuda_include() / header).read_text()):
            out.setdefault(m.group(1), set()).add((int(m.group(2)), m.group(3) or ""))
    return {b: sorted(v) for b, v in out.items()}


def driver_symbols() -> set[str]:
    """Every name a real libcuda exports: the k-th variant of a base is <base>_v<k>, and a
    per-thread variant takes the name of the newest plain variant at its version."""
    names = set()
    for base, variants in typedef_variants().items():
        plain = [v for v, s in variants if not s]
        named = {v: base if k == 0 else f"{base}_v{k + 1}" for k, v in enumerate(plain)}
        for v, suffix in variants:
            names.add(named[max(p for p in plain if p <= v)] + suffix)
    return names
