"""A ResourceClaim's allocation, as far as it concerns this driver on this node.

From `status.allocation.devices.results`, the results of driver gpu.cgpu.io in this node's
pool: the device, the capacity it consumes (`memory` bytes, `compute` percent) and its
`shareID`. A result without `consumedCapacity` holds its device whole (a scheduler without
consumable capacity allocates a device to one claim): the GPU's memory, no compute cap.
Results of other drivers are left to them. Anything else is a ClaimError with a message that
says what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cgpu.core.layout import DRA_DRIVER
from cgpu.core.quantity import QuantityError, parse_quantity
from cgpu.dra.inventory import GpuInfo, Inventory
from cgpu.dra.names import COMPUTE, MEMORY

Obj = dict[str, Any]


class ClaimError(ValueError):
    """A claim this driver cannot honour."""


@dataclass(frozen=True)
class Result:
    """One allocated device of the claim."""

    request: str
    pool: str
    device: str
    memory: int  # bytes
    compute: int  # percent; 0: no compute cap
    share_id: str


@dataclass(frozen=True)
class Allocation:
    """What the claim gives its containers on each GPU."""

    results: tuple[Result, ...]
    memory: dict[str, int]  # {uuid: bytes}, summed over the claim's results on that GPU
    compute: dict[str, int]  # {uuid: percent}, only GPUs with a compute cap


def parse_claim(claim: Obj, uid: str, pool: str, inventory: Inventory) -> Allocation:
    """This driver's part of `claim` (as the API server returns it); ClaimError if unusable."""
    meta = claim.get("metadata") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    if meta.get("uid") != uid:
        raise ClaimError(f"claim {name}: UID {meta.get('uid')!r} is not the kubelet's {uid!r}")
    allocation = (claim.get("status") or {}).get("allocation")
    if not isinstance(allocation, dict):
        raise ClaimError(f"claim {name} is not allocated")
    raw = (allocation.get("devices") or {}).get("results")
    if not isinstance(raw, list):
        raise ClaimError(f"claim {name}: status.allocation.devices.results is not a list")
    results = [
        _result(name, r, pool, inventory)
        for r in raw
        if isinstance(r, dict) and r.get("driver") == DRA_DRIVER
    ]
    if not results:
        raise ClaimError(f"claim {name} has no device of driver {DRA_DRIVER}")
    memory: dict[str, int] = {}
    compute: dict[str, int] = {}
    for result in results:
        gpu = inventory.by_name(result.device)
        assert gpu is not None  # _result checked it
        memory[gpu.uuid] = memory.get(gpu.uuid, 0) + result.memory
        if result.compute:
            compute[gpu.uuid] = compute.get(gpu.uuid, 0) + result.compute
        _check_fits(name, gpu, memory[gpu.uuid], compute.get(gpu.uuid, 0))
    return Allocation(tuple(results), memory, compute)


def _result(claim: str, raw: Obj, pool: str, inventory: Inventory) -> Result:
    request, device = raw.get("request"), raw.get("device")
    where = f"claim {claim}, request {request!r}"
    if raw.get("pool") != pool:
        raise ClaimError(f"{where}: pool {raw.get('pool')!r} is not this node's ({pool!r})")
    if not isinstance(device, str) or inventory.by_name(device) is None:
        known = ", ".join(g.device_name for g in inventory.gpus) or "none"
        raise ClaimError(f"{where}: no device {device!r} on this node (devices: {known})")
    consumed = raw.get("consumedCapacity")
    if consumed is None:  # allocated whole: a scheduler without consumable capacity
        gpu = inventory.by_name(device)
        assert gpu is not None
        return Result(str(request), pool, device, gpu.total_bytes, 0, raw.get("shareID") or "")
    if not isinstance(consumed, dict) or MEMORY not in consumed:
        raise ClaimError(f"{where}: consumedCapacity on device {device} has no memory")
    try:
        memory = parse_quantity(consumed[MEMORY])
        compute = parse_quantity(consumed.get(COMPUTE, 0))
    except QuantityError as err:
        raise ClaimError(f"{where}: consumedCapacity: {err}") from None
    if memory <= 0:
        raise ClaimError(f"{where}: consumedCapacity.memory must be positive, got {memory}")
    if not 0 <= compute <= 100:
        raise ClaimError(f"{where}: consumedCapacity.compute {compute} is not 0 to 100 percent")
    share = raw.get("shareID")
    return Result(str(request), pool, device, memory, compute, share or "")


def _check_fits(claim: str, gpu: GpuInfo, memory: int, compute: int) -> None:
    if memory > gpu.total_bytes:
        raise ClaimError(
            f"claim {claim}: {memory} bytes of memory on {gpu.device_name} ({gpu.uuid}), "
            f"which has {gpu.total_bytes}"
        )
    if compute > 100:
        raise ClaimError(f"claim {claim}: {compute}% compute on {gpu.device_name}, over 100%")
