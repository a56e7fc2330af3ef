"""A GPU as a ResourceSlice device: attributes, and consumable memory and compute capacity.

Each GPU is one device that several claims may share (`allowMultipleAllocations`), each
consuming part of its capacity (KEP-5075):
- `memory` (bytes): requests from 256 MiB to the whole GPU, in 256 MiB steps, 1 GiB by default;
- `compute` (percent of the GPU's time): 0 to 100, 0 by default (no compute cap).
"""

from __future__ import annotations

import re
from typing import Any

from cgpu.core.quantity import format_bytes
from cgpu.dra.inventory import GpuInfo
from cgpu.dra.names import COMPUTE, MEMORY

MEMORY_STEP = 256 << 20
MEMORY_DEFAULT = 1 << 30
COMPUTE_MAX = 100


def semver(version: str) -> str:
    """A driver or capability version as the API's version attributes need it (semver 2.0):
    three numbers without leading zeros ("550.54.03" -> "550.54.3", "8.0" -> "8.0.0")."""
    numbers = [int(n) for n in re.findall(r"\d+", version)[:3]]
    return ".".join(str(n) for n in [*numbers, 0, 0, 0][:3])


def memory_max(gpu: GpuInfo) -> int:
    """The largest memory request: the GPU's memory rounded down to a step."""
    return gpu.total_bytes // MEMORY_STEP * MEMORY_STEP


def device(gpu: GpuInfo) -> dict[str, Any]:
    """The ResourceSlice device for one GPU."""
    top = memory_max(gpu)
    return {
        "name": gpu.device_name,
        "allowMultipleAllocations": True,
        "attributes": {
            "uuid": {"string": gpu.uuid},
            "index": {"int": gpu.index},
            "productName": {"string": gpu.name},
            "architecture": {"string": gpu.architecture},
            "driverVersion": {"version": semver(gpu.driver_version)},
            "cudaComputeCapability": {"version": semver(gpu.compute_capability)},
        },
        "capacity": {
            MEMORY: {
                "value": format_bytes(gpu.total_bytes),
                "requestPolicy": {
                    "default": format_bytes(min(MEMORY_DEFAULT, top)),
                    "validRange": {
                        "min": format_bytes(MEMORY_STEP),
                        "max": format_bytes(top),
                        "step": format_bytes(MEMORY_STEP),
                    },
                },
            },
            COMPUTE: {
                "value": str(COMPUTE_MAX),
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": str(COMPUTE_MAX), "step": "1"},
                },
            },
        },
    }
