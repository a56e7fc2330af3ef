"""One pass over the state dir: every container's slices and use, and the files it had to skip.

Each ledger is read through `cgpu.core.ledger.read_ledger` (the shim's own C code), which leaves
out the slots of dead processes, so a process that has exited stops counting at this scrape. The
cost is one fixed-size ledger read per container: nothing grows with the history of the container.
"""

from __future__ import annotations

import logging
import os
import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cgpu.core.config import ConfigError, load_config
from cgpu.core.containers import list_container_dirs, read_meta
from cgpu.core.layout import CONFIG_NAME, LEDGER_NAME, META_NAME
from cgpu.core.ledger import DeviceUsage, LedgerError, read_ledger

log = logging.getLogger(__name__)

# LedgerError codes (CGPU_ERR_* in cgpu_api.h) -> the `reason` label of the skip metrics.
ERR_IO = -1
REASONS: dict[int, str] = {
    ERR_IO: "io",
    -2: "foreign",
    -3: "version",
    -4: "truncated",
    -5: "corrupt",
}
ALL_REASONS = ("foreign", "truncated", "corrupt", "version", "io", "config")


@dataclass(frozen=True)
class ContainerUsage:
    """One container directory as seen at this scrape."""

    key: str
    meta: Mapping[str, Any]
    devices: tuple[DeviceUsage, ...]


@dataclass
class ScanResult:
    """What one pass found."""

    containers: list[ContainerUsage] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


META_MAX_BYTES = 64 * 1024


class MetaCache:
    """meta.json contents, re-read only when the file's inode, size or mtime changes.

    The container can write its own directory, so only a plain file of at most
    META_MAX_BYTES is read; anything else counts as no metadata.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[tuple[int, int, int], Mapping[str, Any]]] = {}

    def get(self, container_dir: Path) -> Mapping[str, Any]:
        """The container's meta.json ({} when missing or unreadable)."""
        path = str(container_dir / META_NAME)
        try:
            st = os.lstat(path)
        except OSError:
            self._entries.pop(path, None)
            return {}
        if not stat.S_ISREG(st.st_mode) or st.st_size > META_MAX_BYTES:
            self._entries.pop(path, None)
            return {}
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._entries.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        meta = read_meta(container_dir)
        self._entries[path] = (stamp, meta)
        return meta

    def retain(self, container_dirs: list[Path]) -> None:
        """Forget the directories that are gone."""
        keep = {str(d / META_NAME) for d in container_dirs}
        for path in [p for p in self._entries if p not in keep]:
            del self._entries[path]


def _from_config(container_dir: Path) -> tuple[DeviceUsage, ...] | None:
    """The slices of a container with no ledger yet, all at 0 used; None when it has no config."""
    try:
        limits = load_config(container_dir / CONFIG_NAME)
    except ConfigError:
        if not (container_dir / CONFIG_NAME).exists():
            return None
        raise
    return tuple(DeviceUsage(uuid, limit, 0, 0, 0) for uuid, limit in limits.items())


def read_container(container_dir: Path, meta: Mapping[str, Any]) -> ContainerUsage | None:
    """The container's usage, or None when the directory holds neither ledger nor config.

    A ledger that does not exist yet, or lists no device yet, gives way to `cgpu.conf`.
    Raises LedgerError for a ledger that exists but cannot be trusted, ConfigError for a
    malformed config in its place.
    """
    ledger = container_dir / LEDGER_NAME
    try:
        devices: tuple[DeviceUsage, ...] | None = tuple(read_ledger(ledger).devices)
    except LedgerError as exc:
        if exc.code != ERR_IO or ledger.exists():
            raise
        devices = None
    if not devices:
        devices = _from_config(container_dir)
        if devices is None:
            return None
    return ContainerUsage(container_dir.name, meta, devices)


def scan(state_dir: str | os.PathLike[str], metas: MetaCache) -> ScanResult:
    """Read every container directory under `state_dir`; never raises for one bad container."""
    result = ScanResult()
    try:
        dirs = list(list_container_dirs(state_dir))
    except OSError as exc:  # the state dir exists but cannot be listed
        log.warning("cannot list containers in %s: %s", state_dir, exc)
        result.skipped["io"] += 1
        return result
    for container_dir in dirs:
        try:
            usage = read_container(container_dir, metas.get(container_dir))
        except LedgerError as exc:
            reason = REASONS.get(exc.code, "corrupt")
            result.skipped[reason] += 1
            log.debug("skipping ledger %s", exc)
            continue
        except ConfigError as exc:
            result.skipped["config"] += 1
            log.debug("skipping config in %s: %s", container_dir, exc)
            continue
        except OSError as exc:  # the directory vanished or is unreadable mid-scan
            log.debug("skipping %s: %s", container_dir, exc)
            continue
        if usage is not None:
            result.containers.append(usage)
    metas.retain(dirs)
    return result
