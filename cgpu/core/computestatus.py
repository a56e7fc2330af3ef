"""The compute arbiter's status file (`<state>/compute-arbiter.json`), read by host tools.

`cgpu compute-arbiter` rewrites it every second (cgpu/compute/status.py). It is the host's
file: it lies in the state dir, beside `containers/`, and a container is given only its own
directory (`containers/<key>/`, at /var/run/cgpu), never the state dir itself. So its figures
are the host's, and a container can neither write nor forge them. That is all it is trusted
for:
- only a plain file (never a symlink, FIFO or device), of at most `MAX_BYTES`, owned by root or
  by the reader's own user and writable by its owner only, is read;
- a file older than `STALE_AFTER` seconds (an arbiter that stopped or hung) is reported stale,
  and its figures are not handed out as current;
- a GPU or container entry, or a field, of the wrong shape or out of range is left out and
  counted; the rest of the file still counts;
- container entries are keyed by the container directory the arbiter serves; they name a
  container only through `container_key`, which accepts a directory directly under the
  reader's own `containers/` with a valid key, so the file cannot invent or rename a container.
Nothing here raises for what the file holds.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgpu.core.containers import containers_root, validate_key
from cgpu.core.files import read_plain_file
from cgpu.core.layout import COMPUTE_STATUS_NAME, UUID_RE

STALE_AFTER = 5.0  # seconds; the arbiter writes every second
MAX_BYTES = 8 << 20  # hundreds of containers on 8 GPUs take well under 1 MiB
BEST_EFFORT = "best-effort"  # a container without a limit on a GPU where others have one
POLICIES = ("fixed", "share", BEST_EFFORT)
PRIORITIES = ("high", "normal", "low")

# What `read_status` found, in `ComputeStatus.state`.
CURRENT = "current"  # a fresh file, its figures usable
MISSING = "missing"  # no file: no arbiter, or not yet written
STALE = "stale"  # older than STALE_AFTER (or stamped in the future): figures withheld
CORRUPT = "corrupt"  # not JSON, not an object, no time, no gpus
UNTRUSTED = "untrusted"  # not a plain file, too large, or writable by someone else
IO = "io"  # could not be read
PROBLEMS = (STALE, CORRUPT, UNTRUSTED, IO)  # the states that are counted as errors


def status_path(state_dir: str | os.PathLike[str]) -> Path:
    """Where the arbiter of `state_dir` writes its status: `<state>/compute-arbiter.json`."""
    return Path(state_dir) / COMPUTE_STATUS_NAME


@dataclass(frozen=True)
class ContainerCompute:
    """One container on one GPU, as the arbiter reports it; None where the file has no
    usable value (an older arbiter, or a field of the wrong type or range)."""

    limit: int | None = None  # percent of the GPU's time
    policy: str | None = None  # "fixed" or "share"
    priority: str | None = None  # "high", "normal" or "low"
    share_percent: float | None = None  # the turns the arbiter charged it, over ~1 s
    host_percent: float | None = None  # the GPU's time the host attributes to it, over 10 s
    out_of_turn_s: float | None = None  # GPU time it took outside its turns, in total
    over_compute: bool | None = None  # flagged for out-of-turn work


@dataclass(frozen=True)
class GpuCompute:
    """One GPU: whether NVML's per-process samples were available, and its containers."""

    host_view: bool | None
    containers: Mapping[str, ContainerCompute]  # by the container directory's path


@dataclass(frozen=True)
class ComputeStatus:
    """What one read of the status file gave. `gpus` is empty unless `state` is CURRENT."""

    path: str
    state: str
    written: float | None = None  # the arbiter's time stamp, seconds since the epoch
    age: float | None = None  # seconds since `written` at the read
    gpus: Mapping[str, GpuCompute] = field(default_factory=dict)
    bad_entries: int = 0  # GPU or container entries, or fields, left out
    error: str = ""  # one line for a state other than CURRENT and MISSING

    @property
    def current(self) -> bool:
        return self.state == CURRENT

    def for_directory(self, directory: str | os.PathLike[str]) -> dict[str, ContainerCompute]:
        """{gpu uuid: figures} of the container directory at `directory` (its absolute path,
        or the real path behind it, as the arbiter names it)."""
        names = {os.path.abspath(directory), os.path.realpath(directory)}
        return {
            uuid: entry
            for uuid, gpu in self.gpus.items()
            for name, entry in gpu.containers.items()
            if name in names
        }

    def by_key(self, state_dir: str | os.PathLike[str]) -> dict[tuple[str, str], ContainerCompute]:
        """{(container key, gpu uuid): figures} for the containers under `state_dir`."""
        root = containers_root(state_dir)
        out = {}
        for uuid, gpu in self.gpus.items():
            for name, entry in gpu.containers.items():
                key = container_key(name, root)
                if key is not None:
                    out[(key, uuid)] = entry
        return out


