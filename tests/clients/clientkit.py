"""Run a client script under `cgpu run --gpu-mem 4GiB` on the simulator, and read its report.

(A module of its own, not conftest: `from conftest import` would find another directory's.)

The clients are installed by scripts/install-clients.sh (from scripts/setup.sh), pinned in
requirements.txt beside this file. A missing client fails its test: the matrix is only
worth something when every client ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinkit import cgpu_command, installed, pinned, require_pinned

HERE = Path(__file__).resolve().parent
GPU_MEM = "4GiB"
CONTEXT_OVERHEAD = "20MiB"  # what a context costs on the simulated GPU, charged to the slice
# numba-cuda lives beside the venv so that numba's built-in target stays importable.
NUMBA_CUDA_DIR = Path(sys.prefix) / "cgpu-clients" / "numba-cuda"
ADD_NUMBA_CUDA = f"import site; site.addsitedir({str(NUMBA_CUDA_DIR)!r})\n"


def require(dist: str) -> None:
    """Fail unless `dist` is installed at its pinned version."""
    want = pinned(HERE / "requirements.txt")[dist]
    if dist == "numba-cuda":
        found = list(NUMBA_CUDA_DIR.glob(f"numba_cuda-{want}.dist-info"))
        have = want if found else None
    else:
        have = installed(dist)
    require_pinned(dist, want, have)


def client_runner(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """A function that runs Python `code` (dedented) under `cgpu run`; it returns the report."""

    def run(
        code: str, env: dict[str, str] | None = None, numba_cuda: bool = False
    ) -> dict[str, Any]:
        child_env = {
            k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "NUMBA_"))
        }
        child_env.update(env or {})
        child_env["PYTHONPATH"] = str(HERE)
        # The simulator lists a process's memory when it shares a state directory.
        child_env["CGPU_SIM_STATE"] = str(tmp_path / "sim")
        child_env["CGPU_SIM_CTX_OVERHEAD"] = CONTEXT_OVERHEAD
        child_env["PATH"] = f"{Path(sys.executable).parent}:{child_env.get('PATH', '')}"
        prelude = ADD_NUMBA_CUDA if numba_cuda else ""
        script = prelude + textwrap.dedent(code)
        cmd = [*cgpu_command(), "run", "--gpu-mem", GPU_MEM, "--simulate"]
        cmd += ["--state-dir", str(tmp_path / "state"), "--", sys.executable, "-c", script]
        proc = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        reports = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert reports, f"no RESULT line:\n{proc.stdout}\n{proc.stderr}"
        return json.loads(reports[-1].removeprefix("RESULT "))

    return run
