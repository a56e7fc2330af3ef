"""The `run_client` fixture: a client script under `cgpu run` (see clientkit)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clientkit import client_runner


@pytest.fixture
def run_client(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Run Python code under `cgpu run --gpu-mem 4GiB`; return its RESULT report."""
    return client_runner(tmp_path)
