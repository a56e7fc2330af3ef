"""Fixtures for the shim's tests: the C probe, and environments with the shim loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from probe_result import Result

GiB = 1 << 30
MiB = 1 << 20


def sanitizer_runtime() -> str | None:
    """The sanitizer runtime to preload before a sanitizer build of the shim."""
    kind = os.environ.get("CGPU_TEST_SANITIZER")
    if not kind:
        return None
    lib = {"address": "libasan.so", "thread": "libtsan.so"}[kind]
    return subprocess.run(
        ["cc", f"-print-file-name={lib}"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    path = tmp_path / "ledger"
    path.mkdir()
    return path


@pytest.fixture
def shim_env(
    sim_env: Callable[..., dict[str, str]], shim: Path, ledger_dir: Path
) -> Callable[..., dict[str, str]]:
    """sim_env plus the shim preloaded and a private ledger directory."""

    def make(limits: dict[str, str] | None = None, **sim: object) -> dict[str, str]:
        sim.setdefault("memory", "16GiB")
        env = sim_env(**sim)
        preload = [p for p in (sanitizer_runtime(), str(shim)) if p]
        env["LD_PRELOAD"] = ":".join(preload)
        env["CGPU_LEDGER_DIR"] = str(ledger_dir)
        env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:exitcode=66"
        env["TSAN_OPTIONS"] = "halt_on_error=1:exitcode=66:report_signal_unsafe=0"
        env.update(limits or {})
        return env

    return make


@pytest.fixture
def probe(native_build: Path) -> Callable[..., Result]:
    """Run the probe: probe(env, resolution, *commands, stdin=None, timeout=60)."""

    def run(env: dict[str, str], resolution: str, *commands: object, timeout: float = 60) -> Result:
        proc = subprocess.run(
            [str(native_build / "cuda_probe"), resolution, *map(str, commands)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode != 66, f"sanitizer report:\n{proc.stderr}"
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def client(shim_env: Callable[..., dict[str, str]]) -> Callable[..., Result]:
    """Run tests/shim/family_client.py under the shim with a slice: client(limit, *steps)."""
    script = Path(__file__).with_name("family_client.py")

    def run(limit: str, *steps: object) -> Result:
        env = shim_env({"CGPU_MEM_LIMIT": limit})
        proc = subprocess.run(
            [sys.executable, "-P", str(script), *map(str, steps)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, proc.stderr
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run
