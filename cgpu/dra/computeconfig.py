"""The compute priority a claim asks for, from its opaque parameters.

A claim (or its DeviceClass) may carry, for this driver:

    {"apiVersion": "gpu.cgpu.io/v1alpha1", "kind": "ComputeConfig", "priority": "high"}

`priority` is `high`, `normal` (the default) or `low`: the priority of the container's compute
turns on each GPU where the claim has a compute share (contract: "Compute share"). It reaches the
container's `cgpu.conf` as `compute <uuid> <percent> fixed <priority>`. The kubelet hands the
parameters to the driver in `status.allocation.devices.config`. Parameters of this kind that are
malformed (an unknown field, another priority), or two that disagree, are a ClaimError: the
claim fails at prepare, never runs with a default. Parameters of another kind are left to their
own readers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cgpu.core.config import PRIORITIES, ComputeShare
from cgpu.core.layout import (
    CLAIM_CONFIG_API_VERSION,
    COMPUTE_CONFIG_KIND,
    DRA_DRIVER,
    POLICY_FIXED,
    PRIORITY_NORMAL,
)
from cgpu.dra.claims import ClaimError

_FIELDS = {"apiVersion", "kind", "priority"}


def _parameters(claim: Mapping[str, Any], name: str) -> list[object]:
    """The parameters of each opaque config of this driver in the claim's allocation."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    raw = (allocation.get("devices") or {}).get("config") or []
    if not isinstance(raw, list):
        raise ClaimError(f"claim {name}: status.allocation.devices.config is not a list")
    found = []
    for entry in raw:
        opaque = entry.get("opaque") if isinstance(entry, dict) else None
        if isinstance(opaque, dict) and opaque.get("driver") == DRA_DRIVER:
            found.append(opaque.get("parameters"))
    return found


def claim_priority(claim: Mapping[str, Any]) -> str:
    """The claim's compute priority (`normal` without a ComputeConfig); ClaimError when a
    ComputeConfig is malformed or two disagree."""
    meta = claim.get("metadata") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    chosen: set[str] = set()
    for parameters in _parameters(claim, name):
        if not isinstance(parameters, dict) or parameters.get("kind") != COMPUTE_CONFIG_KIND:
            continue
        where = f"claim {name}: opaque {COMPUTE_CONFIG_KIND}"
        if parameters.get("apiVersion") != CLAIM_CONFIG_API_VERSION:
            raise ClaimError(f"{where}: apiVersion is not {CLAIM_CONFIG_API_VERSION}")
        unknown = sorted(set(parameters) - _FIELDS)
        if unknown:
            raise ClaimError(f"{where}: unknown field(s) {', '.join(unknown)}")
        priority = parameters.get("priority", PRIORITY_NORMAL)
        if priority not in PRIORITIES:
            raise ClaimError(f"{where}: priority {priority!r} is not one of high, normal, low")
        chosen.add(priority)
    if len(chosen) > 1:
        raise ClaimError(f"claim {name}: {COMPUTE_CONFIG_KIND}s disagree: {sorted(chosen)}")
    return chosen.pop() if chosen else PRIORITY_NORMAL


def compute_lines(compute: Mapping[str, int], priority: str) -> dict[str, ComputeShare] | None:
    """The config's compute shares for {uuid: percent} at `priority` (None: no share); a
    `normal` one keeps the old line."""
    if not compute:
        return None
    if priority == PRIORITY_NORMAL:
        return dict(compute)
    return {uuid: (percent, POLICY_FIXED, priority) for uuid, percent in compute.items()}
