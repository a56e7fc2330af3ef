"""The thin API-server layer for `resource.k8s.io/v1`: ResourceClaims and ResourceSlices.

Uses the official `kubernetes` client (in-cluster config, else --kubeconfig or $KUBECONFIG)
and exchanges plain JSON, so fields newer than the client's models survive a round trip.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from cgpu.dra.names import DRIVER

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class KubeError(Exception):
    """The API server could not be reached or refused a call; `status` is its HTTP status."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ResourceApi:
    """The calls the driver makes, for one node."""

    def __init__(self, api_client: Any, node: str, timeout: float = 10.0) -> None:
        from kubernetes import client

        self.node = node
        self.timeout = timeout
        self._api = client.ResourceV1Api(api_client)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Obj:
        from kubernetes.client.exceptions import ApiException

        try:
            response = fn(*args, _request_timeout=self.timeout, _preload_content=False, **kwargs)
            return json.loads(response.data or b"{}")
        except ApiException as err:
            raise KubeError(f"{what}: HTTP {err.status} {err.reason}", err.status) from err
        except ValueError as err:
            raise KubeError(f"{what}: malformed response: {err}") from err
        except Exception as err:  # urllib3 and socket errors: unreachable
            raise KubeError(f"{what}: {err}") from err

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
            field_selector=f"spec.driver={DRIVER},spec.nodeName={self.node}",
        )
        items = listing.get("items") or []
        return [s for s in items if _owned(s, self.node)]

    def create_slice(self, body: Obj) -> Obj:
        """Create a ResourceSlice."""
        return self._call("create resourceslice", self._api.create_resource_slice, body)

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
    return spec.get("driver") == DRIVER and spec.get("nodeName") == node


def connect(kubeconfig: str | None, node: str) -> ResourceApi:
    """A client from --kubeconfig, $KUBECONFIG or in-cluster config; KubeError without one.

    A DRA driver cannot work standalone: the claims and the slices live in the API server.
    """
    from kubernetes import client, config

    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = client.Configuration()
    try:
        if path:
            config.load_kube_config(config_file=path, client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except Exception as err:  # the loaders raise several unrelated types
        raise KubeError(
            f"no API-server configuration ({err}): run in-cluster, or pass --kubeconfig"
        ) from err
    configuration.retries = 0
    return ResourceApi(client.ApiClient(configuration), node)
