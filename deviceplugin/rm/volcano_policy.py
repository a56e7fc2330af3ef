"""The Volcano policy (`volcano.sh/gpu-memory`): the pod's `volcano.sh/gpu-index` names the GPU."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from cgpu.core.containers import remove_container_dir
from cgpu.core.layout import VOLCANO_GPU_ASSIGNED, VOLCANO_GPU_INDEX, VOLCANO_GPU_MEMORY
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.kube.client import KubeError
from cgpu.deviceplugin.kube.pods import PodInfo
from cgpu.deviceplugin.rm import placement, volcano
from cgpu.deviceplugin.rm.assignments import Assignments
from cgpu.deviceplugin.rm.directory import Match, make_directory, placement_meta
from cgpu.deviceplugin.rm.inventory import Inventory
from cgpu.deviceplugin.rm.placement import Placement
from cgpu.deviceplugin.rm.policy import Allocation

log = logging.getLogger(__name__)


def volcano_marker(pod: PodInfo, gpus: list[int]) -> dict[str, str]:
    """Volcano's: volcano.sh/gpu-assigned=true, so the next Allocate takes the next pod."""
    return {VOLCANO_GPU_ASSIGNED: "true"}


class VolcanoPolicy:
    """GetPreferredAllocation and Allocate for `volcano.sh/gpu-memory`.

    Volcano's scheduler already chose the GPU: there is no placement here, only the match
    of the request to its pod, the checks, and the container's directory and variables.
    The API server is required; when it cannot be read, Allocate fails (UNAVAILABLE). Its
    `Assignments` should mark pods with `volcano_marker`.
    """

    def __init__(self, inventory: Inventory, assignments: Assignments) -> None:
        self.inventory = inventory
        self.assignments = assignments
        self.host = assignments.host

    def _find(self, units: int, prune: bool) -> Match:
        """The pod container this request is for; AllocationError when there is none."""
        pods = self.assignments.pods
        if pods is None:
            raise AllocationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{VOLCANO_GPU_MEMORY} needs the API server to find the pod's "
                f"{VOLCANO_GPU_INDEX}; the plugin has none (pass --kubeconfig or run in-cluster)",
            )
        try:
            pending = self.assignments.pending(prune)
        except KubeError as err:
            raise AllocationError(
                grpc.StatusCode.UNAVAILABLE, f"cannot list this node's pending pods: {err}"
            ) from None
        found = volcano.match(pending, units, set(self.assignments.allocated))
        if found is None:
            raise AllocationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no pending pod on node {pods.node_name} has a container asking for "
                f"{units} {VOLCANO_GPU_MEMORY} that is still waiting for its GPU (not "
                f"{VOLCANO_GPU_ASSIGNED}); was the pod deleted, or scheduled by another "
                "scheduler?",
            )
        return found

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """Units from the pod's GPU when it is known (so the kubelet's count follows the card)."""
        pinned: list[int] = []
        try:
            with self.assignments.lock:
                pod, _ = self._find(size, prune=False)
            pinned = [volcano.gpu_index(pod)]
        except AllocationError as err:
            log.info("GetPreferredAllocation without a GPU from the pod: %s", err.message)
        return placement.preferred(self.inventory, available, must_include, size, 1, pinned)

    def allocate(self, ids: Sequence[str]) -> Allocation:
        """Allocate one container on the GPU its pod's annotation names."""
        with self.assignments.lock:
            match = self._find(len(ids), prune=True)
            pod, container = match
            grant = volcano.grant(self.inventory, pod, len(ids))
            # Validates the IDs (known, not repeated); the GPU is the annotation's.
            placement.check(self.inventory, ids, self.host.resource, 1, [grant.gpu.gpu.index])
            placed = Placement([grant.gpu], grant.units)
            meta = placement_meta(self.host.resource, self.inventory.unit.bytes, ids, placed, match)
            meta["allocated_mib"] = grant.mib
            key, directory = make_directory(
                self.host.state_dir,
                {grant.gpu.gpu.uuid: grant.limit_bytes},
                meta,
                self.host.contexts,
            )
            self.assignments.add_memory(match, [grant.gpu.gpu.index])
            log.info(
                "allocated %s/%s/%s: %d MiB on GPU %d (%s) -> %s",
                pod.namespace,
                pod.name,
                container.name,
                grant.mib,
                grant.gpu.gpu.index,
                grant.gpu.gpu.uuid,
                directory,
            )
            return Allocation(key, directory, grant.environment())

    def rollback(self, key: str) -> None:
        """Remove the container directory of a failed Allocate."""
        remove_container_dir(self.host.state_dir, key)
