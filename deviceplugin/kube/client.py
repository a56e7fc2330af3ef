"""The thin API-server layer: pending pods on this node, pod annotations, node status.

Reaches the API server through cgpu.core.kube (one precedence of configuration sources, one
error type, retried calls). Every call has a short timeout; callers treat a failure as "no
pod information" (standalone).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from cgpu.core import kube
from cgpu.core.kube import KubeConfigError, KubeError

__all__ = ["KubeClient", "KubeError", "connect", "node_name"]

log = logging.getLogger(__name__)


class KubeClient:
    """Calls the plugin makes to the API server, for one node."""

    def __init__(self, api_client: Any, node_name: str, timeout: float = 5.0) -> None:
        from kubernetes import client

        self.node_name = node_name
        self.timeout = timeout
        self._core = client.CoreV1Api(api_client)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return kube.call_json(what, fn, *args, timeout=self.timeout, **kwargs)

    def pending_pods(self) -> list[dict[str, Any]]:
        """Raw JSON of the pods bound to this node that are still Pending."""
        listing = self._call(
            "list pods",
            self._core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={self.node_name},status.phase=Pending",
        )
        items = listing.get("items") or []
        if not isinstance(items, list):
            raise KubeError("list pods: malformed response: items is not a list")
        return list(items)

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge `annotations` into a pod's annotations."""
        body = {"metadata": {"annotations": annotations}}
        self._call(
            f"patch pod {namespace}/{name}", self._core.patch_namespaced_pod, name, namespace, body
        )

    def patch_node_status(self, body: dict[str, Any]) -> None:
        """Merge `body` into this node through its status subresource (nodes/status patch).

        Besides status, the body may carry metadata.annotations (None removes one), as
        Volcano's device plugin patches its node.
        """
        self._call(
            f"patch node {self.node_name} status",
            self._core.patch_node_status,
            self.node_name,
            body,
        )


def node_name(explicit: str | None) -> str:
    """This node's name: the option, else $NODE_NAME (downward API), else the host name."""
    return explicit or os.environ.get("NODE_NAME") or os.uname().nodename


def connect(kubeconfig: str | None, node: str, timeout: float = 5.0) -> KubeClient | None:
    """A client from the first configuration source present (cgpu.core.kube.load_config:
    --kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config), or None: the plugin runs
    standalone when there is none, or when the one present does not load (with a warning).
    """
    from kubernetes import client

    try:
        configuration = kube.load_config(kubeconfig)
    except KubeConfigError as err:
        (log.warning if err.found else log.info)("%s; running standalone", err)
        return None
    return KubeClient(client.ApiClient(configuration), node, timeout)
