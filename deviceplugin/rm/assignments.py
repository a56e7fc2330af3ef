"""Which containers of this node's pending pods have what: the state the memory and compute
policies share, behind a public interface.

It holds the lock both policies allocate under, the pod lookup, the containers given memory,
the GPUs each pod got, and the pairing of a container's memory and compute halves. Once every
container of a pod has all it asks for, it marks the pod assigned on the API server, with the
annotations the mode's `Marker` gives (gpushare's or Volcano's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from cgpu.core.containers import list_container_dirs, read_meta
from cgpu.core.layout import GPU_MEM_ASSIGNED, GPU_MEM_IDX, SOURCE_DEVICE_PLUGIN
from cgpu.deviceplugin.kube.client import KubeError
from cgpu.deviceplugin.kube.lookup import PodLookup
from cgpu.deviceplugin.kube.pods import ContainerRequest, PodInfo, pod_complete
from cgpu.deviceplugin.rm.directory import Match
from cgpu.deviceplugin.rm.pairing import COMPUTE, MEMORY, Pairing, PodContainer
from cgpu.deviceplugin.rm.policy import Host

log = logging.getLogger(__name__)

# The annotations that mark a complete pod assigned, given the GPU indexes its containers got.
Marker = Callable[[PodInfo, list[int]], dict[str, str]]


def gpushare_marker(pod: PodInfo, gpus: list[int]) -> dict[str, str]:
    """gpushare's: assigned, and the GPU indexes when the extender did not write them."""
    annotations = {GPU_MEM_ASSIGNED: "true"}
    if GPU_MEM_IDX not in pod.annotations:
        annotations[GPU_MEM_IDX] = ",".join(str(i) for i in gpus)
    return annotations


class Assignments:
    """The containers served and their pods; call under `lock` (the pairing's)."""

    def __init__(
        self,
        host: Host,
        pods: PodLookup | None,
        pairing: Pairing,
        marker: Marker = gpushare_marker,
    ) -> None:
        self.host = host
        self.pods = pods
        self.pairing = pairing
        self.marker = marker
        self.lock = pairing.lock
        self._allocated = self._recover()
        self._pod_gpus: dict[str, set[int]] = {}

    def _recover(self) -> set[PodContainer]:
        """(pod uid, container) pairs already given memory, from the container directories."""
        served = set()
        for directory in list_container_dirs(self.host.state_dir):
            meta = read_meta(directory)
            ours = meta.get("source") == SOURCE_DEVICE_PLUGIN
            memory = meta.get("limits") is not None or "limits" not in meta
            if ours and memory and meta.get("pod_uid") and meta.get("container"):
                served.add((str(meta["pod_uid"]), str(meta["container"])))
        return served

    @property
    def allocated(self) -> frozenset[PodContainer]:
        """The containers given memory (this run, or before a restart)."""
        return frozenset(self._allocated)

    def pending(self, prune: bool = False) -> list[PodInfo]:
        """The pending pods on this node, read for the memory resource; raises KubeError.

        With `prune`, forget served containers of pods that are no longer pending: only
        pending pods are ever matched.
        """
        assert self.pods is not None
        pods = self.pods.pending(self.host.resource)
        if prune:
            pending = {p.uid for p in pods}
            self._allocated = {(uid, c) for uid, c in self._allocated if uid in pending}
            self._pod_gpus = {uid: g for uid, g in self._pod_gpus.items() if uid in pending}
            self.pairing.forget(pending)
        return pods

    def requests(self, pod_uid: str, resource: str | None) -> list[ContainerRequest]:
        """The containers of a pod (as last listed) that ask for `resource`."""
        return self.pods.requests(pod_uid, resource) if self.pods is not None else []

    def compute_request(self, pod_container: PodContainer) -> int:
        """The container's compute request (0: none, or no compute resource served)."""
        for request in self.requests(pod_container[0], self.host.compute_resource):
            if request.name == pod_container[1]:
                return request.units
        return 0

    def compute_complete(self, pod_uid: str) -> bool:
        """Whether every container of the pod has the compute share it asks for."""
        return all(
            self.pairing.served((pod_uid, c.name), COMPUTE)
            for c in self.requests(pod_uid, self.host.compute_resource)
        )

    def memory_served(self, pod_container: PodContainer) -> bool:
        """Whether the container has its memory (from this plugin run or a directory)."""
        return pod_container in self._allocated or self.pairing.served(pod_container, MEMORY)

    def add_memory(self, match: Match, gpus: Iterable[int]) -> None:
        """Remember the container's memory; mark its pod assigned once it is complete."""
        pod, container = match
        self._allocated.add((pod.uid, container.name))
        self._pod_gpus.setdefault(pod.uid, set()).update(gpus)
        if (
            self.pods is not None
            and pod_complete(pod, self._allocated)
            and self.compute_complete(pod.uid)
        ):
            self._mark(pod)

    def add_compute(self, match: Match, gpu: int) -> None:
        """Remember the container's compute GPU; mark the pod assigned once every container
        has all it asked for."""
        pod, _ = match
        self._pod_gpus.setdefault(pod.uid, set()).add(gpu)
        memory_done = all(
            self.memory_served((pod.uid, c.name))
            for c in self.requests(pod.uid, self.host.resource)
        )
        if memory_done and self.compute_complete(pod.uid):
            self._mark(pod)

    def _mark(self, pod: PodInfo) -> None:
        """Tell the scheduler (and kubectl inspect) the pod has its devices."""
        assert self.pods is not None
        annotations = self.marker(pod, sorted(self._pod_gpus.get(pod.uid, ())))
        try:
            self.pods.annotate(pod, annotations)
        except KubeError as err:
            log.warning("could not mark pod %s/%s assigned: %s", pod.namespace, pod.name, err)
