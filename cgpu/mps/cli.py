"""`cgpu mps-daemon`: options, start-up, signals, and `--check` for readiness probes."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from cgpu.core import mpslayout
from cgpu.core.config import ConfigError, parse_size
from cgpu.core.layout import MPS_ROOT
from cgpu.mps.control import CONTROL_BINARY
from cgpu.mps.supervisor import EXCLUSIVE_PROCESS, Supervisor, SupervisorConfig

log = logging.getLogger("mps-daemon")


@dataclass(frozen=True)
class Config:
    """The options of `cgpu mps-daemon`, read once."""

    root: Path
    gpus: tuple[str, ...]
    binary: str
    thread_percentage: int | None
    pinned_bytes: int | None
    interval: float
    restart_delay: float
    compute_mode: str | None
    check: bool
    max_age: float
    log_level: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe; ValueError for a bad value."""
        percent = args.active_thread_percentage
        if percent is not None and not 1 <= percent <= 100:
            raise ValueError(f"--active-thread-percentage {percent}: 1 to 100")
        pinned = None
        if args.pinned_mem_limit:
            try:
                pinned = parse_size(args.pinned_mem_limit)
            except ConfigError as err:
                raise ValueError(f"--pinned-mem-limit: {err}") from None
        if args.interval <= 0 or args.restart_delay < 0:
            raise ValueError("--interval must be positive and --restart-delay not negative")
        return cls(
            root=args.root,
            gpus=tuple(args.gpu),
            binary=args.control_binary,
            thread_percentage=percent,
            pinned_bytes=pinned,
            interval=args.interval,
            restart_delay=args.restart_delay,
            compute_mode=None if args.compute_mode == "none" else args.compute_mode,
            check=args.check,
            max_age=args.max_age,
            log_level=args.log_level,
        )


def register(parser: argparse.ArgumentParser) -> None:
    """Add the options of `cgpu mps-daemon`."""
    add = parser.add_argument
    add(
        "--root",
        type=Path,
        default=Path(MPS_ROOT),
        help="host directory for <gpu-uuid>/{pipe,log}, the health files and shm "
        "(default: %(default)s)",
    )
    add(
        "--gpu",
        action="append",
        default=[],
        metavar="UUID",
        help="run a daemon for this GPU (repeatable; default: every GPU NVML reports)",
    )
    add(
        "--active-thread-percentage",
        type=int,
        default=None,
        metavar="PERCENT",
        help="the clients' default share of the GPU's threads "
        "(set_default_active_thread_percentage; default: MPS's own, 100)",
    )
    add(
        "--pinned-mem-limit",
        default=None,
        metavar="SIZE",
        help="the clients' default device memory limit, e.g. 8GiB "
        "(set_default_device_pinned_mem_limit; default: none)",
    )
    add(
        "--control-binary",
        default=CONTROL_BINARY,
        help="the MPS control program (default: %(default)s, from PATH)",
    )
    add(
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often each daemon is probed (default: %(default)s)",
    )
    add(
        "--restart-delay",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long a dead daemon stays down before it is started again (default: %(default)s)",
    )
    add(
        "--compute-mode",
        choices=(EXCLUSIVE_PROCESS, "none"),
        default=EXCLUSIVE_PROCESS,
        help="set the GPUs' compute mode with nvidia-smi while the daemons run, as NVIDIA's "
        "plugin does, so that only MPS clients use them (default: %(default)s)",
    )
    add(
        "--check",
        action="store_true",
        help="do not run anything: exit 0 when every daemon under --root is ready "
        "(for a readiness probe)",
    )
    add(
        "--max-age",
        type=float,
        default=mpslayout.DEFAULT_MAX_AGE,
        metavar="SECONDS",
        help="with --check: how fresh a health file must be (default: %(default)s)",
    )
    add("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))  # fmt: skip


def check(config: Config) -> int:
    """Readiness: 0 when every GPU's daemon under the root is ready, else 1 with reasons."""
    uuids = list(config.gpus) or sorted(
        p.parent.name for p in config.root.glob(f"*/{mpslayout.HEALTH_NAME}")
    )
    if not uuids:
        print(f"no MPS daemon health files under {config.root}", file=sys.stderr)
        return 1
    bad = 0
    for uuid in uuids:
        state = mpslayout.read_health(config.root, uuid, config.max_age)
        print(f"{uuid}: {state.reason}", file=sys.stdout if state.ready else sys.stderr)
        bad += not state.ready
    return 1 if bad else 0


def discover() -> list[str]:
    """Every GPU's UUID, from NVML."""
    from cgpu.core.gpus import list_gpus

    return [g.uuid for g in list_gpus()]


def run(args: argparse.Namespace) -> int:
    """Run (or, with --check, probe) the daemons."""
    try:
        config = Config.from_args(args)
    except ValueError as err:
        print(f"cgpu mps-daemon: {err}", file=sys.stderr)
        return 2
    if config.check:
        return check(config)
    logging.basicConfig(
        level=config.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        uuids = list(config.gpus) or discover()
    except Exception as err:  # NVML raises its own error types
        print(f"cgpu mps-daemon: cannot list GPUs: {err}", file=sys.stderr)
        return 1
    if not uuids:
        print("cgpu mps-daemon: no GPUs", file=sys.stderr)
        return 1
    settings = SupervisorConfig(
        root=config.root.resolve(),
        binary=config.binary,
        thread_percentage=config.thread_percentage,
        pinned_bytes=config.pinned_bytes,
        interval=config.interval,
        restart_delay=config.restart_delay,
        compute_mode=config.compute_mode,
    )
    try:
        supervisor = Supervisor(uuids, settings)
    except ValueError as err:
        print(f"cgpu mps-daemon: {err}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        supervisor.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("supervising MPS control daemons for %s under %s", ", ".join(uuids), settings.root)
    return supervisor.run()