def container_key(name: str, root: str | os.PathLike[str]) -> str | None:
    """The key of the container directory `name` (the arbiter's absolute path) when it lies
    directly under `root` (`<state>/containers`, by its absolute or real path); else None."""
    if not name.startswith("/") or "\0" in name or os.path.normpath(name) != name:
        return None
    parent, key = os.path.split(name)
    if parent not in (os.path.abspath(root), os.path.realpath(root)):
        return None
    try:
        return validate_key(key)
    except ValueError:
        return None


def read_status(
    path: str | os.PathLike[str], now: float | None = None, stale_after: float = STALE_AFTER
) -> ComputeStatus:
    """Read the status file at `path`; never raises for what is (or is not) there."""
    where = os.fspath(path)
    try:
        data = _read_trusted(where)
    except FileNotFoundError:
        return ComputeStatus(where, MISSING)
    except _Untrusted as exc:
        return ComputeStatus(where, UNTRUSTED, error=str(exc))
    except OSError as exc:
        return ComputeStatus(where, IO, error=f"{where}: {exc.strerror or exc}")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return ComputeStatus(where, CORRUPT, error=f"{where}: not JSON: {str(exc)[:100]}")
    if not isinstance(doc, dict):
        return ComputeStatus(where, CORRUPT, error=f"{where}: not a JSON object")
    written = _number(doc.get("time"))
    if written is None or not isinstance(doc.get("gpus"), dict):
        return ComputeStatus(where, CORRUPT, error=f"{where}: no time or no gpus")
    age = (time.time() if now is None else now) - written
    if not -stale_after <= age <= stale_after:
        error = f"{where}: written {age:.0f} s ago (the arbiter writes every second)"
        return ComputeStatus(where, STALE, written, age, error=error)
    gpus, bad = _gpus(doc["gpus"])
    return ComputeStatus(where, CURRENT, written, age, gpus, bad)


class _Untrusted(OSError):
    """A status file the host tools do not read (see the module's docstring)."""


def _read_trusted(path: str) -> bytes:
    """The file's bytes, if it is one the host wrote: a regular file owned by root or this
    user, writable by nobody else, at most MAX_BYTES."""

    def owner(st: os.stat_result) -> str | None:
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            return f"owned by uid {st.st_uid} or writable by others"
        return None

    return read_plain_file(path, MAX_BYTES, _Untrusted, owner)


def _number(value: Any) -> float | None:
    """A finite int or float (never a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _gpus(raw: Mapping[Any, Any]) -> tuple[dict[str, GpuCompute], int]:
    gpus: dict[str, GpuCompute] = {}
    bad = 0
    for uuid, entry in raw.items():
        if not isinstance(uuid, str) or not UUID_RE.match(uuid) or not isinstance(entry, dict):
            bad += 1
            continue
        host_view = entry.get("host_view")
        if host_view is not None and not isinstance(host_view, bool):
            host_view, bad = None, bad + 1
        containers: dict[str, ContainerCompute] = {}
        listed = entry.get("containers", {})
        if not isinstance(listed, dict):
            listed, bad = {}, bad + 1
        for name, figures in listed.items():
            parsed = _container(name, figures)
            if parsed is None:
                bad += 1
                continue
            containers[name], wrong = parsed
            bad += wrong
        gpus[uuid] = GpuCompute(host_view, containers)
    return gpus, bad


def _container(name: Any, raw: Any) -> tuple[ContainerCompute, int] | None:
    """The figures of one entry and how many of its fields were unusable; None for an entry
    that is not a path and an object."""
    if not isinstance(name, str) or not name.startswith("/") or len(name) > 4096:
        return None
    if not isinstance(raw, dict):
        return None
    wrong = 0

    def percent(field_name: str) -> float | None:
        nonlocal wrong
        value = raw.get(field_name)
        number = _number(value)
        if value is not None and (number is None or not 0 <= number <= 100):
            wrong += 1
            return None
        return number

    limit = percent("limit")
    if limit is not None and limit != int(limit):
        limit, wrong = None, wrong + 1
    policy = raw.get("policy")
    if policy is not None and policy not in POLICIES:
        policy, wrong = None, wrong + 1
    priority = raw.get("priority")
    if priority is not None and priority not in PRIORITIES:
        priority, wrong = None, wrong + 1
    seconds = raw.get("out_of_turn_s")
    out_of_turn = _number(seconds)
    if seconds is not None and (out_of_turn is None or out_of_turn < 0):
        out_of_turn, wrong = None, wrong + 1
    over = raw.get("over_compute")
    if over is not None and not isinstance(over, bool):
        over, wrong = None, wrong + 1
    figures = ContainerCompute(
        limit=None if limit is None else int(limit),
        policy=policy,
        priority=priority,
        share_percent=percent("share_percent"),
        host_percent=percent("host_percent"),
        out_of_turn_s=out_of_turn,
        over_compute=over,
    )
    return figures, wrong
