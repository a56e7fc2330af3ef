"""Read and create container ledgers through the C code the shim uses."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cgpu.core.layout import UUID_RE
from cgpu.core.native import load

ERR_CORRUPT = -5  # CGPU_ERR_CORRUPT
_POLICY = {1: "fixed", 2: "share"}


class LedgerError(Exception):
    """A ledger that cannot be read: missing, foreign, truncated, corrupt or of another version."""

    def __init__(self, path: str, code: int, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.code = code


@dataclass(frozen=True)
class DeviceUsage:
    """One device of a container: its slice and what its live processes use."""

    uuid: str
    limit: int
    used: int
    peak: int
    processes: int
    compute_limit: int = 0  # percent of the GPU's time (cgpu.conf first), 0 = none
    compute_policy: str = ""  # "fixed" or "share" when compute_limit is set
    compute_used: float = 0.0  # the container's share of the GPU's time lately, percent
    compute_priority: str = ""  # "high", "normal" or "low" from the host's cgpu.conf (exporter)


@dataclass(frozen=True)
class ProcessUsage:
    """One live process of a container and its bytes per device UUID."""

    pid: int
    start_time: int
    used: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """What one ledger's live processes hold (dead processes' slots are left out)."""

    path: str
    devices: list[DeviceUsage]
    processes: list[ProcessUsage]
    dead: int
    layout: int = 0  # the file's layout version (Layouts says which ones are read)


@dataclass(frozen=True)
class Layouts:
    """The ledger layouts of this release: the one it writes and the oldest it reads."""

    writes: int
    oldest_read: int
    size: int  # bytes of the layout it writes

    @property
    def reads(self) -> range:
        """Every layout version a snapshot reads."""
        return range(self.oldest_read, self.writes + 1)


def layouts() -> Layouts:
    """What the C code behind `read_ledger` and `init_ledger` writes and reads."""
    ffi, lib = load()
    out = ffi.new("struct cgpu_layouts *")
    lib.cgpu_ledger_layouts(out)
    return Layouts(int(out.writes), int(out.oldest_read), int(out.size))


def _check(path: str, code: int) -> None:
    if code != 0:
        ffi, lib = load()
        message = ffi.string(lib.cgpu_strerror(code)).decode()
        if code == -1:
            message += f" ({os.strerror(ffi.errno)})" if ffi.errno else ""
        raise LedgerError(path, code, message)


def _uuid(path: str, raw: bytes) -> str:
    """A device UUID as the ledger holds it; LedgerError unless it is `[A-Za-z0-9-]{1,95}`.

    The ledger is written from inside the container, so its bytes may be anything.
    """
    text = raw.decode("ascii", errors="replace")
    if not UUID_RE.fullmatch(text):
        raise LedgerError(path, ERR_CORRUPT, f"invalid device UUID {text[:100]!r}")
    return text


def read_ledger(path: str | os.PathLike[str]) -> Snapshot:
    """Snapshot a ledger without writing to it or taking its lock."""
    ffi, lib = load()
    spath = os.fspath(path)
    snap = ffi.new("struct cgpu_snapshot *")
    _check(spath, lib.cgpu_ledger_snapshot(os.fsencode(spath), snap))
    ndevices, nprocesses = snap.ndevices, snap.nprocesses
    if ndevices > len(snap.devices) or nprocesses > len(snap.processes):
        raise LedgerError(spath, ERR_CORRUPT, "device or process count out of range")
    # One cdata per device and process: each attribute access through `snap` makes new ones.
    rows = [snap.devices[i] for i in range(ndevices)]
    uuids = [_uuid(spath, ffi.string(row.uuid)) for row in rows]
    devices = [
        DeviceUsage(
            uuid=uuid,
            limit=row.limit,
            used=row.used,
            peak=row.peak,
            processes=row.processes,
            compute_limit=row.compute_limit,
            compute_policy=_POLICY.get(row.compute_policy, ""),
            compute_used=row.compute_used / 100.0,
        )
        for uuid, row in zip(uuids, rows, strict=True)
    ]
    processes = []
    for p in range(nprocesses):
        proc = snap.processes[p]
        amounts = ffi.unpack(proc.used, ndevices)
        used = {uuid: n for uuid, n in zip(uuids, amounts, strict=True) if n}
        processes.append(ProcessUsage(proc.pid, proc.start_time, used))
    return Snapshot(spath, devices, processes, snap.dead, snap.version)


def init_ledger(path: str | os.PathLike[str], limits: dict[str, int]) -> None:
    """Create the ledger (or extend an existing one) with each device at its slice and 0 used."""
    ffi, lib = load()
    spath = os.fspath(path)
    cfg = ffi.new("struct cgpu_config *")
    if len(limits) > len(cfg.entries):
        raise LedgerError(spath, -6, f"too many devices ({len(limits)})")
    for i, (uuid, limit) in enumerate(limits.items()):
        cfg.entries[i].uuid = uuid.encode()
        cfg.entries[i].limit = limit
    cfg.nentries = len(limits)
    _check(spath, lib.cgpu_ledger_init_file(spath.encode(), cfg))
