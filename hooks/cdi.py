"""`cgpu cdi`: a CDI spec giving containers the shim, for runtimes with CDI enabled.

Devices of kind `cgpu.io/gpu-mem` name GPUs: `all`, an NVML index (`0`) or a UUID. Each sets
`CGPU_CDI_DEVICE_<index>=<uuid>`, which tells `cgpu hook` the container's GPUs even where
NVIDIA's own CDI spec has set NVIDIA_VISIBLE_DEVICES=void; several devices add up. The slice
itself comes from the container's limit variables, as for any container. The spec-wide edits
mount the shim and an /etc/ld.so.preload naming it, and run `cgpu hook` at createRuntime (to
mount the ledger directory) and at poststop. `cdiVersion` is the lowest version that expresses
the spec (see cdi_version), so that older runtimes load it too; `--cdi-version` pins it.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cgpu.core import gpus
from cgpu.core.containers import DEFAULT_STATE_DIR
from cgpu.core.gpus import GPU, list_gpus
from cgpu.core.injection import shim_mounts, write_preload
from cgpu.core.layout import CDI_KIND, CDI_SPEC_FILE, ENV_CDI_DEVICE_PREFIX, PRELOAD_NAME
from cgpu.core.paths import shim_path
from cgpu.hooks.cdi_version import VERSIONS, VersionError, choose_version
from cgpu.hooks.emit import cgpu_argv, oci_hook, write_json
from cgpu.hooks.errors import one_line
from cgpu.hooks.install import HOOK_TIMEOUT_S, hook_args

PRELOAD_FILE = f"cdi/{PRELOAD_NAME}"  # under the state dir


def _device(name: str, gpus: list[GPU]) -> dict[str, Any]:
    env = [f"{ENV_CDI_DEVICE_PREFIX}{g.index}={g.uuid}" for g in gpus]
    return {"name": name, "containerEdits": {"env": env}}


def build_spec(
    gpu_list: list[GPU],
    argv: list[str],
    state_dir: str,
    shim: str,
    preload: str,
    simulate: bool = False,
    version: str | None = None,
) -> dict[str, Any]:
    """The CDI spec for these GPUs, calling `argv` as cgpu, at the lowest version or `version`.

    Raises VersionError when `version` is unknown or too low for the spec.
    """
    devices = [_device("all", gpu_list)]
    for gpu in gpu_list:
        devices += [_device(str(gpu.index), [gpu]), _device(gpu.uuid, [gpu])]

    def hook(stage: str, *action: str) -> dict[str, Any]:
        args = hook_args(state_dir, simulate)
        entry = oci_hook(argv, "hook", *action, *args, timeout=HOOK_TIMEOUT_S)
        return {"hookName": stage, **entry}

    mounts = [
        {"hostPath": m.host_path, "containerPath": m.container_path, "options": m.options()}
        for m in shim_mounts(shim, preload)
    ]
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": CDI_KIND,
        "devices": devices,
        "containerEdits": {
            "mounts": mounts,
            "hooks": [hook("createRuntime"), hook("poststop", "poststop")],
        },
    }
    spec["cdiVersion"] = choose_version(spec, version)
    return spec


@dataclass(frozen=True)
class Config:
    """The options of `cgpu cdi`, read once from the command line."""

    output: str = CDI_SPEC_FILE
    state_dir: str = DEFAULT_STATE_DIR  # made absolute
    cgpu: str | None = None
    cdi_version: str | None = None  # None: the lowest that expresses the spec
    simulate: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe."""
        return cls(
            args.output,
            os.path.abspath(args.state_dir),
            args.cgpu,
            args.cdi_version,
            args.simulate,
        )


def register(parser: argparse.ArgumentParser) -> None:
    """Options of `cgpu cdi`."""
    parser.add_argument(
        "--output", default=CDI_SPEC_FILE, help="spec path, or - (default %(default)s)"
    )
    parser.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help="default %(default)s")
    parser.add_argument("--cgpu", help="the cgpu executable the runtime runs (default: this one)")
    parser.add_argument(
        "--cdi-version",
        metavar="VERSION",
        help=f"the spec's cdiVersion ({', '.join(VERSIONS)}); default: the lowest that "
        "expresses the spec, so that older runtimes (podman 4.3: up to 0.5.0) load it",
    )
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="list cgpu's simulated GPUs, and have the hooks do so (hosts without a driver)",
    )


def run(args: argparse.Namespace) -> int:
    """Write the spec, and the ld.so.preload file it mounts, from this host's GPUs."""
    return write(Config.from_args(args))


def write(config: Config) -> int:
    """Write the spec, and the ld.so.preload file it mounts, from this host's GPUs."""
    state_dir = config.state_dir
    try:
        shim = shim_path()
        if not shim.is_file():
            raise RuntimeError(f"the shim is not installed at {shim}")
        if config.simulate:
            gpus.use_simulator()
        gpu_list = list_gpus()
        spec = build_spec(
            gpu_list,
            cgpu_argv(config.cgpu),
            state_dir,
            str(shim),
            str(Path(state_dir) / PRELOAD_FILE),
            config.simulate,
            config.cdi_version,
        )
        write_preload(Path(state_dir) / PRELOAD_FILE)
        path = write_json(config.output, spec)
    except VersionError as exc:
        print(f"cgpu cdi: --cdi-version: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"cgpu cdi: {one_line(exc)}", file=sys.stderr)
        return 1
    if config.output != "-":
        print(path)
    return 0
