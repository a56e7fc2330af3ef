"""Choosing and checking the GPUs of one container (pure functions, no I/O)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from cgpu.core.layout import GPU_COUNT, GPU_MEM_IDX
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.rm.inventory import GpuUnits, Inventory, UnknownDevices


@dataclass(frozen=True)
class Placement:
    """The GPUs a container gets and the units it has on each."""

    gpus: list[GpuUnits]
    units_per_gpu: int


def _unit(inventory: Inventory, ident: str) -> tuple[str, int]:
    """(GPU UUID, unit number) of a known ID."""
    gpu, n = inventory.parse(ident)  # type: ignore[misc]
    return gpu.gpu.uuid, n


def _free_by_gpu(inventory: Inventory, ids: Sequence[str]) -> dict[str, list[str]]:
    """Known IDs grouped by GPU, in unit order (unknown ones are ignored: the kubelet may lag)."""
    grouped: dict[str, list[str]] = {}
    for ident in dict.fromkeys(ids):
        if inventory.parse(ident) is not None:
            grouped.setdefault(_unit(inventory, ident)[0], []).append(ident)
    for idents in grouped.values():
        idents.sort(key=lambda ident: _unit(inventory, ident)[1])
    return grouped


def _choose_gpus(
    inventory: Inventory,
    free: dict[str, list[str]],
    share: int,
    count: int,
    pinned: Sequence[int],
    forced: set[str],
) -> list[str]:
    """UUIDs of `count` GPUs with room for `share`: the pinned ones, else best fit."""

    def room(uuid: str) -> int:
        return len(free.get(uuid, []))

    pinned_uuids = [g.gpu.uuid for i in pinned if (g := inventory.by_index(i)) is not None]
    if len(pinned_uuids) == count and all(room(u) >= share for u in pinned_uuids):
        return pinned_uuids
    fitting = [g for g in inventory.gpus if room(g.gpu.uuid) >= share]
    fitting.sort(key=lambda g: (g.gpu.uuid not in forced, room(g.gpu.uuid), g.gpu.index))
    chosen = [g.gpu.uuid for g in fitting[:count]]
    return chosen if len(chosen) == count else []


def preferred(
    inventory: Inventory,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    gpu_count: int = 1,
    pinned: Sequence[int] = (),
) -> list[str]:
    """Pick `size` IDs: size/gpu_count units from each of gpu_count GPUs, best fit.

    Best fit is the GPUs with the fewest available units that still hold the share, which
    keeps whole GPUs free for large requests. `pinned` (GPU indexes from the scheduler
    extender) wins when those GPUs have room. The kubelet's `available` list is the
    authority on what is free. When nothing fits, the answer is a best-effort pick from
    the GPUs with the most room, and Allocate then refuses it with the reason.
    """
    if size <= 0:
        return []
    forced = [i for i in dict.fromkeys(must_include) if inventory.parse(i) is not None]
    free = _free_by_gpu(inventory, [*forced, *available])
    if gpu_count < 1 or size % gpu_count:
        gpu_count = 1
    share = size // gpu_count
    forced_gpus = {_unit(inventory, i)[0] for i in forced}
    picks = list(forced)
    taken = set(picks)
    for uuid in _choose_gpus(inventory, free, share, gpu_count, pinned, forced_gpus):
        have = sum(1 for i in picks if _unit(inventory, i)[0] == uuid)
        for ident in free[uuid]:
            if have >= share:
                break
            if ident not in taken:
                picks.append(ident)
                taken.add(ident)
                have += 1
    for uuid in sorted(free, key=lambda u: -len(free[u])):
        for ident in free[uuid]:
            if len(picks) >= size:
                break
            if ident not in taken:
                picks.append(ident)
                taken.add(ident)
    return picks[:size]


def _describe(groups: dict[str, list[str]], inventory: Inventory) -> str:
    parts = []
    for uuid, ids in groups.items():
        gpu = inventory.by_uuid(uuid)
        index = gpu.gpu.index if gpu else "?"
        parts.append(f"GPU {index} ({uuid}): {len(ids)} units")
    return ", ".join(parts)


def check(
    inventory: Inventory,
    ids: Sequence[str],
    resource: str,
    gpu_count: int = 1,
    pinned: Sequence[int] = (),
) -> Placement:
    """Validate the kubelet's IDs for one container and work out its GPUs and share.

    `gpu_count` comes from the pod's aliyun.com/gpu-count label; `pinned` from the
    gpushare extender's ALIYUN_COM_GPU_MEM_IDX annotation, which wins over the IDs.
    """
    if not ids:
        raise AllocationError(grpc.StatusCode.INVALID_ARGUMENT, "no device IDs in the request")
    duplicates = sorted(i for i, n in Counter(ids).items() if n > 1)
    if duplicates:
        raise AllocationError(
            grpc.StatusCode.INVALID_ARGUMENT, f"device IDs repeated: {', '.join(duplicates)}"
        )
    try:
        groups = inventory.group(ids)
    except UnknownDevices as err:
        shown = ", ".join(err.ids[:5]) + (" ..." if len(err.ids) > 5 else "")
        raise AllocationError(
            grpc.StatusCode.NOT_FOUND,
            f"unknown {resource} device IDs: {shown}; this node advertises "
            f"<gpu-{'index' if inventory.index_ids else 'uuid'}>-<unit> IDs in units of "
            f"{inventory.unit} for GPUs "
            f"{', '.join(g.gpu.uuid for g in inventory.gpus) or '(none)'}",
        ) from None
    n = len(ids)
    if gpu_count < 1:
        raise AllocationError(grpc.StatusCode.INVALID_ARGUMENT, f"invalid GPU count {gpu_count}")
    if n % gpu_count:
        raise AllocationError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{n} units of {resource} cannot be split evenly over {GPU_COUNT}="
            f"{gpu_count} GPUs: the request must be a multiple of the GPU count",
        )
    share = n // gpu_count
    if gpu_count > len(inventory.gpus):
        raise AllocationError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{GPU_COUNT}={gpu_count} but this node has {len(inventory.gpus)} GPUs",
        )
    if pinned:
        gpus = []
        for index in pinned:
            gpu = inventory.by_index(index)
            if gpu is None:
                raise AllocationError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"the scheduler placed this pod on GPU {index} ({GPU_MEM_IDX}), "
                    f"which this node does not have",
                )
            gpus.append(gpu)
        if len(gpus) != gpu_count:
            raise AllocationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{GPU_MEM_IDX} names {len(gpus)} GPUs but the pod asks for "
                f"{GPU_COUNT}={gpu_count}",
            )
        if any(share > g.units for g in gpus):
            raise AllocationError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{share} units do not fit on GPU(s) {list(pinned)} named by {GPU_MEM_IDX}",
            )
        return Placement(gpus, share)
    if len(groups) != gpu_count or any(len(v) != share for v in groups.values()):
        if gpu_count == 1:
            message = (
                f"the {n} units of {resource} span {len(groups)} GPUs "
                f"({_describe(groups, inventory)}); a container's units must come from one "
                f"GPU. Label the pod {GPU_COUNT}=<M> to spread a request evenly over "
                "M GPUs"
            )
        else:
            message = (
                f"the pod asks for {share} units on each of {gpu_count} GPUs "
                f"({GPU_COUNT}={gpu_count}), but the kubelet offered "
                f"{_describe(groups, inventory)}"
            )
        raise AllocationError(grpc.StatusCode.FAILED_PRECONDITION, message)
    return Placement([inventory.by_uuid(u) for u in groups], share)  # type: ignore[misc]
