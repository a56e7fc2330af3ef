"""The compute resource, `aliyun.com/gpu-core.percentage`: 100 units per GPU.

A container asking for N units gets N percent of one GPU's compute: a `compute <uuid> N` line
in its `cgpu.conf` and `CGPU_COMPUTE_LIMIT=N` for the shim, or MPS's
`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=N` with `--isolation mps`. When it also asks for memory,
both Allocate calls share one container directory on one GPU (see `pairing`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

import grpc

from cgpu.core.gpus import GPU
from cgpu.core.layout import ENV_VISIBLE_DEVICES, GPU_CORE, SOURCE_DEVICE_PLUGIN
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.kube.client import KubeError
from cgpu.deviceplugin.kube.pods import PodError, PodInfo
from cgpu.deviceplugin.rm import placement
from cgpu.deviceplugin.rm.assignments import Assignments
from cgpu.deviceplugin.rm.directory import Match, pod_meta
from cgpu.deviceplugin.rm.inventory import Inventory, UnknownDevices
from cgpu.deviceplugin.rm.pairing import COMPUTE, PodContainer
from cgpu.deviceplugin.rm.policy import Allocation, entry_environment, entry_mounts
from cgpu.deviceplugin.rm.units import Unit

log = logging.getLogger(__name__)

UNITS_PER_GPU = 100
ID_TAG = "core"


def compute_inventory(memory: Inventory) -> Inventory:
    """100 units per GPU of the memory inventory, sharing its health: `<uuid>-core-<n>`."""
    return Inventory(
        [g.gpu for g in memory.gpus],
        Unit(),
        per_gpu=UNITS_PER_GPU,
        tag=ID_TAG,
        health=memory.health,
    )


class ComputePolicy:
    """GetPreferredAllocation and Allocate for the compute resource.

    It works beside the memory policy through the `Assignments` they share: the same pod
    lookups, the same lock, the same container directories.
    """

    def __init__(self, inventory: Inventory, assignments: Assignments, resource: str = GPU_CORE):
        self.inventory = inventory
        self.assignments = assignments
        self.resource = resource
        self.host = assignments.host
        self.pairing = assignments.pairing

    def _match(self, units: int, prune: bool) -> Match | None:
        """The container this request is for: the first waiting container that asks for
        exactly `units` and has no share yet. None standalone (or the API server failing);
        AllocationError when the API server knows no such container."""
        lookup = self.assignments.pods
        if lookup is None:
            return None
        try:
            pods = self.assignments.pending(prune)
        except KubeError as err:
            log.warning("pod lookup failed, allocating compute without pod information: %s", err)
            return None
        waiting = [p for p in pods if p.phase == "Pending" and not p.deleting]
        for pod in sorted(waiting, key=lambda p: p.order):
            for container in self.assignments.requests(pod.uid, self.resource):
                pod_container = (pod.uid, container.name)
                if container.units == units and not self.pairing.served(pod_container, COMPUTE):
                    return pod, container
        raise AllocationError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"no pending pod on node {lookup.node_name} has a container asking for "
            f"{units} {self.resource} that is still waiting for it; was the pod deleted?",
        )

    def _pod_gpu(self, pod: PodInfo, pod_container: PodContainer) -> GPU | None:
        """The GPU the container must use: its memory's, else the extender's choice."""
        partner = self.pairing.gpu_of(pod_container, COMPUTE)
        if partner is not None:
            return partner
        try:
            pinned = pod.pinned
        except PodError as err:
            raise AllocationError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
        if len(pinned) > 1:
            raise AllocationError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"pod {pod.namespace}/{pod.name} is placed on GPUs {pinned}: a compute share "
                "applies to a one-GPU container",
            )
        if pinned:
            found = self.inventory.by_index(pinned[0])
            if found is None:
                raise AllocationError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"the scheduler placed pod {pod.namespace}/{pod.name} on GPU {pinned[0]}, "
                    "which this node does not have",
                )
            return found.gpu
        return None

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """Units of the container's GPU when it is known (its memory's), else best fit."""
        pinned: list[int] = []
        try:
            with self.pairing.lock:
                match = self._match(size, prune=False)
                pod_container = (match[0].uid, match[1].name) if match else None
                gpu = self._pod_gpu(match[0], pod_container) if match and pod_container else None
                if gpu is None:
                    gpu = self.pairing.gpu_of(pod_container, COMPUTE)
            pinned = [gpu.index] if gpu is not None else []
        except AllocationError as err:
            log.info("GetPreferredAllocation for %s without a GPU: %s", self.resource, err.message)
        return placement.preferred(self.inventory, available, must_include, size, 1, pinned)

    def _check(self, ids: Sequence[str]) -> GPU:
        """The one GPU of the IDs; AllocationError for anything else."""
        if not ids:
            raise AllocationError(grpc.StatusCode.INVALID_ARGUMENT, "no device IDs in the request")
        if len(ids) > UNITS_PER_GPU:
            raise AllocationError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(ids)} {self.resource} asked: a container gets at most {UNITS_PER_GPU} "
                "(all of one GPU)",
            )
        repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
        if repeated:
            raise AllocationError(
                grpc.StatusCode.INVALID_ARGUMENT, f"device IDs repeated: {', '.join(repeated)}"
            )
        try:
            groups = self.inventory.group(ids)
        except UnknownDevices as err:
            raise AllocationError(
                grpc.StatusCode.NOT_FOUND,
                f"unknown {self.resource} device IDs: {', '.join(err.ids[:5])}; this node "
                f"advertises <gpu-uuid>-{ID_TAG}-<n> IDs, {UNITS_PER_GPU} per GPU",
            ) from None
        if len(groups) != 1:
            raise AllocationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the {len(ids)} units of {self.resource} span {len(groups)} GPUs "
                f"({', '.join(groups)}); a container's compute share is of one GPU",
            )
        found = self.inventory.by_uuid(next(iter(groups)))
        assert found is not None
        return found.gpu

    def allocate(self, ids: Sequence[str]) -> Allocation:
        """Allocate one container's compute share."""
        with self.pairing.lock:
            gpu = self._check(ids)
            percent = len(ids)
            match = self._match(percent, prune=True)
            pod_container = (match[0].uid, match[1].name) if match else None
            if match is not None and pod_container is not None:
                wanted = self._pod_gpu(match[0], pod_container)
                if wanted is not None and wanted.uuid != gpu.uuid:
                    raise AllocationError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"the kubelet offered {self.resource} units on GPU {gpu.index} "
                        f"({gpu.uuid}) but the container's memory is on GPU {wanted.index} "
                        f"({wanted.uuid}): both must be on the same GPU",
                    )
            if self.host.mps is not None:
                self.host.mps.check_one_gpu(1)
            key, directory, entry = self.pairing.add_compute(
                pod_container, gpu, percent, list(ids), self._meta(match), _priority(match)
            )
            if match is not None:
                self.assignments.add_compute(match, gpu.index)
            log.info(
                "allocated %s: %d%% of GPU %d (%s) -> %s",
                "/".join((match[0].namespace, match[0].name, match[1].name))
                if match
                else "container",
                percent,
                gpu.index,
                gpu.uuid,
                directory,
            )
            env = {ENV_VISIBLE_DEVICES: gpu.uuid, **entry_environment(self.host, entry)}
            return Allocation(key, directory, env, entry_mounts(self.host, entry))

    def _meta(self, match: Match | None) -> dict[str, object]:
        return {"source": SOURCE_DEVICE_PLUGIN, "resource": self.resource, **pod_meta(match)}

    def rollback(self, key: str) -> None:
        """Undo this policy's part of a container directory (a failed Allocate)."""
        self.pairing.release(key, COMPUTE)


def _priority(match: Match | None) -> str:
    """The priority of the container's compute turns: its pod's `cgpu.io/compute-priority`
    (normal standalone or without one); a malformed one fails the Allocate."""
    if match is None:
        return "normal"
    try:
        return match[0].compute_priority
    except PodError as err:
        raise AllocationError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
