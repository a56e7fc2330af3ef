"""Removing the directories of hook containers whose init process is gone.

Poststop removes a container's directory, but a runtime that crashes or a host that reboots
never runs it. The hook records the container's init process (host PID and start time) in
meta.json; a directory whose process no longer exists, or whose PID now belongs to a process
started at another time, is stale.
"""

from __future__ import annotations

import os

from cgpu.core.containers import list_container_dirs, read_meta, remove_container_dir

SOURCE = "hook"


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot), or None when there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # the command name may hold spaces
    return int(fields[19])


def alive(meta: dict[str, object]) -> bool:
    """Whether the init process recorded in `meta` still runs (True when none is recorded)."""
    pid, started = meta.get("init_pid"), meta.get("init_start_time")
    if not isinstance(pid, int) or not isinstance(started, int):
        return True
    return start_time(pid) == started


def sweep(state_dir: str | os.PathLike[str]) -> list[str]:
    """Remove every stale hook directory under `state_dir`; returns their keys."""
    removed = []
    for path in list_container_dirs(state_dir):
        meta = read_meta(path)
        stale = meta.get("source") == SOURCE and not alive(meta)
        if stale and remove_container_dir(state_dir, path.name):
            removed.append(path.name)
    return removed
