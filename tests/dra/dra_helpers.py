"""Names and small helpers the DRA tests share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kube.apiserver import FakeApiServer

NODE = "gpu-node-1"
UUIDS = [
    "GPU-d7a00000-0000-4000-8000-000000000000",
    "GPU-d7a00000-0000-4000-8000-000000000001",
]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll `check` until it returns something true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def own_slices(api: FakeApiServer, node: str = NODE) -> list[dict[str, Any]]:
    """The driver's ResourceSlices for the node, as stored."""
    return [
        s
        for s in api.objects("resourceslices")
        if s["spec"]["driver"] == "gpu.cgpu.io" and s["spec"].get("nodeName") == node
    ]


def claim_body(
    name: str, memory: str | None = "4Gi", compute: str | None = None, count: int = 1
) -> dict[str, Any]:
    """A ResourceClaim asking for a slice of one GPU of class gpu.cgpu.io."""
    requests = {k: v for k, v in (("memory", memory), ("compute", compute)) if v is not None}
    exactly: dict[str, Any] = {"deviceClassName": "gpu.cgpu.io", "count": count}
    if requests:
        exactly["capacity"] = {"requests": requests}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
