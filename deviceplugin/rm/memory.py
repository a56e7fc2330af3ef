"""The memory policy (gpushare's `aliyun.com/gpu-mem`): best fit, or the extender's GPU(s)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from cgpu.core.containers import META_COMPUTE_PRIORITY
from cgpu.core.layout import (
    ENV_GPU_MEM_IDX,
    ENV_GPU_MEM_POD,
    ENV_VISIBLE_DEVICES,
    GPU_COUNT,
    GPU_MEM_IDX,
)
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.kube.client import KubeError
from cgpu.deviceplugin.kube.pods import PodError, PodInfo, match_container
from cgpu.deviceplugin.rm import placement
from cgpu.deviceplugin.rm.assignments import Assignments
from cgpu.deviceplugin.rm.directory import Match, placement_meta
from cgpu.deviceplugin.rm.inventory import Inventory
from cgpu.deviceplugin.rm.pairing import MEMORY, PodContainer
from cgpu.deviceplugin.rm.placement import Placement
from cgpu.deviceplugin.rm.policy import Allocation, entry_environment, entry_mounts
from cgpu.deviceplugin.rm.slices import share_env, unit_slices

log = logging.getLogger(__name__)


class MemoryPolicy:
    """GetPreferredAllocation and Allocate for the memory resource; safe across gRPC threads."""

    def __init__(self, inventory: Inventory, assignments: Assignments) -> None:
        self.inventory = inventory
        self.assignments = assignments
        self.host = assignments.host
        self.pairing = assignments.pairing

    def _lookup(self, units: int, prune: bool = False) -> Match | None:
        """The pod container this request is for, when an API server is reachable."""
        if self.assignments.pods is None:
            return None
        try:
            pods = self.assignments.pending(prune)
        except KubeError as err:
            log.warning("pod lookup failed, allocating without pod information: %s", err)
            return None
        return match_container(pods, units, set(self.assignments.allocated))

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """IDs to suggest to the kubelet for one container."""
        match = self._lookup(size)
        gpu_count, pinned = 1, []
        if match is not None:
            try:
                gpu_count, pinned = match[0].gpu_count, match[0].pinned
            except PodError as err:
                log.warning("%s", err)
        if not pinned and gpu_count == 1:
            # The container's compute share, allocated first, decides the GPU.
            pod_container = (match[0].uid, match[1].name) if match else None
            partner = self.pairing.gpu_of(pod_container, MEMORY)
            pinned = [partner.index] if partner is not None else []
        return placement.preferred(self.inventory, available, must_include, size, gpu_count, pinned)

    def allocate(self, ids: Sequence[str]) -> Allocation:
        """Allocate one container: check the IDs, choose its GPUs, write its directory."""
        with self.assignments.lock:
            match = self._lookup(len(ids), prune=True)
            pod = match[0] if match else None
            try:
                gpu_count = pod.gpu_count if pod else 1
                pinned = pod.pinned if pod else []
                priority = pod.compute_priority if pod else None
            except PodError as err:
                raise AllocationError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
            placed = placement.check(self.inventory, ids, self.host.resource, gpu_count, pinned)
            if pinned:
                self._warn_if_moved(ids, placed, pod)
            limits = unit_slices(placed.units_per_gpu, [(g.gpu, g.units) for g in placed.gpus])
            pod_container = (match[0].uid, match[1].name) if match else None
            self._check_one_gpu(pod_container, placed)
            meta = placement_meta(self.host.resource, self.inventory.unit.bytes, ids, placed, match)
            if priority is not None:  # its turns' priority, with or without a compute limit
                meta[META_COMPUTE_PRIORITY] = priority
            key, directory, entry = self.pairing.add_memory(
                pod_container, [g.gpu for g in placed.gpus], limits, list(ids), meta
            )
            if match is not None:
                self.assignments.add_memory(match, [g.gpu.index for g in placed.gpus])
            log.info(
                "allocated %s: %d units on %s -> %s",
                f"{match[0].namespace}/{match[0].name}/{match[1].name}" if match else "container",
                placed.units_per_gpu,
                ",".join(g.gpu.uuid for g in placed.gpus),
                directory,
            )
            env = {
                ENV_VISIBLE_DEVICES: ",".join(g.gpu.uuid for g in placed.gpus),
                ENV_GPU_MEM_IDX: ",".join(str(g.gpu.index) for g in placed.gpus),
                **share_env(placed.units_per_gpu, placed.gpus[0].units),
            }
            if pod is not None:
                env[ENV_GPU_MEM_POD] = str(pod.total_units)
            env.update(entry_environment(self.host, entry))
            return Allocation(key, directory, env, entry_mounts(self.host, entry))

    def _check_one_gpu(self, pod_container: PodContainer | None, placed: Placement) -> None:
        """MPS, and a compute share, need a one-GPU container."""
        if self.host.mps is not None:
            self.host.mps.check_one_gpu(len(placed.gpus))
        if (
            pod_container is not None
            and len(placed.gpus) > 1
            and self.assignments.compute_request(pod_container)
        ):
            raise AllocationError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the container asks for {self.host.compute_resource} and spreads over "
                f"{len(placed.gpus)} GPUs ({GPU_COUNT}): a compute share applies to "
                "a one-GPU container",
            )

    def rollback(self, key: str) -> None:
        """Undo this policy's part of a container directory (a failed Allocate)."""
        self.pairing.release(key, MEMORY)

    def _warn_if_moved(self, ids: Sequence[str], placed: Placement, pod: PodInfo | None) -> None:
        offered = set(self.inventory.group(ids))
        chosen = {g.gpu.uuid for g in placed.gpus}
        if offered != chosen and pod is not None:
            log.warning(
                "pod %s/%s: the kubelet offered units on %s but %s places it on %s; "
                "following the scheduler extender",
                pod.namespace,
                pod.name,
                sorted(offered),
                GPU_MEM_IDX,
                sorted(chosen),
            )
