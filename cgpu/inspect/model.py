"""GPU nodes and the pods on each GPU, from node and pod JSON (gpushare's rules).

A node's GPU memory is its allocatable aliyun.com/gpu-mem (else capacity), split evenly over
aliyun.com/gpu-count GPUs. A pod holds its containers' aliyun.com/gpu-mem on the GPU(s) of its
ALIYUN_COM_GPU_MEM_IDX annotation (a comma list splits it evenly); with no usable index it is
PENDING. Succeeded and Failed pods hold nothing. Pods are read by `cgpu.core.podcontract`; one
whose request cannot be read is not counted, and its node's `skipped` says why.

DRA claims (driver gpu.cgpu.io) are counted beside them: a GPU published in a ResourceSlice
holds the memory and compute its allocated claims consume (see `cgpu.inspect.dra`). A node
with DRA GPUs only is shown in MiB, with 100% compute per GPU.

The compute share works the same way: a node's aliyun.com/gpu-core.percentage (100 per GPU),
and a pod's containers' percentages on the GPU of its index. It is shown only when some node
advertises it, so the seeds' layout is unchanged for clusters that do not use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cgpu.core.layout import GPU_CORE, GPU_COUNT, GPU_MEM
from cgpu.core.podcontract import PodContract, PodContractError, parse_extended_quantity, read_pod

from .dra import DraGpu

PENDING = -1
MIB_THRESHOLD = 512  # a GPU of more units than this advertises MiB; fewer, GiB


def _resource(node: dict[str, Any], name: str) -> int:
    """A node's allocatable (else capacity) `name`; 0 when absent or unreadable (the node,
    or its compute, is then not shown)."""
    status = node.get("status") or {}
    for section in ("allocatable", "capacity"):
        value = (status.get(section) or {}).get(name)
        if value is not None:
            try:
                return parse_extended_quantity(value, name)
            except PodContractError:
                return 0
    return 0


def pod_units(pod: dict[str, Any] | PodContract, resource: str = GPU_MEM) -> int:
    """The pod's `resource` (aliyun.com/gpu-mem by default): the sum over its containers'
    limits (else requests); PodContractError when one cannot be read."""
    read = pod if isinstance(pod, PodContract) else read_pod(pod, (resource,))
    return read.total(resource)


@dataclass
class PodShare:
    """One pod and what it holds on each GPU index (PENDING for no index)."""

    name: str
    namespace: str
    per_gpu: dict[int, int]
    compute: dict[int, int] = field(default_factory=dict)  # percent on each GPU index


@dataclass
class Device:
    """One GPU (or the PENDING pseudo-device)."""

    index: int
    total: int
    used: int = 0
    pods: list[PodShare] = field(default_factory=list)
    compute_total: int = 0
    compute_used: int = 0
    unlimited: int = 0  # pods holding memory here with no compute limit (best effort)


@dataclass
class GpuNode:
    """A node with aliyun.com/gpu-mem, its GPUs and its pods."""

    name: str
    internal_ip: str
    first_address: str
    gpu_count: int
    total: int
    compute_total: int = 0  # aliyun.com/gpu-core.percentage the node advertises
    devices: dict[int, Device] = field(default_factory=dict)
    pods: list[PodShare] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # pods not counted, and why

    @property
    def per_gpu(self) -> int:
        return self.total // self.gpu_count if self.gpu_count else 0

    @property
    def unit(self) -> str:
        size = self.per_gpu or self.total
        return "MiB" if size > MIB_THRESHOLD else "GiB"

    @property
    def used(self) -> int:
        return sum(d.used for d in self.devices.values())

    @property
    def compute_used(self) -> int:
        return sum(d.compute_used for d in self.devices.values())

    @property
    def pending(self) -> Device | None:
        return self.devices.get(PENDING)


def _addresses(node: dict[str, Any]) -> tuple[str, str]:
    addresses = (node.get("status") or {}).get("addresses") or []
    internal = next(
        (a.get("address", "") for a in addresses if a.get("type") == "InternalIP"), "unknown"
    )
    first = addresses[0].get("address", "unknown") if addresses else "unknown"
    return internal, first


def uses_compute(nodes: list[GpuNode]) -> bool:
    """Whether any node advertises the compute share (then it is shown)."""
    return any(n.compute_total > 0 for n in nodes)


def build_nodes(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], dra: Sequence[DraGpu] = ()
) -> list[GpuNode]:
    """GPU nodes sorted by name, with every active pod placed on its GPU(s), and the DRA
    claims on each published GPU."""
    out: dict[str, GpuNode] = {}
    for node in nodes:
        total = _resource(node, GPU_MEM)
        if total <= 0:
            continue
        name = (node.get("metadata") or {}).get("name", "")
        internal, first = _addresses(node)
        info = GpuNode(name, internal, first, _resource(node, GPU_COUNT), total)
        info.compute_total = _resource(node, GPU_CORE)
        compute_per_gpu = info.compute_total // info.gpu_count if info.gpu_count else 0
        for i in range(info.gpu_count):
            info.devices[i] = Device(i, info.per_gpu, compute_total=compute_per_gpu)
        out[name] = info
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        info = out.get((pod.get("spec") or {}).get("nodeName") or "")
        if info is None or phase in ("Succeeded", "Failed"):
            continue
        read = read_pod(pod, (GPU_MEM, GPU_CORE))
        try:
            units, percent = pod_units(read), pod_units(read, GPU_CORE)
        except PodContractError as err:
            info.skipped.append(f"pod {read.namespace}/{read.name} not counted: {err}")
            continue
        if units + percent <= 0:
            continue
        if not units and not info.compute_total:
            continue  # compute alone on a node without the compute share holds nothing shown
        indexes = list(read.gpu_indexes or ())
        if not indexes or any(i >= info.gpu_count for i in indexes):
            indexes = [PENDING]
        per_gpu = {i: units // len(indexes) for i in indexes}
        compute = {i: percent // len(indexes) for i in indexes}
        meta = pod.get("metadata") or {}
        share = PodShare(meta.get("name", ""), meta.get("namespace", ""), per_gpu, compute)
        info.pods.append(share)
        for index, amount in per_gpu.items():
            device = info.devices.setdefault(index, Device(index, 0))
            device.used += amount
            device.compute_used += compute[index]
            device.unlimited += bool(amount and info.compute_total and not percent)
            device.pods.append(share)
    _add_dra(out, nodes, dra)
    for info in out.values():
        info.pods.sort(
            key=lambda p: (
                min(p.per_gpu) if PENDING not in p.per_gpu else 1 << 30,
                p.name,
                p.namespace,
            )
        )
    return [out[name] for name in sorted(out)]


def _dra_node(name: str, raw: dict[str, Any], gpus: list[DraGpu]) -> GpuNode:
    """A node whose GPUs only the DRA driver publishes: MiB, 100% compute per GPU."""
    internal, first = _addresses(raw)
    count = max(g.index for g in gpus) + 1
    info = GpuNode(name, internal, first, count, 0, compute_total=100 * count)
    for gpu in gpus:
        info.devices[gpu.index] = Device(gpu.index, gpu.memory >> 20, compute_total=100)
    info.total = sum(d.total for d in info.devices.values())
    return info


def _add_dra(out: dict[str, GpuNode], nodes: list[dict[str, Any]], dra: Sequence[DraGpu]) -> None:
    """Place each DRA claim on its GPU, in its node's unit (rounded up)."""
    raw = {(n.get("metadata") or {}).get("name", ""): n for n in nodes}
    by_node: dict[str, list[DraGpu]] = {}
    for gpu in dra:
        by_node.setdefault(gpu.node, []).append(gpu)
    for name, gpus in by_node.items():
        info = out.get(name)
        if info is None:
            info = out[name] = _dra_node(name, raw.get(name, {}), gpus)
        unit = 1 << 20 if info.unit == "MiB" else 1 << 30
        rows = {(p.namespace, p.name): p for p in info.pods}  # one row per pod
        for gpu in gpus:
            device = info.devices.get(gpu.index)
            if device is None:  # a GPU the DRA driver owns beside the device plugin's
                device = info.devices[gpu.index] = Device(gpu.index, gpu.memory // unit)
                device.compute_total = 100
                info.gpu_count = max(info.gpu_count, gpu.index + 1)
                info.total += device.total
                info.compute_total += device.compute_total
            for claim in gpu.claims:
                units = -(-claim.memory // unit)
                share = rows.get((claim.namespace, claim.name)) if claim.is_pod else None
                if share is None:
                    share = PodShare(claim.name, claim.namespace, {}, {})
                    info.pods.append(share)
                    if claim.is_pod:
                        rows[(claim.namespace, claim.name)] = share
                share.per_gpu[gpu.index] = share.per_gpu.get(gpu.index, 0) + units
                share.compute[gpu.index] = share.compute.get(gpu.index, 0) + claim.compute
                if not any(p is share for p in device.pods):
                    device.pods.append(share)
                device.used += units
                device.compute_used += claim.compute
