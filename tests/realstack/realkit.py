"""Run a script of NVIDIA's real CUDA stack (PyTorch, CuPy, libcudart) on the simulator.

Under `cgpu run --gpu-mem 4GiB --simulate` by default, or bare on the simulator (no shim).
The scripts import tests/clients/inside.py (fill, report, the ledger's figure) and
tests/realstack/rt.py (where the pinned libcudart files are). The stack is installed by
scripts/install-clients.sh (from scripts/setup.sh) at the versions in requirements.txt here;
a missing piece fails its test.
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

from cgpu.core.paths import sim_lib_dir

HERE = Path(__file__).resolve().parent
CLIENTS = HERE.parent / "clients"
# The scripts' helpers (fill, report, the ledger's figure) are tests/clients/inside.py.
sys.path.append(str(CLIENTS))
from inside import CHUNK, SLICE  # noqa: E402

__all__ = ["CHUNK", "SIM_MEMORY", "SLICE", "Runner", "require", "runner"]
GPU_MEM = "4GiB"
SIM_MEMORY = 24 << 30  # the simulated GPU: what shows with no shim
CONTEXT_OVERHEAD = "20MiB"


def require(dist: str) -> None:
    """Fail unless `dist` is installed at its pinned version."""
    require_pinned(dist, pinned(HERE / "requirements.txt")[dist], installed(dist))


Runner = Callable[..., dict[str, Any]]


def runner(tmp_path: Path) -> Runner:
    """A function that runs Python `code` (dedented) and returns its last RESULT report.

    shim=False runs it on the simulator without cgpu; env adds variables.
    """

    def run(code: str, env: dict[str, str] | None = None, shim: bool = True) -> dict[str, Any]:
        child = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "PYTORCH_"))}
        child.update(env or {})
        child["PYTHONPATH"] = os.pathsep.join((str(HERE), str(CLIENTS)))
        child["CGPU_SIM_STATE"] = str(tmp_path / "sim")
        child["CGPU_SIM_MEMORY"] = str(SIM_MEMORY)
        child["CGPU_SIM_CTX_OVERHEAD"] = CONTEXT_OVERHEAD
        child["PATH"] = f"{Path(sys.executable).parent}:{child.get('PATH', '')}"
        script = textwrap.dedent(code)
        py = [sys.executable, "-c", script]
        if shim:
            cmd = [*cgpu_command(), "run", "--gpu-mem", GPU_MEM, "--simulate"]
            cmd += ["--state-dir", str(tmp_path / "state"), "--", *py]
        else:
            lib = child.get("LD_LIBRARY_PATH", "")
            child["LD_LIBRARY_PATH"] = f"{sim_lib_dir()}:{lib}" if lib else str(sim_lib_dir())
            cmd = py
        proc = subprocess.run(cmd, env=child, capture_output=True, text=True, timeout=420)
        assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        reports = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert reports, f"no RESULT line:\n{proc.stdout}\n{proc.stderr}"
        return json.loads(reports[-1].removeprefix("RESULT "))

    return run
