"""The thin API-server layer for `resource.k8s.io/v1`: ResourceClaims and ResourceSlices.

Reaches the API server through cgpu.core.kube (one precedence of configuration sources, one
error type, retried calls) and exchanges plain JSON, so fields newer than the client's models
survive a round trip.
"""

from __future__ import annotations

import logging
from typing import Any

from cgpu.core import kube
from cgpu.core.kube import KubeConfigError, KubeError
from cgpu.core.layout import DRA_DRIVER

__all__ = ["KubeError", "ResourceApi", "connect"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class ResourceApi:
    """The calls the driver makes, for one node."""

    def __init__(self, api_client: Any, node: str, timeout: float = 10.0) -> None:
        from kubernetes import client

        self.node = node
        self.timeout = timeout
        self._api = client.ResourceV1Api(api_client)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Obj:
        return kube.call_json(what, fn, *args, timeout=self.timeout, **kwargs)

    def get_claim(self, namespace: str, name: str) -> Obj:
        """One ResourceClaim, with its status."""
        return self._call(
            f"get resourceclaim {namespace}/{name}",
            self._api.read_namespaced_resource_claim,
            name,
            namespace,
        )

    def own_slices(self) -> list[Obj]:
        """This driver's ResourceSlices for this node (and only those)."""
        listing = self._call(
            "list resourceslices",
            self._api.list_resource_slice,
            field_selector=f"spec.driver={DRA_DRIVER},spec.nodeName={self.node}",
        )
        items = listing.get("items") or []
        return [s for s in items if _owned(s, self.node)]

    def create_slice(self, body: Obj) -> Obj:
        """Create a ResourceSlice."""
        return self._call(
            "create resourceslice", self._api.create_resource_slice, body, idempotent=False
        )

    def replace_slice(self, body: Obj) -> Obj:
        """Replace a ResourceSlice (body carries the resourceVersion it replaces)."""
        name = body["metadata"]["name"]
        return self._call(
            f"replace resourceslice {name}", self._api.replace_resource_slice, name, body
        )

    def delete_slice(self, name: str) -> None:
        """Delete a ResourceSlice; one already gone is not an error."""
        try:
            self._call(f"delete resourceslice {name}", self._api.delete_resource_slice, name)
        except KubeError as err:
            if err.status != 404:
                raise


def _owned(obj: Obj, node: str) -> bool:
    spec = obj.get("spec") or {}
    return spec.get("driver") == DRA_DRIVER and spec.get("nodeName") == node


def connect(kubeconfig: str | None, node: str) -> ResourceApi:
    """A client from the first configuration source present (cgpu.core.kube.load_config:
    --kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config); KubeError without one.

    A DRA driver cannot work standalone: the claims and the slices live in the API server.
    """
    from kubernetes import client

    try:
        configuration = kube.load_config(kubeconfig)
    except KubeConfigError as err:
        raise KubeConfigError(
            f"{err}: run in-cluster, or pass --kubeconfig", found=err.found
        ) from err
    return ResourceApi(client.ApiClient(configuration), node)
