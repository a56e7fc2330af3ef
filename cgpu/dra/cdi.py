"""The CDI spec of a prepared claim: one device, named by the claim's UID.

Its edits are what a container with a slice gets (`cgpu.core.injection`: the shim, the
ld.so.preload, the claim's container directory and its variables), plus the GPUs' device
nodes that exist on the host and NVIDIA_VISIBLE_DEVICES naming the GPUs. `cdiVersion` 0.5.0
is the first that allows a device name starting with a digit, as a UID may.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cgpu.core import injection
from cgpu.core.files import atomic_write
from cgpu.core.layout import ENV_VISIBLE_DEVICES
from cgpu.dra.inventory import GpuInfo
from cgpu.dra.names import CDI_KIND, CDI_SPEC_PREFIX

CDI_VERSION = "0.5.0"
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


def device_id(uid: str) -> str:
    """The fully qualified CDI device name of a claim."""
    return f"{CDI_KIND}={uid}"


def spec_path(cdi_dir: Path, uid: str) -> Path:
    """Where the claim's spec lives."""
    return cdi_dir / f"{CDI_SPEC_PREFIX}{uid}.json"


def device_nodes(gpus: Iterable[GpuInfo], dev_dir: Path) -> list[dict[str, str]]:
    """The control nodes and each GPU's /dev/nvidia<minor>, those that exist on the host."""
    names = [*CONTROL_NODES, *(f"nvidia{g.minor}" for g in gpus)]
    return [
        {"path": f"/dev/{name}", "hostPath": str(dev_dir / name)}
        for name in names
        if (dev_dir / name).exists()
    ]


def build_spec(
    uid: str,
    gpus: list[GpuInfo],
    container_dir: Path,
    shim: Path,
    preload: Path,
    dev_dir: Path = Path("/dev"),
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The spec for one claim; `extra_env` adds (or overrides) variables."""
    env = {
        **injection.environment(),
        ENV_VISIBLE_DEVICES: ",".join(g.uuid for g in gpus),
        **(extra_env or {}),
    }
    mounts = [
        {"hostPath": m.host_path, "containerPath": m.container_path, "options": m.options()}
        for m in injection.container_mounts(shim, preload, container_dir)
    ]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {
                "name": uid,
                "containerEdits": {
                    "env": [f"{k}={v}" for k, v in sorted(env.items())],
                    "deviceNodes": device_nodes(gpus, dev_dir),
                    "mounts": mounts,
                },
            }
        ],
    }


def write_spec(cdi_dir: Path, uid: str, spec: dict[str, Any]) -> Path:
    """Write the claim's spec atomically (runtimes never read half of it)."""
    return atomic_write(spec_path(cdi_dir, uid), json.dumps(spec, indent=1) + "\n")


def remove_spec(cdi_dir: Path, uid: str) -> None:
    """Delete the claim's spec; one already gone is fine."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(spec_path(cdi_dir, uid))
