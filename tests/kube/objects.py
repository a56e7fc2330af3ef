"""Builders for the pod and node JSON the tests put into the fake API server."""

from __future__ import annotations

from typing import Any

MEM = "aliyun.com/gpu-mem"
COUNT = "aliyun.com/gpu-count"


def gpu_node(
    name: str, gpus: int, units_per_gpu: int, ip: str = "10.0.0.1", labels: dict | None = None
) -> dict[str, Any]:
    """A node advertising `gpus` GPUs of `units_per_gpu` units (as the device plugin does)."""
    resources = {MEM: str(gpus * units_per_gpu), COUNT: str(gpus), "cpu": "8"}
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def gpu_pod(
    name: str,
    units: int | list[int],
    namespace: str = "default",
    gpu_count: int | None = None,
    node: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    """A pod whose containers ask for `units` of aliyun.com/gpu-mem (one int per container)."""
    per_container = units if isinstance(units, list) else [units]
    containers = [
        {
            "name": f"c{i}",
            "image": "example/app",
            "resources": {"limits": {MEM: str(n)}} if n else {},
        }
        for i, n in enumerate(per_container)
    ]
    all_labels = dict(labels or {})
    if gpu_count is not None:
        all_labels[COUNT] = str(gpu_count)
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": all_labels,
            "annotations": dict(annotations or {}),
        },
        "spec": {"containers": containers, "schedulerName": "default-scheduler"},
        "status": {"phase": phase},
    }
    if node:
        pod["spec"]["nodeName"] = node
    return pod
