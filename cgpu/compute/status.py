"""The status file: per GPU and container, the limit, the share used and the charges."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cgpu.core.files import atomic_write

from .charging import FULL
from .sampler import HostFigures
from .schedule import GpuSchedule
from .turnstate import Usage


def render(
    gpus: Mapping[str, GpuSchedule[Any]],
    loads: Mapping[str, float],
    now: int,
    bad_messages: int,
    bad_configs: int,
    host: Mapping[str, HostFigures] | None = None,
) -> dict[str, Any]:
    """The status as a JSON-ready dict (shares in percent, over the last ~1 s); `host`: the
    host view of compute (NVML's per-process samples), per GPU."""
    host = host or {}
    return {
        "time": time.time(),
        "bad_messages": bad_messages,
        "bad_configs": bad_configs,
        "gpus": {
            uuid: {
                "holder": gpu.holder,
                "epoch": gpu.epoch,
                "unmanaged_load": round(loads.get(uuid, 0.0), 3),
                "probes": gpu.probes,
                "probe_ms": round(gpu.probe_ns / 1e6, 1),
                "containers": {
                    name: {
                        "limit": usage.percent,
                        "policy": usage.policy,
                        "priority": usage.priority,
                        "share_percent": usage.share * 100 / FULL,
                        "charged_ns": usage.charged_ns,
                        "forced_revokes": usage.forced_revokes,
                        **_host_fields(host.get(uuid), name, usage),
                    }
                    for name, usage in gpu.usage(now).items()
                },
                "host_view": bool(host.get(uuid) and host[uuid].available),
            }
            for uuid, gpu in gpus.items()
        },
    }


def _host_fields(host: HostFigures | None, name: str, usage: Usage) -> dict[str, Any]:
    """What the host sees of a container on a GPU: the share NVML's samples give it over the
    last 10 s, the out-of-turn time charged, and whether it is flagged for out-of-turn work."""
    verdict = host.containers.get(name) if host else None
    return {
        "host_percent": verdict.host_percent if verdict else 0.0,
        "out_of_turn_s": round(usage.out_of_turn_ns / 1e9, 3),
        "over_compute": bool(verdict and verdict.flagged),
    }


def write(path: Path, status: Mapping[str, Any]) -> None:
    """Replace the status file atomically."""
    atomic_write(path, json.dumps(status, indent=1, sort_keys=True) + "\n")
