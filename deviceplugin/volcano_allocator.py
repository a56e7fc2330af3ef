"""Allocation in Volcano mode: the pod's `volcano.sh/gpu-index` decides the GPU."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from cgpu.core import injection
from cgpu.core.layout import KEY_ANNOTATION
from cgpu.deviceplugin import placement, volcano
from cgpu.deviceplugin.allocator import Allocator, Match
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as api
from cgpu.deviceplugin.kube import KubeError
from cgpu.deviceplugin.placement import AllocationError, Placement
from cgpu.deviceplugin.pods import PodInfo

log = logging.getLogger(__name__)


class VolcanoAllocator(Allocator):
    """Serves GetPreferredAllocation and Allocate for `volcano.sh/gpu-memory`.

    Volcano's scheduler already chose the GPU: there is no placement here, only the match
    of the request to its pod, the checks, and the container's directory and variables.
    The API server is required; when it cannot be read, Allocate fails (UNAVAILABLE).
    """

    def _find(self, units: int, prune: bool) -> Match:
        """The pod container this request is for; AllocationError when there is none."""
        if self.kube is None:
            raise AllocationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{volcano.RESOURCE} needs the API server to find the pod's "
                f"{volcano.GPU_INDEX}; the plugin has none (pass --kubeconfig or run in-cluster)",
            )
        try:
            pods = self._pending(prune)
        except KubeError as err:
            raise AllocationError(
                grpc.StatusCode.UNAVAILABLE, f"cannot list this node's pending pods: {err}"
            ) from None
        found = volcano.match(pods, units, self._allocated)
        if found is None:
            raise AllocationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no pending pod on node {self.kube.node_name} has a container asking for "
                f"{units} {volcano.RESOURCE} that is still waiting for its GPU (not "
                f"{volcano.GPU_ASSIGNED}); was the pod deleted, or scheduled by another "
                "scheduler?",
            )
        return found

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """Units from the pod's GPU when it is known (so the kubelet's count follows the card)."""
        pinned: list[int] = []
        try:
            with self._lock:
                pod, _ = self._find(size, prune=False)
            pinned = [volcano.gpu_index(pod)]
        except AllocationError as err:
            log.info("GetPreferredAllocation without a GPU from the pod: %s", err.message)
        return placement.preferred(self.inventory, available, must_include, size, 1, pinned)

    def allocate(self, ids: Sequence[str]) -> api.ContainerAllocateResponse:
        """Allocate one container on the GPU its pod's annotation names."""
        with self._lock:
            match = self._find(len(ids), prune=True)
            pod, container = match
            grant = volcano.grant(self.inventory, pod, len(ids))
            # Validates the IDs (known, not repeated); the GPU is the annotation's.
            placement.check(self.inventory, ids, self.settings.resource, 1, [grant.gpu.gpu.index])
            placed = Placement([grant.gpu], grant.units)
            meta = self._meta(ids, placed, match)
            meta["allocated_mib"] = grant.mib
            key, directory = self._create({grant.gpu.gpu.uuid: grant.limit_bytes}, meta)
            self._served(match, placed)
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
            return api.ContainerAllocateResponse(
                envs={**grant.environment(), **injection.environment()},
                mounts=self._mounts(directory),
                annotations={KEY_ANNOTATION: key},
            )

    def _mark_assigned(self, pod: PodInfo) -> None:
        """Set volcano.sh/gpu-assigned=true, so the next Allocate takes the next pod."""
        assert self.kube is not None
        try:
            self.kube.annotate_pod(pod.namespace, pod.name, {volcano.GPU_ASSIGNED: "true"})
        except KubeError as err:
            log.warning("could not mark pod %s/%s assigned: %s", pod.namespace, pod.name, err)
