"""DRA claims on each GPU: the ResourceSlices of driver gpu.cgpu.io and the claims allocated there.

A GPU is a device of the newest generation of its pool, with its `index` attribute and its
`memory` capacity. A claim holds, on each GPU, the `consumedCapacity` (memory bytes, compute
percent) of its results for that device. It is shown under the pod it is reserved for (when
one pod), else under its own name; `cgpu.inspect.model` shows a pod once, however many
claims it holds (a pod that `cgpu webhook` rewrote has one claim per GPU container).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cgpu.core.layout import DRA_DRIVER
from cgpu.core.quantity import QuantityError, parse_quantity

Obj = dict[str, Any]


@dataclass
class ClaimShare:
    """What one claim holds on one GPU."""

    name: str  # the pod it is reserved for, else the claim
    namespace: str
    memory: int  # bytes
    compute: int  # percent
    is_pod: bool = False  # `name` is the pod's (the claim is reserved for one pod)


@dataclass
class DraGpu:
    """One GPU that the DRA driver publishes, and the claims on it."""

    node: str
    index: int
    memory: int  # bytes
    claims: list[ClaimShare] = field(default_factory=list)


def _quantity(raw: Any) -> int:
    try:
        return parse_quantity(raw)
    except QuantityError:
        return 0


def gpus(slices: list[Obj]) -> dict[tuple[str, str], DraGpu]:
    """{(pool, device): GPU} from the driver's slices, newest pool generation only."""
    ours = [s for s in slices if (s.get("spec") or {}).get("driver") == DRA_DRIVER]
    newest: dict[str, int] = {}
    for s in ours:
        pool = s["spec"].get("pool") or {}
        newest[pool.get("name", "")] = max(
            newest.get(pool.get("name", ""), 0), pool.get("generation", 0)
        )
    out = {}
    for s in ours:
        spec, pool = s["spec"], s["spec"].get("pool") or {}
        if pool.get("generation", 0) != newest[pool.get("name", "")] or not spec.get("nodeName"):
            continue
        for device in spec.get("devices") or []:
            index = ((device.get("attributes") or {}).get("index") or {}).get("int")
            memory = ((device.get("capacity") or {}).get("memory") or {}).get("value")
            if isinstance(index, int) and index >= 0:
                gpu = DraGpu(spec["nodeName"], index, _quantity(memory))
                out[(pool.get("name", ""), str(device.get("name", "")))] = gpu
    return out


def _holder(claim: Obj) -> tuple[str, bool]:
    """(the pod the claim is reserved for, True), else (the claim's name, False)."""
    pods = [
        r
        for r in (claim.get("status") or {}).get("reservedFor") or []
        if r.get("resource") == "pods"
    ]
    meta = claim.get("metadata") or {}
    if len(pods) == 1:
        return str(pods[0].get("name", "")), True
    return str(meta.get("name", "")), False


def usage(slices: list[Obj], claims: list[Obj]) -> list[DraGpu]:
    """Every published GPU, with the claims allocated on it."""
    found = gpus(slices)
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        held: dict[tuple[str, str], ClaimShare] = {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            key = (str(result.get("pool", "")), str(result.get("device", "")))
            if result.get("driver") != DRA_DRIVER or key not in found:
                continue
            consumed = result.get("consumedCapacity") or {}
            gpu = found[key]
            memory = _quantity(consumed["memory"]) if "memory" in consumed else gpu.memory
            namespace = str((claim.get("metadata") or {}).get("namespace", ""))
            holder, is_pod = _holder(claim)
            share = held.setdefault(key, ClaimShare(holder, namespace, 0, 0, is_pod))
            share.memory += memory
            share.compute += _quantity(consumed.get("compute", 0))
        for key, share in held.items():
            found[key].claims.append(share)
    return sorted(found.values(), key=lambda g: (g.node, g.index))
