"""The pending pods on this node, as the API server lists them, and the annotations put on them.

The one place the allocation policies read pods from: each listing is parsed for the resource
asked, and the raw JSON is kept so the containers of a listed pod can be read again for another
resource (a container asking for both memory and compute) without a second call.
"""

from __future__ import annotations

import logging
from typing import Any

from cgpu.deviceplugin.kube.client import KubeClient
from cgpu.deviceplugin.kube.pods import ContainerRequest, PodInfo, parse_pod

log = logging.getLogger(__name__)


class PodLookup:
    """Pending pods of one node; not thread-safe (the policies call it under their lock)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._raw: dict[str, dict[str, Any]] = {}

    @property
    def node_name(self) -> str:
        return self.client.node_name

    def pending(self, resource: str) -> list[PodInfo]:
        """The pending pods on this node, read for `resource`; raises KubeError."""
        raw = self.client.pending_pods()
        self._raw = {str((p.get("metadata") or {}).get("uid", "")): p for p in raw}
        pods = [parse_pod(p, resource) for p in raw]
        for pod in pods:
            for problem in pod.problems:
                log.warning("pod %s/%s skipped: %s", pod.namespace, pod.name, problem)
        return pods

    def requests(self, pod_uid: str, resource: str | None) -> list[ContainerRequest]:
        """The containers of a pod (as last listed) that ask for `resource`."""
        pod_json = self._raw.get(pod_uid)
        if pod_json is None or not resource:
            return []
        return parse_pod(pod_json, resource).requesting()

    def annotate(self, pod: PodInfo, annotations: dict[str, str]) -> None:
        """Merge `annotations` into the pod's; raises KubeError."""
        self.client.annotate_pod(pod.namespace, pod.name, annotations)
