"""`cgpu ledger`: the slices, the use and the processes of container ledgers."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from cgpu.core.containers import default_state_dir, list_container_dirs, read_meta
from cgpu.core.layout import LEDGER_NAME
from cgpu.core.ledger import LedgerError, Snapshot, read_ledger

MiB = 1 << 20


@dataclass(frozen=True)
class Config:
    """The options of `cgpu ledger`, read once from the command line."""

    paths: tuple[Path, ...] = ()
    state_dir: Path | None = None
    json: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe."""
        return cls(tuple(args.paths), args.state_dir, args.json)


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


def _print(key: str, meta: dict[str, object], snap: Snapshot) -> None:
    who = "/".join(str(meta[k]) for k in ("namespace", "pod", "container") if meta.get(k)) or key
    print(_safe(f"{key}  ({who})"))
    for dev in snap.devices:
        pct = 100.0 * dev.used / dev.limit if dev.limit else 0.0
        print(
            f"  {dev.uuid}  used {dev.used / MiB:10.1f} MiB / slice {dev.limit / MiB:10.1f} MiB"
            f"  ({pct:5.1f}%)  peak {dev.peak / MiB:.1f} MiB  processes {dev.processes}"
        )
    for proc in snap.processes:
        use = ", ".join(f"{u}: {b / MiB:.1f} MiB" for u, b in proc.used.items()) or "nothing"
        print(f"    pid {proc.pid:>8}  {use}")


def run(args: argparse.Namespace) -> int:
    """Print every ledger; unreadable ones are reported and make the exit status 1."""
    return show(Config.from_args(args))


def show(config: Config) -> int:
    """Print every ledger; unreadable ones are reported and make the exit status 1."""
    status, records = 0, []
    for key, path in _targets(config):
        try:
            snap = read_ledger(path)
        except (LedgerError, OSError, ValueError) as exc:
            # Whatever a container left in place of its ledger: report it and go on.
            print(f"cgpu ledger: skipped {_safe(str(exc))}", file=sys.stderr)
            status = 1
            continue
        meta = read_meta(path.parent)
        if config.json:
            records.append({"key": key, "meta": meta, **asdict(snap)})
        else:
            _print(key, meta, snap)
    if config.json:
        json.dump(records, sys.stdout, indent=2)
        print()
    return status
