"""`cgpu run`: run a command under a GPU memory slice on this machine, with no Kubernetes."""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cgpu.core import context_cost, gpus
from cgpu.core.config import ConfigError, parse_size
from cgpu.core.containers import create_container_dir, default_state_dir
from cgpu.core.layout import (
    ENV_LEDGER_DIR,
    ENV_SIM_STATE,
    ENV_VISIBLE_DEVICES,
    SIM_STATE_FILE,
    SOURCE_RUN,
)
from cgpu.core.paths import shim_path, with_simulator


@dataclass(frozen=True)
class Config:
    """The options of `cgpu run`, read once from the command line."""

    gpu_mem: str
    command: tuple[str, ...]  # without a leading "--"
    gpu: str | None = None
    simulate: bool = False
    state_dir: Path | None = None
    keep: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe."""
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return cls(
            gpu_mem=args.gpu_mem,
            command=tuple(command),
            gpu=args.gpu,
            simulate=args.simulate,
            state_dir=args.state_dir,
            keep=args.keep,
        )


def register(parser: argparse.ArgumentParser) -> None:
    """Options of `cgpu run`."""
    parser.add_argument(
        "--gpu-mem",
        required=True,
        metavar="SIZE",
        help="slice per GPU: bytes, or with KiB/MiB/GiB (K/M/G)",
    )
    parser.add_argument("--gpu", metavar="N", help="GPU index or comma list (default: all GPUs)")
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="use the built-in simulated GPU (also the default when no driver is found)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where the container directory goes (default: /var/lib/cgpu if writable)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the ledger after the command exits"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def _select(all_gpus: list[gpus.GPU], spec: str | None) -> list[gpus.GPU]:
    if spec is None:
        return all_gpus
    by_index = {g.index: g for g in all_gpus}
    chosen = []
    for part in spec.split(","):
        if not part.strip().isdigit() or int(part) not in by_index:
            known = ", ".join(str(i) for i in by_index) or "none"
            raise ValueError(f"unknown GPU {part!r} (GPUs on this machine: {known})")
        chosen.append(by_index[int(part)])
    return chosen


def _simulator_env(state_dir: Path) -> dict[str, str]:
    """This environment with the simulated GPU: its libraries, and one state file that every
    `cgpu run` of this state dir shares (unless CGPU_SIM_STATE names another), so its processes
    see each other as on one real GPU: NVML's used memory and process list (nvidia-smi's)."""
    env = with_simulator()
    env.setdefault(ENV_SIM_STATE, str(state_dir / SIM_STATE_FILE))
    return env


def _child_env(
    run_dir: Path, base: dict[str, str], chosen: list[gpus.GPU], all_count: int
) -> dict[str, str]:
    env = dict(base)
    env[ENV_LEDGER_DIR] = str(run_dir)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{shim_path()}:{preload}" if preload else str(shim_path())
    if len(chosen) != all_count:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in chosen)
        env[ENV_VISIBLE_DEVICES] = env["CUDA_VISIBLE_DEVICES"]
    return env


def run(args: argparse.Namespace) -> int:
    """Create a container directory with the slice, run the command in it, clean up."""
    return run_sliced(Config.from_args(args))


def run_sliced(config: Config) -> int:
    """Create a container directory with the slice, run the command in it, clean up."""
    command = list(config.command)
    if not command:
        print("cgpu run: no command given (cgpu run --gpu-mem SIZE -- CMD...)", file=sys.stderr)
        return 2
    try:
        size = parse_size(config.gpu_mem)
    except ConfigError as exc:
        print(f"cgpu run: --gpu-mem: {exc}", file=sys.stderr)
        return 2
    simulate = config.simulate or not gpus.real_driver_present()
    if simulate and not config.simulate:
        print("cgpu run: no NVIDIA driver found; using the simulated GPU", file=sys.stderr)
    if simulate:
        gpus.use_simulator()
    try:
        all_gpus = gpus.list_gpus()
        chosen = _select(all_gpus, config.gpu)
    except (gpus.GPUError, ValueError) as exc:
        print(f"cgpu run: {exc}", file=sys.stderr)
        return 2
    if not chosen:
        print("cgpu run: no GPU found", file=sys.stderr)
        return 2
    state_dir = config.state_dir or default_state_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    base = _simulator_env(state_dir) if simulate else dict(os.environ)
    key = f"run-{os.getpid()}-{secrets.token_hex(4)}"
    limits = {g.uuid: size for g in chosen}
    meta = {"source": SOURCE_RUN, "container": key, "command": command, "pid": os.getpid()}
    contexts = context_cost.ensure(state_dir, base if simulate else None)
    run_dir = create_container_dir(state_dir, key, limits, meta, contexts=contexts)
    env = _child_env(run_dir, base, chosen, len(all_gpus))
    try:
        return _run_child(command, env)
    finally:
        if not config.keep:
            shutil.rmtree(run_dir, ignore_errors=True)


def _run_child(command: list[str], env: dict[str, str]) -> int:
    """Run the command, forwarding SIGINT/SIGTERM; returns its exit status like a shell."""
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        print(f"cgpu run: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    forward = {
        s: signal.signal(s, lambda sig, _f: child.send_signal(sig))
        for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        code = child.wait()
    finally:
        for sig, handler in forward.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
