"""tests/shim/family_client.py under the shim on a real GPU, for the tests of this folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cgpu.core.paths import shim_path

DATA = Path(__file__).parent.parent / "shim" / "data"
CLIENT = Path(__file__).parent.parent / "shim" / "family_client.py"


def run_family(ledger_dir: Path, limit: str, *steps: object) -> list[list[str]]:
    """Run the client's steps under the shim with a slice of `limit`; its output lines, split."""
    env = dict(
        os.environ,
        LD_PRELOAD=str(shim_path()),
        CGPU_MEM_LIMIT=limit,
        CGPU_LEDGER_DIR=str(ledger_dir),
    )
    proc = subprocess.run(
        [sys.executable, "-P", str(CLIENT), *map(str, steps)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [line.split() for line in proc.stdout.splitlines()]
