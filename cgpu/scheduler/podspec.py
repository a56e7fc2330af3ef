"""What a pod asks of the GPUs: parsed from its JSON, failing closed on malformed input."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cgpu.core.layout import (
    GPU_CORE,
    GPU_COUNT,
    GPU_MEM,
    GPU_MEM_ASSIGNED,
    GPU_MEM_ASSUME_TIME,
    GPU_MEM_DEV,
    GPU_MEM_IDX,
    GPU_MEM_POD,
    GPU_POLICY_ANNOTATION,
    NODE_POLICY_ANNOTATION,
)

COMPUTE_PER_GPU = 100
GPUSHARE_ANNOTATIONS = (
    GPU_MEM_IDX,
    GPU_MEM_POD,
    GPU_MEM_DEV,
    GPU_MEM_ASSIGNED,
    GPU_MEM_ASSUME_TIME,
)
POLICIES = ("binpack", "spread")

_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_QUANTITY = re.compile(r"^\+?(\d+)(k|M|G|T|Ki|Mi|Gi|Ti)?$")


class SpecError(ValueError):
    """A pod or node whose GPU fields cannot be honoured."""


def quantity(raw: Any, what: str) -> int:
    """A whole-number Kubernetes quantity ("4", "2k", "1Ki"); anything else is a SpecError."""
    text = str(raw).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise SpecError(f"{what}={text!r} is not a whole number")
    return int(match.group(1)) * _SUFFIX[match.group(2) or ""]


def _container_amounts(pod: dict[str, Any], resource: str) -> list[int]:
    """`resource` of each (non-init) container: its limit, else its request."""
    units = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = (container or {}).get("resources") or {}
        raw = (resources.get("limits") or {}).get(resource)
        if raw is None:
            raw = (resources.get("requests") or {}).get(resource)
        name = (container or {}).get("name", "?")
        units.append(0 if raw is None else quantity(raw, f"container {name} {resource}"))
    return units


def container_units(pod: dict[str, Any]) -> list[int]:
    """aliyun.com/gpu-mem of each (non-init) container: its limit, else its request."""
    return _container_amounts(pod, GPU_MEM)


def container_compute(pod: dict[str, Any]) -> list[int]:
    """aliyun.com/gpu-core.percentage of each (non-init) container, each at most 100."""
    percents = _container_amounts(pod, GPU_CORE)
    containers = (pod.get("spec") or {}).get("containers") or []
    for container, percent in zip(containers, percents, strict=True):
        if percent > COMPUTE_PER_GPU:
            name = (container or {}).get("name", "?")
            raise SpecError(
                f"container {name} asks for {percent} {GPU_CORE}: a container gets at "
                f"most {COMPUTE_PER_GPU} (one GPU's compute)"
            )
    return percents


def pod_compute(pod: dict[str, Any]) -> int:
    """The pod's compute on its GPU (the sum over its containers), SpecError past 100."""
    total = sum(container_compute(pod))
    if total > COMPUTE_PER_GPU:
        raise SpecError(
            f"the pod's containers ask for {total} {GPU_CORE} in all: they share one "
            f"GPU, which has {COMPUTE_PER_GPU}"
        )
    return total


@dataclass(frozen=True)
class GpuRequest:
    """A pod's GPU memory: `total` units over `count` GPUs, `per_gpu` on each; and `compute`
    percent of its (single) GPU's compute."""

    total: int
    count: int
    node_policy: str | None = None
    gpu_policy: str | None = None
    compute: int = 0

    @property
    def per_gpu(self) -> int:
        return self.total // self.count

    @property
    def wants_gpu(self) -> bool:
        """Whether the pod asks for GPU memory or compute (else the extender lets it pass)."""
        return self.total > 0 or self.compute > 0


def _policy(annotations: dict[str, str], key: str) -> str | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    if raw not in POLICIES:
        raise SpecError(f"annotation {key}={raw!r} is not one of {', '.join(POLICIES)}")
    return raw


def gpu_request(pod: dict[str, Any]) -> GpuRequest:
    """The pod's request; SpecError for malformed quantities, labels or policies."""
    meta = pod.get("metadata") or {}
    total = sum(container_units(pod))
    labels = meta.get("labels") or {}
    raw_count = labels.get(GPU_COUNT)
    count = 1
    if raw_count is not None:
        text = str(raw_count).strip()
        if not text.isdigit() or int(text) < 1:
            raise SpecError(f"label {GPU_COUNT}={raw_count!r} is not a positive integer")
        count = int(text)
    if total and total % count:
        raise SpecError(f"{GPU_MEM}={total} does not split evenly over {GPU_COUNT}={count} GPUs")
    compute = pod_compute(pod)
    if compute and count > 1:
        raise SpecError(
            f"{GPU_CORE}={compute} with {GPU_COUNT}={count}: a compute share "
            "applies to a one-GPU container"
        )
    annotations = meta.get("annotations") or {}
    return GpuRequest(
        total,
        count,
        _policy(annotations, NODE_POLICY_ANNOTATION),
        _policy(annotations, GPU_POLICY_ANNOTATION),
        compute,
    )


def pinned_indexes(annotations: dict[str, str]) -> tuple[int, ...] | None:
    """GPU indexes in ALIYUN_COM_GPU_MEM_IDX, or None when absent or malformed."""
    raw = (annotations.get(GPU_MEM_IDX) or "").strip()
    if not raw:
        return None
    parts = [p.strip() for p in raw.split(",")]
    if not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs as it advertises them: `count` GPUs of `per_gpu` units, each with
    `compute_per_gpu` percent of compute (0: the node advertises no compute resource)."""

    count: int
    per_gpu: int
    error: str | None = None
    compute_per_gpu: int = 0
    compute_error: str | None = None  # why the node takes no compute, when not simply absent

    @property
    def total(self) -> int:
        return self.count * self.per_gpu


def _resource(status: dict[str, Any], name: str) -> Any:
    for section in ("allocatable", "capacity"):
        value = (status.get(section) or {}).get(name)
        if value is not None:
            return value
    return None


def node_gpus(node: dict[str, Any]) -> NodeGpus:
    """GPU count and units per GPU from allocatable (else capacity); malformed -> error."""
    status = node.get("status") or {}
    raw_mem = _resource(status, GPU_MEM)
    raw_count = _resource(status, GPU_COUNT)
    if raw_mem is None:
        return NodeGpus(0, 0, f"node advertises no {GPU_MEM}")
    try:
        mem = quantity(raw_mem, GPU_MEM)
        count = quantity(raw_count, GPU_COUNT) if raw_count is not None else 1
    except SpecError as err:
        return NodeGpus(0, 0, f"node capacity {err}")
    if count < 1 or mem < 1:
        return NodeGpus(0, 0, f"node advertises {mem} {GPU_MEM} on {count} GPUs")
    compute, compute_error = _node_compute(status, count)
    return NodeGpus(count, mem // count, None, compute, compute_error)


def _node_compute(status: dict[str, Any], count: int) -> tuple[int, str | None]:
    """Percent of compute per GPU the node advertises (0 when none), and why 0 if malformed.

    Malformed fails closed: no compute pod goes to that node, memory pods still do."""
    raw = _resource(status, GPU_CORE)
    if raw is None:
        return 0, None
    try:
        compute = quantity(raw, GPU_CORE)
    except SpecError as err:
        return 0, f"node capacity {err}"
    return min(compute // count, COMPUTE_PER_GPU), None
