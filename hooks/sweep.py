"""Removing the directories of hook containers whose init process is gone.

Poststop removes a container's directory, but a runtime that crashes or a host that reboots
never runs it. The hook records the container's init process (host PID and start time) in
meta.json; a directory whose process no longer exists, or whose PID now belongs to a process
started at another time, is stale.
"""

from __future__ import annotations

import os

from cgpu.core import cleanup
from cgpu.core.cleanup import Entry
from cgpu.core.layout import SOURCE_HOOK
from cgpu.core.procfs import start_time


def alive(meta: dict[str, object]) -> bool:
    """Whether the init process recorded in `meta` still runs (True when none is recorded)."""
    pid, started = meta.get("init_pid"), meta.get("init_start_time")
    if not isinstance(pid, int) or not isinstance(started, int):
        return True
    return start_time(pid) == started


def _stale(entry: Entry) -> str | None:
    return None if alive(entry.meta) else "its init process is gone"


def sweep(state_dir: str | os.PathLike[str]) -> list[str]:
    """Remove every stale hook directory under `state_dir`; returns their keys."""
    return cleanup.sweep(state_dir, {SOURCE_HOOK: _stale})
