"""Pods as the API server describes them, and which container an Allocate call is for.

Pure functions over the pod JSON the API server returns; no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cgpu.core.layout import COMPUTE_PRIORITY_ANNOTATION, GPU_COUNT, GPU_MEM_IDX
from cgpu.core.podcontract import PodContract, PodContractError, read_pod


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
    """The parts of a pod the plugin needs, from its contract (`cgpu.core.podcontract`).

    A pod whose request for the resource cannot be read (`problems`) is skipped: it asks for
    nothing any Allocate can be matched to (the API server refuses such a pod, so only a
    hand-made object gets here); `lookup` logs why."""

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
    contract: PodContract = field(default_factory=PodContract, compare=False, repr=False)
    problems: tuple[str, ...] = ()  # why the resource of a container cannot be read

    def _checked(self, key: str) -> None:
        try:
            self.contract.check(key)
        except PodContractError as err:
            raise PodError(f"pod {self.namespace}/{self.name}: {err}") from None

    @property
    def gpu_count(self) -> int:
        """GPUs each container spreads over (label aliyun.com/gpu-count, default 1)."""
        self._checked(GPU_COUNT)
        return self.contract.gpu_count or 1

    @property
    def compute_priority(self) -> str:
        """The priority of its compute turns (cgpu.io/compute-priority, default normal);
        PodError when the annotation is not high, normal or low."""
        self._checked(COMPUTE_PRIORITY_ANNOTATION)
        return self.contract.compute_priority or "normal"

    @property
    def pinned(self) -> list[int]:
        """GPU indexes the gpushare scheduler extender chose (ALIYUN_COM_GPU_MEM_IDX)."""
        self._checked(GPU_MEM_IDX)
        return list(self.contract.gpu_indexes or ())

    @property
    def assigned(self) -> bool:
        """Whether a device plugin already allocated this pod (ALIYUN_COM_GPU_MEM_ASSIGNED)."""
        return self.contract.assigned

    @property
    def order(self) -> tuple[float, str, str]:
        """Admission order: the extender's assume time, else creation time."""
        stamp = self.contract.assume_time
        return (stamp / 1e9 if stamp is not None else self.created, self.namespace, self.name)

    @property
    def total_units(self) -> int:
        """The pod's request: the annotation when the extender set it, else the containers'."""
        if self.contract.pod_units is not None:
            return self.contract.pod_units
        return sum(c.units for c in self.containers if not c.init)

    def requesting(self) -> list[ContainerRequest]:
        """Containers that ask for the resource, in the kubelet's order (init ones first);
        none when one of them cannot be read."""
        if self.problems:
            return []
        return [c for c in self.containers if c.units > 0]


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
    """PodInfo from the API server's JSON for one pod, read for `resource`."""
    read = read_pod(pod, (resource,))
    return PodInfo(
        uid=read.uid,
        namespace=read.namespace,
        name=read.name,
        phase=read.phase,
        created=read.created,
        labels=dict(read.labels),
        annotations=dict(read.annotations),
        containers=tuple(
            ContainerRequest(c.name, c.amounts.get(resource, 0), c.init) for c in read.containers
        ),
        deleting=read.deleting,
        rejected=_rejected(pod.get("status") or {}),
        contract=read,
        problems=tuple(read.resource_problems(resource)),
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
