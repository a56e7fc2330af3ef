"""The status file: per GPU and container, the limit, the share used and the charges."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cgpu.core.files import atomic_write

from .schedule import FULL, GpuSchedule


def render(
    gpus: Mapping[str, GpuSchedule[Any]],
    loads: Mapping[str, float],
    now: int,
    bad_messages: int,
    bad_configs: int,
) -> dict[str, Any]:
    """The status as a JSON-ready dict (shares in percent, over the last ~1 s)."""
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
                    }
                    for name, usage in gpu.usage(now).items()
                },
            }
            for uuid, gpu in gpus.items()
        },
    }


def write(path: Path, status: Mapping[str, Any]) -> None:
    """Replace the status file atomically."""
    atomic_write(path, json.dumps(status, indent=1, sort_keys=True) + "\n")
