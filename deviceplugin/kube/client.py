"""The thin API-server layer: pending pods on this node, pod annotations, node status.

Uses the official `kubernetes` client with in-cluster config or a kubeconfig. Every call
has a short timeout; callers treat a failure as "no pod information" (standalone).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class KubeError(Exception):
    """The API server could not be reached or refused a call."""


class KubeClient:
    """Calls the plugin makes to the API server, for one node."""

    def __init__(self, api_client: Any, node_name: str, timeout: float = 5.0) -> None:
        from kubernetes import client

        self.node_name = node_name
        self.timeout = timeout
        self._core = client.CoreV1Api(api_client)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, _request_timeout=self.timeout, **kwargs)
        except ApiException as err:
            raise KubeError(f"{what}: HTTP {err.status} {err.reason}") from err
        except Exception as err:  # urllib3 and socket errors: unreachable
            raise KubeError(f"{what}: {err}") from err

    def pending_pods(self) -> list[dict[str, Any]]:
        """Raw JSON of the pods bound to this node that are still Pending."""
        response = self._call(
            "list pods",
            self._core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={self.node_name},status.phase=Pending",
            _preload_content=False,
        )
        try:
            return list(json.loads(response.data).get("items") or [])
        except ValueError as err:
            raise KubeError(f"list pods: malformed response: {err}") from err

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
    """A client from in-cluster config or a kubeconfig file, or None (standalone).

    The kubeconfig is the option, else $KUBECONFIG. With neither, and outside a pod, the
    plugin runs standalone.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG")
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not path and not in_cluster:
        return None
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if path:
            config.load_kube_config(config_file=str(Path(path)), client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except Exception as err:  # the loaders raise several unrelated types
        log.warning("no usable API-server configuration (%s); running standalone", err)
        return None
    configuration.retries = 0
    return KubeClient(client.ApiClient(configuration), node, timeout)
