"""Pods as the API server describes them, and which container an Allocate call is for.

Pure functions over the pod JSON the API server returns; no I/O here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cgpu.core.layout import (
    GPU_COUNT,
    GPU_MEM_ASSIGNED,
    GPU_MEM_ASSUME_TIME,
    GPU_MEM_IDX,
    GPU_MEM_POD,
)


class PodError(ValueError):
    """A pod whose labels or annotations cannot be honoured."""


@dataclass(frozen=True)
class ContainerRequest:
    """One container of a pod and the units of the resource it asks for."""

    name: str
    units: int
    init: bool = False


@dataclass(frozen=True)
class PodInfo:
    """The parts of a pod the plugin needs."""

    uid: str
    namespace: str
    name: str
    phase: str
    created: float
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    containers: tuple[ContainerRequest, ...] = ()
    deleting: bool = False
    rejected: bool = False

    @property
    def gpu_count(self) -> int:
        """GPUs each container spreads over (label aliyun.com/gpu-count, default 1)."""
        raw = self.labels.get(GPU_COUNT)
        if raw is None:
            return 1
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise PodError(
                f"pod {self.namespace}/{self.name}: label {GPU_COUNT}={raw!r} "
                "is not a positive integer"
            )
        return value

    @property
    def pinned(self) -> list[int]:
        """GPU indexes the gpushare scheduler extender chose (ALIYUN_COM_GPU_MEM_IDX)."""
        raw = self.annotations.get(GPU_MEM_IDX, "").strip()
        if not raw:
            return []
        try:
            indexes = [int(part) for part in raw.split(",")]
        except ValueError:
            indexes = [-1]
        if any(i < 0 for i in indexes):
            raise PodError(
                f"pod {self.namespace}/{self.name}: annotation {GPU_MEM_IDX}={raw!r} "
                "is not a GPU index or a comma list of them"
            )
        return indexes

    @property
    def assigned(self) -> bool:
        """Whether a device plugin already allocated this pod (ALIYUN_COM_GPU_MEM_ASSIGNED)."""
        return self.annotations.get(GPU_MEM_ASSIGNED, "").lower() == "true"

    @property
    def order(self) -> tuple[float, str, str]:
        """Admission order: the extender's assume time, else creation time."""
        raw = self.annotations.get(GPU_MEM_ASSUME_TIME, "")
        stamp = int(raw) / 1e9 if raw.isdigit() else self.created
        return (stamp, self.namespace, self.name)

    @property
    def total_units(self) -> int:
        """The pod's request: the annotation when the extender set it, else the containers'."""
        raw = self.annotations.get(GPU_MEM_POD, "")
        if raw.isdigit():
            return int(raw)
        return sum(c.units for c in self.containers if not c.init)

    def requesting(self) -> list[ContainerRequest]:
        """Containers that ask for the resource, in the kubelet's order (init ones first)."""
        return [c for c in self.containers if c.units > 0]


def _quantity(value: Any) -> int:
    """An extended-resource quantity: a plain integer."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def _created(text: str | None) -> float:
    if not text:
        return 0.0
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _containers(spec: dict[str, Any], resource: str) -> tuple[ContainerRequest, ...]:
    out = []
    for key, init in (("initContainers", True), ("containers", False)):
        for container in spec.get(key) or []:
            resources = container.get("resources") or {}
            limit = (resources.get("limits") or {}).get(resource)
            if limit is None:
                limit = (resources.get("requests") or {}).get(resource)
            out.append(ContainerRequest(container.get("name", ""), _quantity(limit or 0), init))
    return tuple(out)


def _rejected(status: dict[str, Any]) -> bool:
    """Whether the kubelet refused the pod at admission (it will never start as is)."""
    if status.get("reason") == "UnexpectedAdmissionError":
        return True
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if "PreStartContainer check failed" in str(waiting.get("message", "")):
            return True
    return False


def parse_pod(pod: dict[str, Any], resource: str) -> PodInfo:
    """PodInfo from the API server's JSON for one pod."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return PodInfo(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        phase=status.get("phase", ""),
        created=_created(meta.get("creationTimestamp")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        containers=_containers(pod.get("spec") or {}, resource),
        deleting=bool(meta.get("deletionTimestamp")),
        rejected=_rejected(status),
    )


def match_container(
    pods: Iterable[PodInfo], units: int, allocated: set[tuple[str, str]]
) -> tuple[PodInfo, ContainerRequest] | None:
    """The container an Allocate of `units` units is for.

    The kubelet admits one pod at a time and calls Allocate once per container, init
    containers first. So the answer is the first container, of the earliest pending pod
    still waiting for devices, that asks for exactly `units` and is not yet allocated.
    `allocated` holds (pod uid, container name) pairs already served.
    """
    waiting = [p for p in pods if p.phase == "Pending" and not p.deleting and not p.assigned]
    for pod in sorted(waiting, key=lambda p: p.order):
        for container in pod.requesting():
            if (pod.uid, container.name) in allocated:
                continue
            if container.units == units:
                return pod, container
    return None


def pod_complete(pod: PodInfo, allocated: set[tuple[str, str]]) -> bool:
    """Whether every container of the pod that asks for the resource has been allocated."""
    return all((pod.uid, c.name) in allocated for c in pod.requesting())
