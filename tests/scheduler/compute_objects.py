"""Nodes and pods with the compute share, and one scheduling cycle through the extender."""

from __future__ import annotations

from typing import Any

from kube.objects import gpu_node, gpu_pod
from sched_peer import SchedulerPeer

CORE = "aliyun.com/gpu-core.percentage"


def compute_node(name: str, gpus: int, units_per_gpu: int, **kw: Any) -> dict[str, Any]:
    """A node whose device plugin also advertises the compute resource (100 per GPU)."""
    node = gpu_node(name, gpus, units_per_gpu, **kw)
    for section in ("capacity", "allocatable"):
        node["status"][section][CORE] = str(100 * gpus)
    return node


def compute_pod(
    name: str, units: int | list[int], percent: int | list[int], **kw: Any
) -> dict[str, Any]:
    """A pod whose containers ask for memory `units` and `percent` compute (per container)."""
    pod = gpu_pod(name, units, **kw)
    percents = percent if isinstance(percent, list) else [percent]
    for container, share in zip(pod["spec"]["containers"], percents, strict=True):
        if share:
            container.setdefault("resources", {}).setdefault("limits", {})[CORE] = str(share)
    return pod


def schedule(peer: SchedulerPeer, name: str, namespace: str = "default") -> str | None:
    """One cycle as kube-scheduler runs it for a pod with a managed resource: the node bound."""
    pod = peer.api.get("pods", name, namespace)
    result = peer.filter(pod, peer.node_names())
    passed = result["NodeNames"] or []
    if result["Error"] or not passed:
        return None
    scores = peer.prioritize(pod, passed)
    best = max(passed, key=lambda n: (scores[n], n))
    return None if peer.bind(pod, best) else best
