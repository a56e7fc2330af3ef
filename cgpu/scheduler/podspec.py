"""What a pod asks of the GPUs: parsed from its JSON, failing closed on malformed input."""

from __future__ import annotations

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
from cgpu.core.podcontract import (
    PodContract,
    PodContractError,
    parse_extended_quantity,
    read_annotations,
    read_pod,
)

COMPUTE_PER_GPU = 100
GPUSHARE_ANNOTATIONS = (
    GPU_MEM_IDX,
    GPU_MEM_POD,
    GPU_MEM_DEV,
    GPU_MEM_ASSIGNED,
    GPU_MEM_ASSUME_TIME,
)
RESOURCES = (GPU_MEM, GPU_CORE)  # what the extender reads of each container

Pod = dict[str, Any] | PodContract  # a pod's JSON, or its contract already read


class SpecError(ValueError):
    """A pod or node whose GPU fields cannot be honoured."""


def quantity(raw: Any, what: str) -> int:
    """A whole-number Kubernetes quantity ("4", "2k", "1Ki", "1e3"); anything else
    (negative, fractional, past an int64, not a quantity) is a SpecError."""
    try:
        return parse_extended_quantity(raw, what)
    except PodContractError as err:
        raise SpecError(str(err)) from None


def contract(pod: Pod) -> PodContract:
    """The pod's contract (read here unless the caller already did)."""
    return pod if isinstance(pod, PodContract) else read_pod(pod, RESOURCES)


def _container_amounts(pod: Pod, resource: str) -> list[int]:
    """`resource` of each (non-init) container: its limit, else its request."""
    try:
        return contract(pod).amounts(resource)
    except PodContractError as err:
        raise SpecError(str(err)) from None


def container_units(pod: Pod) -> list[int]:
    """aliyun.com/gpu-mem of each (non-init) container: its limit, else its request."""
    return _container_amounts(pod, GPU_MEM)


def container_compute(pod: Pod) -> list[int]:
    """aliyun.com/gpu-core.percentage of each (non-init) container, each at most 100."""
    read = contract(pod)
    percents = _container_amounts(read, GPU_CORE)
    containers = [c for c in read.containers if not c.init]
    for container, percent in zip(containers, percents, strict=True):
        if percent > COMPUTE_PER_GPU:
            raise SpecError(
                f"container {container.name or '?'} asks for {percent} {GPU_CORE}: a "
                f"container gets at most {COMPUTE_PER_GPU} (one GPU's compute)"
            )
    return percents


def pod_compute(pod: Pod) -> int:
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


def _check(read: PodContract, *keys: str) -> None:
    try:
        read.check(*keys)
    except PodContractError as err:
        raise SpecError(str(err)) from None


def gpu_request(pod: Pod) -> GpuRequest:
    """The pod's request; SpecError for malformed quantities, labels or policies."""
    read = contract(pod)
    total = sum(container_units(read))
    _check(read, GPU_COUNT)
    count = read.gpu_count or 1
    if total and total % count:
        raise SpecError(f"{GPU_MEM}={total} does not split evenly over {GPU_COUNT}={count} GPUs")
    compute = pod_compute(read)
    if compute and count > 1:
        raise SpecError(
            f"{GPU_CORE}={compute} with {GPU_COUNT}={count}: a compute share "
            "applies to a one-GPU container"
        )
    _check(read, NODE_POLICY_ANNOTATION, GPU_POLICY_ANNOTATION)
    return GpuRequest(total, count, read.node_policy, read.gpu_policy, compute)


def pinned_indexes(annotations: dict[str, str]) -> tuple[int, ...] | None:
    """GPU indexes in ALIYUN_COM_GPU_MEM_IDX, or None when absent or malformed."""
    return read_annotations(annotations).gpu_indexes


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
