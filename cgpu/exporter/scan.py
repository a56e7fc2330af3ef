"""One pass over the state dir: every container's slices and use, and the files it had to skip.

Each ledger is read through `cgpu.core.ledger.read_ledger` (the shim's own C code), which leaves
out the slots of dead processes, so a process that has exited stops counting at this scrape. The
cost is one fixed-size ledger read per container: nothing grows with the history of the container.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cgpu.core.config import ComputeLine, ConfigError, load_compute_lines, load_config
from cgpu.core.containers import MetaError, list_container_dirs
from cgpu.core.filecache import FileCache, MetaCache
from cgpu.core.hostview import ContainerUsage
from cgpu.core.layout import CONFIG_NAME, LEDGER_NAME
from cgpu.core.ledger import DeviceUsage, LedgerError, ProcessUsage, read_ledger

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
# "meta": a meta.json that is not a small JSON object in a plain file (the container keeps its
# series, labelled by its key); every other reason costs the container its series.
ALL_REASONS = ("foreign", "truncated", "corrupt", "version", "io", "config", "meta")


@dataclass
class ScanResult:
    """What one pass found."""

    containers: list[ContainerUsage] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class HostConfig:
    """A container's cgpu.conf (the host's file, read-only in the container)."""

    limits: Mapping[str, int]  # {uuid: slice bytes}
    compute: Mapping[str, ComputeLine]  # {uuid: (percent, policy, priority)}


def _load_host_config(container_dir: str) -> HostConfig:
    path = os.path.join(container_dir, CONFIG_NAME)
    return HostConfig(load_config(path), load_compute_lines(path))


class ConfigCache(FileCache):
    """Parsed cgpu.conf files (`HostConfig`), re-read only when the file changes."""

    def __init__(self) -> None:
        super().__init__(CONFIG_NAME, _load_host_config)


@dataclass
class Caches:
    """What a scan keeps between passes: parsed meta.json and cgpu.conf files."""

    metas: MetaCache = field(default_factory=MetaCache)
    configs: ConfigCache = field(default_factory=ConfigCache)

    def retain(self, container_dirs: list[str]) -> None:
        """Forget the directories that are gone."""
        self.metas.retain(container_dirs)
        self.configs.retain(container_dirs)


def _with_limits(config: HostConfig, ledger: tuple[DeviceUsage, ...]) -> tuple[DeviceUsage, ...]:
    """The config's devices, slices and compute limits, with the use the ledger records.

    The config is the host's (read-only in the container); the ledger is the container's own
    file, so its device list and limits are never believed over the config.
    """
    by_uuid: dict[str, DeviceUsage] = {}
    for dev in ledger:
        by_uuid.setdefault(dev.uuid, dev)
    out = []
    for uuid, limit in config.limits.items():
        percent, policy, priority = config.compute.get(uuid, (0, "", ""))
        dev = by_uuid.get(uuid) or DeviceUsage(uuid, limit, 0, 0, 0)
        known = (dev.limit, dev.compute_limit, dev.compute_policy, dev.compute_priority)
        if known != (limit, percent, policy, priority):
            # What dataclasses.replace would build, at a fraction of its cost.
            used, peak, processes, share = dev.used, dev.peak, dev.processes, dev.compute_used
            dev = DeviceUsage(uuid, limit, used, peak, processes, percent, policy, share, priority)
        out.append(dev)
    return tuple(out)


def _file_id(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of whatever is at `path` (never followed), None when nothing is."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def read_container(
    container_dir: str, meta: Mapping[str, Any], config: HostConfig | None
) -> ContainerUsage | None:
    """The container's usage, or None when the directory holds neither ledger nor config.

    `config` is the parsed `cgpu.conf` (None when there is none): when present it decides the
    devices, slices and compute limits, and the ledger adds only their use. Raises LedgerError
    for a ledger that exists but cannot be trusted (whatever is in its place).
    """
    ledger = os.path.join(container_dir, LEDGER_NAME)
    try:
        snap = read_ledger(ledger)
    except LedgerError as exc:
        if exc.code != ERR_IO or os.path.lexists(ledger):
            raise
        snap = None
    ledger_id = None
    devices: tuple[DeviceUsage, ...] = ()
    processes: tuple[ProcessUsage, ...] = ()
    if snap is not None:
        devices, processes = tuple(snap.devices), tuple(snap.processes)
        ledger_id = _file_id(ledger)
    if config is not None:
        devices = _with_limits(config, devices)
    if not devices:
        return None
    return ContainerUsage(os.path.basename(container_dir), meta, devices, processes, ledger_id)


def _one(container_dir: str, caches: Caches, skipped: Counter[str]) -> ContainerUsage | None:
    try:
        meta = caches.metas.get(container_dir) or {}
    except MetaError as exc:
        skipped["meta"] += 1
        log.debug("ignoring %s", exc)
        meta = {}
    config = caches.configs.get(container_dir)
    try:
        return read_container(container_dir, meta, config)
    except LedgerError as exc:
        if config is None or not config.limits:
            raise
        # Its ledger is damaged (perhaps on purpose): no ledger figures, but its slices and
        # its GPU processes, as the host sees them, still count.
        skipped[REASONS.get(exc.code, "corrupt")] += 1
        log.debug("ledger figures skipped: %s", exc)
        devices = _with_limits(config, ())
        ledger_id = _file_id(os.path.join(container_dir, LEDGER_NAME))
        key = os.path.basename(container_dir)
        return ContainerUsage(key, meta, devices, (), ledger_id, ledger_ok=False)


def scan(state_dir: str | os.PathLike[str], caches: Caches) -> ScanResult:
    """Read every container directory under `state_dir`; never raises for one bad container.

    Whatever a container directory holds (any bytes, sizes, file types, changing at any
    moment) costs only that container its series, counted in `skipped` by reason.
    """
    result = ScanResult()
    try:
        # Paths as str: they hash, compare and join faster than Path objects.
        dirs = [os.fspath(d) for d in list_container_dirs(state_dir)]
    except OSError as exc:  # the state dir exists but cannot be listed
        log.warning("cannot list containers in %s: %s", state_dir, exc)
        result.skipped["io"] += 1
        return result
    for container_dir in dirs:
        try:
            usage = _one(container_dir, caches, result.skipped)
        except LedgerError as exc:
            reason = REASONS.get(exc.code, "corrupt")
            result.skipped[reason] += 1
            log.debug("skipping ledger %s", exc)
            continue
        except ConfigError as exc:
            result.skipped["config"] += 1
            log.debug("skipping config in %s: %s", container_dir, exc)
            continue
        except FileNotFoundError:  # the directory went away mid-scan
            continue
        except OSError as exc:
            result.skipped["io"] += 1
            log.debug("skipping %s: %s", container_dir, exc)
            continue
        except Exception:  # a bug must not cost the other containers their series
            result.skipped["corrupt"] += 1
            log.exception("skipping %s", container_dir)
            continue
        if usage is not None:
            result.containers.append(usage)
    caches.retain(dirs)
    return result
