"""Volcano's GPU-sharing contract (`volcano.sh/gpu-memory`): pure rules, no I/O.

Volcano's scheduler picks the GPU and writes it on the pod (`volcano.sh/gpu-index`, with
`volcano.sh/predicate-time`). The device plugin then matches each Allocate call to a pod the
way Volcano's own plugin (volcano-sh/devices) does: among the pending pods on this node that
ask for the resource and are not yet `volcano.sh/gpu-assigned`, oldest predicate time
first, the first container asking for exactly the requested count. Quantities are MiB
(times the unit's factor when the device list had to be coarsened, like Volcano's
`--gpu-memory-factor`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import grpc

from cgpu.core.layout import (
    ENV_VISIBLE_DEVICES,
    ENV_VOLCANO_ALLOCATED,
    ENV_VOLCANO_TOTAL,
    VOLCANO_GPU_INDEX,
    VOLCANO_GPU_MEMORY,
    VOLCANO_UNHEALTHY_IDS,
)
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.kube.pods import ContainerRequest, PodInfo
from cgpu.deviceplugin.rm.inventory import GpuUnits, Inventory
from cgpu.deviceplugin.rm.slices import slices
from cgpu.deviceplugin.rm.units import MIB, Unit

# Volcano sorts pods without a readable predicate time last (math.MaxUint64).
NO_TIME = 2**64 - 1


def is_volcano(resource: str) -> bool:
    """Whether the plugin serves Volcano's resource."""
    return resource == VOLCANO_GPU_MEMORY


def predicate_time(pod: PodInfo) -> int:
    """The scheduler's predicate time in nanoseconds; unreadable or absent sorts last."""
    stamp = pod.contract.volcano_predicate_time
    return NO_TIME if stamp is None else stamp


def assigned(pod: PodInfo) -> bool:
    """Volcano's rule: assigned when the annotation is present and not "false"."""
    return pod.contract.volcano_assigned


def candidates(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """Pods still waiting for their GPU, oldest predicate time first."""
    waiting = [
        p
        for p in pods
        if p.phase == "Pending"
        and not p.deleting
        and not p.rejected
        and p.requesting()
        and not assigned(p)
    ]
    return sorted(waiting, key=lambda p: (predicate_time(p), p.created, p.namespace, p.name))


def match(
    pods: Iterable[PodInfo], units: int, allocated: set[tuple[str, str]]
) -> tuple[PodInfo, ContainerRequest] | None:
    """The container an Allocate of `units` is for: the first one, in candidate order, that
    asks for exactly `units` and has not been served yet."""
    for pod in candidates(pods):
        for container in pod.requesting():
            if (pod.uid, container.name) not in allocated and container.units == units:
                return pod, container
    return None


def gpu_index(pod: PodInfo) -> int:
    """The GPU index the scheduler wrote on the pod; AllocationError when absent or garbled."""
    where = f"pod {pod.namespace}/{pod.name}"
    raw = pod.annotations.get(VOLCANO_GPU_INDEX)
    if raw is None:
        raise AllocationError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{where} has no {VOLCANO_GPU_INDEX} annotation: Volcano's scheduler (with "
            "predicate.GPUSharingEnable) must place pods that ask for "
            f"{VOLCANO_GPU_MEMORY}; was it scheduled by another scheduler?",
        )
    index = pod.contract.volcano_index
    if index is None:
        problem = pod.contract.problems.get(VOLCANO_GPU_INDEX, VOLCANO_GPU_INDEX)
        raise AllocationError(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: {problem}")
    return index


@dataclass(frozen=True)
class Grant:
    """What one container gets: a GPU and its MiB there."""

    gpu: GpuUnits
    units: int
    unit: Unit

    @property
    def mib(self) -> int:
        """The container's memory in MiB (VOLCANO_GPU_ALLOCATED)."""
        return self.units * self.unit.mib

    @property
    def total_mib(self) -> int:
        """The card's memory in MiB (VOLCANO_GPU_MEMORY_TOTAL)."""
        return self.gpu.gpu.total_bytes // MIB

    @property
    def limit_bytes(self) -> int:
        """The slice the shim works out from the two variables (total x ALLOCATED / TOTAL),
        read back through the one limit parser."""
        env = {ENV_VOLCANO_ALLOCATED: str(self.mib), ENV_VOLCANO_TOTAL: str(self.total_mib)}
        return slices(env, [self.gpu.gpu])[self.gpu.gpu.uuid]

    def environment(self) -> dict[str, str]:
        """The variables Volcano's plugin sets (the seed's NVIDIA_VISIBLE_DEVICES is the index)."""
        return {
            ENV_VISIBLE_DEVICES: str(self.gpu.gpu.index),
            ENV_VOLCANO_ALLOCATED: str(self.mib),
            ENV_VOLCANO_TOTAL: str(self.total_mib),
        }


def grant(inventory: Inventory, pod: PodInfo, units: int) -> Grant:
    """Check the pod's GPU and that `units` fit on it; AllocationError says what is wrong."""
    index = gpu_index(pod)
    where = f"pod {pod.namespace}/{pod.name}"
    gpu = inventory.by_index(index)
    if gpu is None:
        have = ", ".join(str(g.gpu.index) for g in inventory.gpus) or "none"
        raise AllocationError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{where}: {VOLCANO_GPU_INDEX}={index} names a GPU this node does not have "
            f"(GPU indexes here: {have})",
        )
    if not inventory.healthy(gpu.gpu.uuid):
        raise AllocationError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{where}: {VOLCANO_GPU_INDEX}={index} names GPU {gpu.gpu.uuid}, which is Unhealthy "
            f"(listed in the node's {VOLCANO_UNHEALTHY_IDS})",
        )
    if units > gpu.units:
        raise AllocationError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{where}: {units * inventory.unit.mib} MiB of {VOLCANO_GPU_MEMORY} do not fit on GPU "
            f"{index} ({gpu.gpu.uuid}), which has {gpu.units * inventory.unit.mib} MiB",
        )
    return Grant(gpu, units, inventory.unit)


def unhealthy_ids(inventory: Inventory) -> str | None:
    """The node annotation's value: unhealthy GPU indexes, comma separated, or None."""
    bad = [str(g.gpu.index) for g in inventory.gpus if not inventory.healthy(g.gpu.uuid)]
    return ",".join(bad) or None
