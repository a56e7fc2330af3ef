"""`cgpu compute-arbiter`: options, start-up and signals."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from cgpu.core.computestatus import status_path
from cgpu.core.containers import containers_root, default_state_dir
from cgpu.core.native import load

from .arbiter import MS, Arbiter, ArbiterConfig

log = logging.getLogger("compute-arbiter")


def register(parser: argparse.ArgumentParser) -> None:
    """Add the options of `cgpu compute-arbiter`."""
    add = parser.add_argument
    add(
        "--containers",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="a directory of container directories, each with its cgpu.conf (repeatable; "
        "default: the state dir's containers/)",
    )
    add("--quantum-ms", type=float, default=20.0, help="time slice (default: %(default)s)")
    add(
        "--drain-cap-ms",
        type=float,
        default=1000.0,
        help="how long a REVOKE may wait for DONE (default: %(default)s)",
    )
    add(
        "--idle-release-ms",
        type=float,
        default=2.0,
        help="how long an all-idle holder keeps the token when nobody waits (default: %(default)s)",
    )
    add(
        "--status",
        type=Path,
        default=None,
        metavar="FILE",
        help="write a JSON status every second (default: compute-arbiter.json in the state dir "
        "the first --containers lies in, where the exporter and `cgpu ledger` read it)",
    )
    add(
        "--nvml",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="estimate the load of processes outside the containers with NVML (default: try)",
    )
    add(
        "--enforce",
        action="store_true",
        help="kill the processes of a container flagged for out-of-turn GPU work (default: "
        "stop them outside its turns)",
    )
    add("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def settings_from(args: argparse.Namespace) -> ArbiterConfig:
    """The settings the options describe; ValueError for a bad value."""
    if args.quantum_ms <= 0 or args.drain_cap_ms <= 0 or args.idle_release_ms < 0:
        raise ValueError(
            "--quantum-ms and --drain-cap-ms must be positive, --idle-release-ms not negative"
        )
    roots = tuple(root.absolute() for root in args.containers) or (
        containers_root(default_state_dir()).absolute(),
    )
    return ArbiterConfig(
        roots=roots,
        quantum_ns=round(args.quantum_ms * MS),
        drain_cap_ns=round(args.drain_cap_ms * MS),
        idle_release_ns=round(args.idle_release_ms * MS),
        status=args.status or status_path(roots[0].parent),
        nvml=args.nvml,
        enforce=args.enforce,
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; 0 then."""
    try:
        settings = settings_from(args)
    except ValueError as err:
        print(f"cgpu compute-arbiter: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        load()  # the config parser; without it no container would ever be found
    except Exception as err:  # OSError, cffi errors: a broken install
        print(f"cgpu compute-arbiter: cannot load the native library: {err}", file=sys.stderr)
        return 1
    arbiter = Arbiter(settings)

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        arbiter.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("arbitrating compute under %s", ", ".join(map(str, settings.roots)))
    arbiter.run()
    return 0
