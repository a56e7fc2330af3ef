"""The `run_real` fixture: a script of the real CUDA stack on the simulator (see realkit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from realkit import Runner, runner


@pytest.fixture
def run_real(tmp_path: Path) -> Runner:
    """Run Python code under `cgpu run --gpu-mem 4GiB` (or bare); return its RESULT report."""
    return runner(tmp_path)
