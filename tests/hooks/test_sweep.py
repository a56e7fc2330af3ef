"""`cgpu hook sweep`: directories whose container's init process is gone are removed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cgpu.cli import main as cgpu_main
from cgpu.core.containers import containers_root, create_container_dir
from cgpu.core.procfs import start_time
from cgpu.hooks.sweep import sweep

LIMITS = {"GPU-5eed0000-0000-4000-8000-000000000000": 1 << 30}


def _make(state: Path, key: str, **meta: object) -> None:
    create_container_dir(state, key, LIMITS, {"container_id": key, **meta})


def test_sweep_removes_only_dead_hook_containers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    child = subprocess.Popen(["true"])
    child.wait()  # its pid is free now
    me = os.getpid()
    _make(tmp_path, "live", source="hook", init_pid=me, init_start_time=start_time(me))
    _make(tmp_path, "dead", source="hook", init_pid=child.pid, init_start_time=1)
    _make(tmp_path, "reused", source="hook", init_pid=me, init_start_time=start_time(me) - 1)
    _make(tmp_path, "unrecorded", source="hook")
    _make(tmp_path, "plugin", source="device-plugin", init_pid=child.pid, init_start_time=1)
    assert sorted(sweep(tmp_path)) == ["dead", "reused"]
    left = sorted(p.name for p in containers_root(tmp_path).iterdir())
    assert left == ["live", "plugin", "unrecorded"]
    _make(tmp_path, "dead", source="hook", init_pid=child.pid, init_start_time=1)
    assert cgpu_main(["hook", "sweep", "--state-dir", str(tmp_path)]) == 0
    assert "removed dead" in capsys.readouterr().out
