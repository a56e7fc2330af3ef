"""`cgpu ledger`: the slices, the use and the processes of container ledgers."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from cgpu.core.computestatus import (
    BEST_EFFORT,
    ComputeStatus,
    ContainerCompute,
    read_status,
    status_path,
)
from cgpu.core.config import ConfigError, load_compute_lines
from cgpu.core.containers import default_state_dir, list_container_dirs, read_meta
from cgpu.core.layout import CONFIG_NAME, LEDGER_NAME
from cgpu.core.ledger import DeviceUsage, LedgerError, Snapshot, read_ledger

MiB = 1 << 20


@dataclass(frozen=True)
class Config:
    """The options of `cgpu ledger`, read once from the command line."""

    paths: tuple[Path, ...] = ()
    state_dir: Path | None = None
    json: bool = False
    compute_status: Path | None = None  # None: the one beside each container's directory

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe."""
        return cls(tuple(args.paths), args.state_dir, args.json, args.compute_status)


def register(parser: argparse.ArgumentParser) -> None:
    """Options of `cgpu ledger`."""
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="ledger files or container directories (default: all under --state-dir)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="default: /var/lib/cgpu if writable, else the private directory `cgpu run` uses",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--compute-status",
        type=Path,
        default=None,
        metavar="FILE",
        help="the compute arbiter's status file, for the host's view of compute (default: "
        "compute-arbiter.json in the state dir of each container directory)",
    )


def _targets(config: Config) -> list[tuple[str, Path]]:
    if config.paths:
        return [
            (p.name if p.is_dir() else p.parent.name, p / LEDGER_NAME if p.is_dir() else p)
            for p in config.paths
        ]
    state_dir = config.state_dir or default_state_dir()
    return [(d.name, d / LEDGER_NAME) for d in list_container_dirs(state_dir)]


def _safe(text: str) -> str:
    """`text` with control characters and undecodable bytes escaped, for a terminal."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


class _Statuses:
    """The compute arbiter's status files, each read once per run."""

    def __init__(self, override: Path | None) -> None:
        self._override = override
        self._read: dict[Path, ComputeStatus] = {}

    def of(self, container_dir: Path) -> ComputeStatus:
        """The status that covers `container_dir` (`<state>/containers/<key>`)."""
        path = self._override or status_path(container_dir.absolute().parent.parent)
        if path not in self._read:
            self._read[path] = read_status(path)
        return self._read[path]


def _with_priorities(snap: Snapshot, container_dir: Path) -> Snapshot:
    """The snapshot with each compute limit's priority from the host's cgpu.conf beside it
    (none where the file is missing or malformed: the ledger's figures still show)."""
    try:
        lines = load_compute_lines(container_dir / CONFIG_NAME)
    except (ConfigError, OSError):
        return snap
    devices = [
        replace(dev, compute_priority=lines[dev.uuid].priority) if dev.uuid in lines else dev
        for dev in snap.devices
    ]
    return replace(snap, devices=devices)


def _fmt(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.1f}{unit}"


def _compute_line(dev: DeviceUsage, status: ComputeStatus, host: ContainerCompute | None) -> str:
    """The compute figures of one device: the ledger's (the container's own) and the host's."""
    limit, policy, priority = dev.compute_limit, dev.compute_policy, dev.compute_priority
    if not limit and host is not None:  # no shim has written it yet: the arbiter's (cgpu.conf)
        limit, policy = host.limit or 0, host.policy or ""
    if host is not None and host.priority:
        priority = host.priority  # what the arbiter serves it at
    if policy == BEST_EFFORT:  # no limit of its own: turns on a GPU where another has one
        line = f"    compute {policy} {priority}".rstrip()
    else:
        line = f"    compute limit {limit}% {policy} {priority}".rstrip()
    line += f"  ledger {dev.compute_used:.1f}%"
    if status.state == "missing":
        return line + "  host: no arbiter status"
    if status.state == "stale":
        return line + f"  host: stale (written {status.age or 0:.0f} s ago)"
    if not status.current:
        return line + f"  host: {status.state} status file"
    if host is None:
        return line + "  host: not served by the arbiter"
    line += f"  host: turns {_fmt(host.share_percent, '%')}"
    line += f"  10 s {_fmt(host.host_percent, '%')}"
    line += f"  out of turn {_fmt(host.out_of_turn_s, ' s')}"
    if host.over_compute:
        line += "  OVER COMPUTE"
    return line


def _print(
    key: str,
    meta: dict[str, object],
    snap: Snapshot,
    status: ComputeStatus,
    host: dict[str, ContainerCompute],
) -> None:
    who = "/".join(str(meta[k]) for k in ("namespace", "pod", "container") if meta.get(k)) or key
    print(_safe(f"{key}  ({who})"))
    for dev in snap.devices:
        pct = 100.0 * dev.used / dev.limit if dev.limit else 0.0
        print(
            f"  {dev.uuid}  used {dev.used / MiB:10.1f} MiB / slice {dev.limit / MiB:10.1f} MiB"
            f"  ({pct:5.1f}%)  peak {dev.peak / MiB:.1f} MiB  processes {dev.processes}"
        )
        if dev.compute_limit or dev.uuid in host:
            print(_safe(_compute_line(dev, status, host.get(dev.uuid))))
    for proc in snap.processes:
        use = ", ".join(f"{u}: {b / MiB:.1f} MiB" for u, b in proc.used.items()) or "nothing"
        print(f"    pid {proc.pid:>8}  {use}")


def run(args: argparse.Namespace) -> int:
    """Print every ledger; unreadable ones are reported and make the exit status 1."""
    return show(Config.from_args(args))


def show(config: Config) -> int:
    """Print every ledger; unreadable ones are reported and make the exit status 1."""
    status, records = 0, []
    statuses = _Statuses(config.compute_status)
    for key, path in _targets(config):
        try:
            snap = read_ledger(path)
        except (LedgerError, OSError, ValueError) as exc:
            # Whatever a container left in place of its ledger: report it and go on.
            print(f"cgpu ledger: skipped {_safe(str(exc))}", file=sys.stderr)
            status = 1
            continue
        snap = _with_priorities(snap, path.parent)
        meta = read_meta(path.parent)
        compute = statuses.of(path.parent)
        host = compute.for_directory(path.parent)
        if config.json:
            records.append(
                {
                    "key": key,
                    "meta": meta,
                    **asdict(snap),
                    "compute_status": compute.state,
                    "host_compute": {uuid: asdict(h) for uuid, h in host.items()},
                }
            )
        else:
            _print(key, meta, snap, compute, host)
    if config.json:
        json.dump(records, sys.stdout, indent=2)
        print()
    return status
