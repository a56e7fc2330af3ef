"""The webhook's one API call: create a ResourceClaimTemplate (resource.k8s.io/v1)."""

from __future__ import annotations

from typing import Any

from cgpu.core import kube
from cgpu.core.kube import KubeError


class TemplateApi:
    """Creates templates through cgpu.core.kube (one configuration precedence, retries)."""

    def __init__(self, api_client: Any, timeout: float = 2.0) -> None:
        from kubernetes import client

        self.timeout = timeout
        self._api = client.ResourceV1Api(api_client)

    def create_template(self, namespace: str, body: dict[str, Any]) -> bool:
        """Create it; False when it already exists (409), KubeError for anything else."""
        name = body["metadata"]["name"]
        try:
            kube.call_json(
                f"create resourceclaimtemplate {namespace}/{name}",
                self._api.create_namespaced_resource_claim_template,
                namespace,
                body,
                timeout=self.timeout,
                idempotent=False,
            )
        except KubeError as err:
            if err.status == 409:
                return False
            raise
        return True


def connect(kubeconfig: str | None) -> TemplateApi:
    """A client from the first configuration source present (cgpu.core.kube.load_config)."""
    from kubernetes import client

    return TemplateApi(client.ApiClient(kube.load_config(kubeconfig)))
