"""`cgpu hook [poststop|sweep|install]`: the OCI runtime hook, its clean-up and its hooks.d file."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from cgpu.core import gpus
from cgpu.core.containers import DEFAULT_STATE_DIR
from cgpu.hooks.emit import cgpu_argv
from cgpu.hooks.errors import RequestError, one_line
from cgpu.hooks.hook import poststop, prestart
from cgpu.hooks.install import DEFAULT_HOOKS_DIR, STAGES, install
from cgpu.hooks.oci import read_state
from cgpu.hooks.sweep import sweep

EXIT_INTERNAL = 1
EXIT_REQUEST = 2


@dataclass(frozen=True)
class Config:
    """The options of `cgpu hook`, read once from the command line."""

    action: str | None = None  # None: the hook itself; else poststop, sweep or install
    state_dir: Path = Path(DEFAULT_STATE_DIR)
    hooks_dir: str = DEFAULT_HOOKS_DIR  # install only
    stage: str = STAGES[0]  # install only
    cgpu: str | None = None  # install only
    simulate: bool = False  # the simulated GPU's NVML, for hosts without a driver

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe (the state dir made absolute)."""
        return cls(
            action=args.action,
            state_dir=Path(os.path.abspath(args.state_dir)),
            hooks_dir=getattr(args, "dir", DEFAULT_HOOKS_DIR),
            stage=getattr(args, "stage", STAGES[0]),
            cgpu=getattr(args, "cgpu", None),
            simulate=bool(getattr(args, "simulate", False)),
        )


def _common_options(parser: argparse.ArgumentParser, default: object) -> None:
    """--state-dir and --simulate; sub-actions take them too (SUPPRESS: the parent's stand)."""
    parser.add_argument(
        "--state-dir",
        default=default,
        help=f"where container directories live (default {DEFAULT_STATE_DIR})",
    )
    parser.add_argument(
        "--simulate",
        action="store_true",
        default=argparse.SUPPRESS if default is argparse.SUPPRESS else False,
        help="read GPUs from cgpu's simulated GPU (hosts without a driver: tests, demos)",
    )


def register(parser: argparse.ArgumentParser) -> None:
    """`cgpu hook` reads the OCI state on stdin; poststop, sweep and install are sub-actions."""
    parser.epilog = (
        "With no ACTION, cgpu hook is a prestart/createRuntime hook: it reads the OCI state on "
        "stdin (and removes the container's directory when the state says stopped)."
    )
    _common_options(parser, DEFAULT_STATE_DIR)
    sub = parser.add_subparsers(dest="action", metavar="[ACTION]")
    stop = sub.add_parser("poststop", help="remove a stopped container's directory")
    _common_options(stop, argparse.SUPPRESS)
    swp = sub.add_parser("sweep", help="remove the directories of containers that are gone")
    _common_options(swp, argparse.SUPPRESS)
    inst = sub.add_parser("install", help="write the hooks.d file for podman and CRI-O")
    _common_options(inst, argparse.SUPPRESS)
    inst.add_argument("--dir", default=DEFAULT_HOOKS_DIR, help=f"default {DEFAULT_HOOKS_DIR}")
    inst.add_argument("--stage", choices=STAGES, default=STAGES[0], help="default %(default)s")
    inst.add_argument("--cgpu", help="the cgpu executable the runtime runs (default: this one)")


def run(args: argparse.Namespace) -> int:
    """Run the hook; a malformed request exits 2 and an internal error 1, each with one line."""
    return hook(Config.from_args(args))


def hook(config: Config) -> int:
    """Run the hook; a malformed request exits 2 and an internal error 1, each with one line."""
    state_dir = config.state_dir
    try:
        if config.action == "install":
            path = install(
                config.hooks_dir, cgpu_argv(config.cgpu), str(state_dir), config.stage,
                simulate=config.simulate,
            )
            print(path)
            return 0
        if config.simulate:
            gpus.use_simulator()
        if config.action == "sweep":
            for key in sweep(state_dir):
                print(f"removed {key}")
            return 0
        state = read_state(sys.stdin.buffer)
        if config.action == "poststop" or state.status == "stopped":
            poststop(state, state_dir)
        else:
            prestart(state, state_dir)
        return 0
    except RequestError as exc:
        print(f"cgpu hook: {one_line(exc)}", file=sys.stderr)
        return EXIT_REQUEST
    except Exception as exc:
        print(f"cgpu hook: internal error: {one_line(exc)}", file=sys.stderr)
        return EXIT_INTERNAL
