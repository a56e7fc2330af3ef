"""GetPreferredAllocation and Allocate: choose GPUs, write the container directory, inject."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from cgpu.core import injection
from cgpu.core.containers import create_container_dir, list_container_dirs, read_meta
from cgpu.core.layout import (
    ENV_COMPUTE_LIMIT,
    ENV_GPU_MEM_IDX,
    ENV_GPU_MEM_POD,
    ENV_VISIBLE_DEVICES,
    GPU_COUNT,
    KEY_ANNOTATION,
    SOURCE_DEVICE_PLUGIN,
)
from cgpu.deviceplugin import placement
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as api
from cgpu.deviceplugin.inventory import Inventory
from cgpu.deviceplugin.kube import KubeClient, KubeError
from cgpu.deviceplugin.limits import share_env, unit_slices
from cgpu.deviceplugin.mps import MpsInjection
from cgpu.deviceplugin.pairing import COMPUTE, MEMORY, Identity, Pairing, Slot
from cgpu.deviceplugin.placement import AllocationError, Placement
from cgpu.deviceplugin.pods import (
    ASSIGNED_ANNOTATION,
    IDX_ANNOTATION,
    ContainerRequest,
    PodError,
    PodInfo,
    match_container,
    parse_pod,
    pod_complete,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """Where things live on the host, and the resource this plugin serves."""

    state_dir: Path
    resource: str
    shim: Path
    preload: Path
    compute_resource: str | None = None  # also served: containers may ask for both
    mps: MpsInjection | None = None  # --isolation mps
    contexts: Mapping[str, int] = field(default_factory=dict)  # {uuid: a context's bytes}


Match = tuple[PodInfo, ContainerRequest]


class Allocator:
    """Serves the two allocation calls; safe to call from several gRPC threads."""

    def __init__(
        self,
        inventory: Inventory,
        settings: Settings,
        kube: KubeClient | None,
        pairing: Pairing | None = None,
    ) -> None:
        self.inventory = inventory
        self.settings = settings
        self.kube = kube
        self.pairing = pairing or Pairing(
            settings.state_dir,
            [g.gpu for g in inventory.gpus],
            mps=settings.mps is not None,
            contexts=settings.contexts,
        )
        self._lock = self.pairing.lock
        self._allocated = self._recover()
        self._pod_gpus: dict[str, set[int]] = {}
        self._pod_json: dict[str, dict[str, Any]] = {}

    def _recover(self) -> set[tuple[str, str]]:
        """(pod uid, container) pairs already served, from the container directories."""
        served = set()
        for directory in list_container_dirs(self.settings.state_dir):
            meta = read_meta(directory)
            ours = meta.get("source") == SOURCE_DEVICE_PLUGIN
            memory = meta.get("limits") is not None or "limits" not in meta
            if ours and memory and meta.get("pod_uid") and meta.get("container"):
                served.add((str(meta["pod_uid"]), str(meta["container"])))
        return served

    def _pending(self, prune: bool = False) -> list[PodInfo]:
        """The pending pods on this node; raises KubeError when the API server fails.

        With `prune`, forget served containers of pods that are no longer pending: only
        pending pods are ever matched.
        """
        assert self.kube is not None
        raw = self.kube.pending_pods()
        self._pod_json = {str((p.get("metadata") or {}).get("uid", "")): p for p in raw}
        pods = [parse_pod(p, self.settings.resource) for p in raw]
        if prune:
            pending = {p.uid for p in pods}
            self._allocated = {(uid, c) for uid, c in self._allocated if uid in pending}
            self._pod_gpus = {uid: g for uid, g in self._pod_gpus.items() if uid in pending}
            self.pairing.forget(pending)
        return pods

    def requests(self, pod_uid: str, resource: str | None) -> list[ContainerRequest]:
        """The containers of a pod (as last listed) that ask for `resource`."""
        pod_json = self._pod_json.get(pod_uid)
        if pod_json is None or not resource:
            return []
        return parse_pod(pod_json, resource).requesting()

    def compute_request(self, identity: Identity) -> int:
        """The container's compute request (0: none, or no compute resource served)."""
        for request in self.requests(identity[0], self.settings.compute_resource):
            if request.name == identity[1]:
                return request.units
        return 0

    def compute_complete(self, pod_uid: str) -> bool:
        """Whether every container of the pod has the compute share it asks for."""
        return all(
            self.pairing.served((pod_uid, c.name), COMPUTE)
            for c in self.requests(pod_uid, self.settings.compute_resource)
        )

    def _lookup(self, units: int, prune: bool = False) -> Match | None:
        """The pod container this request is for, when an API server is reachable."""
        if self.kube is None:
            return None
        try:
            pods = self._pending(prune)
        except KubeError as err:
            log.warning("pod lookup failed, allocating without pod information: %s", err)
            return None
        return match_container(pods, units, self._allocated)

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
            identity = (match[0].uid, match[1].name) if match else None
            partner = self.pairing.gpu_of(identity, MEMORY)
            pinned = [partner.index] if partner is not None else []
        return placement.preferred(self.inventory, available, must_include, size, gpu_count, pinned)

    def allocate(self, ids: Sequence[str]) -> api.ContainerAllocateResponse:
        """Allocate one container: check the IDs, write its directory, build the response."""
        with self._lock:
            match = self._lookup(len(ids), prune=True)
            pod = match[0] if match else None
            try:
                gpu_count = pod.gpu_count if pod else 1
                pinned = pod.pinned if pod else []
            except PodError as err:
                raise AllocationError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
            placed = placement.check(self.inventory, ids, self.settings.resource, gpu_count, pinned)
            if pinned:
                self._warn_if_moved(ids, placed, pod)
            limits = unit_slices(placed.units_per_gpu, [(g.gpu, g.units) for g in placed.gpus])
            identity = (match[0].uid, match[1].name) if match else None
            self._check_one_gpu(identity, placed)
            key, directory, slot = self.pairing.add_memory(
                identity,
                [g.gpu for g in placed.gpus],
                limits,
                list(ids),
                self._meta(ids, placed, match),
            )
            if match is not None:
                self._served(match, placed)
            log.info(
                "allocated %s: %d units on %s -> %s",
                f"{match[0].namespace}/{match[0].name}/{match[1].name}" if match else "container",
                placed.units_per_gpu,
                ",".join(g.gpu.uuid for g in placed.gpus),
                directory,
            )
            return self._response(key, directory, placed, pod, slot)

    def _check_one_gpu(self, identity: Identity | None, placed: Placement) -> None:
        """MPS, and a compute share, need a one-GPU container."""
        if self.settings.mps is not None:
            self.settings.mps.check_one_gpu(len(placed.gpus))
        if identity is not None and len(placed.gpus) > 1 and self.compute_request(identity):
            raise AllocationError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the container asks for {self.settings.compute_resource} and spreads over "
                f"{len(placed.gpus)} GPUs ({GPU_COUNT}): a compute share applies to "
                "a one-GPU container",
            )

    def memory_served(self, identity: Identity) -> bool:
        """Whether the container has its memory (from this plugin run or a directory)."""
        return identity in self._allocated or self.pairing.served(identity, MEMORY)

    def rollback(self, key: str) -> None:
        """Undo this allocator's part of a container directory (a failed Allocate)."""
        self.pairing.release(key, MEMORY)

    def _create(self, limits: dict[str, int], meta: dict[str, Any]) -> tuple[str, Path]:
        """A new container directory with these slices: (key, path)."""
        key = f"dp-{int(time.time())}-{secrets.token_hex(6)}"
        try:
            directory = create_container_dir(
                self.settings.state_dir, key, limits, meta, contexts=dict(self.settings.contexts)
            )
            return key, directory
        except Exception as err:
            raise AllocationError(
                grpc.StatusCode.INTERNAL, f"cannot create the container directory: {err}"
            ) from err

    def _served(self, match: Match, placed: Placement) -> None:
        """Remember the container as served; mark its pod assigned once it is complete."""
        pod, container = match
        self._allocated.add((pod.uid, container.name))
        self._pod_gpus.setdefault(pod.uid, set()).update(g.gpu.index for g in placed.gpus)
        if (
            self.kube is not None
            and pod_complete(pod, self._allocated)
            and self.compute_complete(pod.uid)
        ):
            self._mark_assigned(pod)

    def _mounts(self, directory: Path) -> list[api.Mount]:
        """The shim, /etc/ld.so.preload and the container directory, as kubelet mounts."""
        return [
            api.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in injection.container_mounts(
                self.settings.shim, self.settings.preload, directory
            )
        ]

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
                IDX_ANNOTATION,
                sorted(chosen),
            )

    def _meta(self, ids: Sequence[str], placed: Placement, match: Match | None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "source": SOURCE_DEVICE_PLUGIN,
            "device_ids": list(ids),
            "resource": self.settings.resource,
            "unit_bytes": self.inventory.unit.bytes,
            "units_per_gpu": placed.units_per_gpu,
            "gpu_uuids": [g.gpu.uuid for g in placed.gpus],
            "gpu_indexes": [g.gpu.index for g in placed.gpus],
        }
        if match is not None:
            pod, container = match
            meta.update(
                namespace=pod.namespace, pod=pod.name, pod_uid=pod.uid, container=container.name
            )
        return meta

    def _mark_assigned(self, pod: PodInfo) -> None:
        """Tell the gpushare extender (and kubectl inspect) the pod has its devices."""
        assert self.kube is not None
        annotations = {ASSIGNED_ANNOTATION: "true"}
        if IDX_ANNOTATION not in pod.annotations:
            gpus = sorted(self._pod_gpus.get(pod.uid, ()))
            annotations[IDX_ANNOTATION] = ",".join(str(i) for i in gpus)
        try:
            self.kube.annotate_pod(pod.namespace, pod.name, annotations)
        except KubeError as err:
            log.warning("could not mark pod %s/%s assigned: %s", pod.namespace, pod.name, err)

    def _response(
        self,
        key: str,
        directory: Path,
        placed: Placement,
        pod: PodInfo | None,
        slot: Slot | None = None,
    ) -> api.ContainerAllocateResponse:
        envs = {
            ENV_VISIBLE_DEVICES: ",".join(g.gpu.uuid for g in placed.gpus),
            ENV_GPU_MEM_IDX: ",".join(str(g.gpu.index) for g in placed.gpus),
            **share_env(placed.units_per_gpu, placed.gpus[0].units),
            **injection.environment(),
        }
        if pod is not None:
            envs[ENV_GPU_MEM_POD] = str(pod.total_units)
        mounts = self._mounts(directory)
        if slot is not None:
            envs.update(self.slot_environment(slot))
            mounts += self.slot_mounts(slot)
        return api.ContainerAllocateResponse(
            envs=envs, mounts=mounts, annotations={KEY_ANNOTATION: key}
        )

    def slot_environment(self, slot: Slot) -> dict[str, str]:
        """The variables both halves of a container answer with (the kubelet merges them)."""
        uuid = slot.gpus[0].uuid
        envs: dict[str, str] = {}
        mps = self.settings.mps
        if mps is not None:
            memory = slot.limits.get(uuid) if slot.limits else None
            envs.update(mps.environment(uuid, memory, slot.compute))
        elif slot.compute is not None:
            envs[ENV_COMPUTE_LIMIT] = str(slot.compute)
        return envs

    def slot_mounts(self, slot: Slot) -> list[api.Mount]:
        """The MPS mounts of the container's GPU, in MPS mode."""
        mps = self.settings.mps
        return mps.mounts(slot.gpus[0].uuid) if mps is not None else []
