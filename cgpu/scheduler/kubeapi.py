"""The API-server calls the extender makes, through the official `kubernetes` client.

Responses are read as raw JSON (`_preload_content=False`): it is much faster than building
client models for tens of thousands of pods, and it keeps every field the server sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

WATCH_SECONDS = 300
LIST_PAGE = 500


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status, 0 when the server was not reached."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def load_configuration(kubeconfig: str | None) -> client.Configuration:
    """`kubeconfig` when given (an explicit flag is never ignored, even in a pod), else the
    in-cluster config, else $KUBECONFIG, else ~/.kube/config."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        config.load_incluster_config(client_configuration=configuration)
    else:
        path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube/config")
        config.load_kube_config(config_file=path, client_configuration=configuration)
    configuration.retries = 0
    return configuration


def _message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body or "{}").get("message") or err.reason)
    except (ValueError, AttributeError):
        return str(err.reason)


class KubeApi:
    """Pods and nodes: list, watch, get, patch, bind."""

    def __init__(self, configuration: client.Configuration, timeout: float = 10.0) -> None:
        self.api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api_client)
        self.timeout = timeout

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.timeout)
        try:
            return fn(*args, _preload_content=False, **kwargs)
        except ApiException as err:
            raise KubeError(f"{what}: HTTP {err.status}: {_message(err)}", err.status) from err
        except Exception as err:  # urllib3 and socket errors: not reached
            raise KubeError(f"{what}: {err}") from err

    def _json(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        response = self._call(what, fn, *args, **kwargs)
        try:
            return json.loads(response.data)
        except ValueError as err:
            raise KubeError(f"{what}: malformed response: {err}") from err

    def list(self, resource: str, page: int = LIST_PAGE) -> ListResult:
        """The full list of `pods` or `nodes`, read in pages as client-go's reflector does."""
        return ListResult(self, resource, page)

    def watch(self, resource: str, since: str) -> tuple[Any, Iterator[dict[str, Any]]]:
        """Open a watch from resourceVersion `since`: (response to close, events)."""
        fn = self.core.list_pod_for_all_namespaces if resource == "pods" else self.core.list_node
        response = self._call(
            f"watch {resource}",
            fn,
            watch=True,
            resource_version=since,
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
            _request_timeout=(self.timeout, WATCH_SECONDS + 30),
        )
        return response, _events(response)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"get pod {namespace}/{name}"
        return self._json(what, self.core.read_namespaced_pod, name, namespace)

    def patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch a pod (a metadata.resourceVersion in `body` makes it conditional)."""
        return self._json(
            f"patch pod {namespace}/{name}",
            self.core.patch_namespaced_pod,
            name,
            namespace,
            body,
            _content_type="application/merge-patch+json",
        )

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's Binding to `node`."""
        body = client.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        self._call(
            f"bind pod {namespace}/{name} to {node}",
            self.core.create_namespaced_pod_binding,
            name,
            namespace,
            body,
        )


class ListResult:
    """Items of a paginated list; `resource_version` is the list's, known once iterated."""

    def __init__(self, api: KubeApi, resource: str, page: int) -> None:
        self.api = api
        self.resource = resource
        self.page = page
        self.resource_version = ""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        core = self.api.core
        fn = core.list_pod_for_all_namespaces if self.resource == "pods" else core.list_node
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page}
            if token:
                kwargs["_continue"] = token
            body = self.api._json(f"list {self.resource}", fn, **kwargs)
            meta = body.get("metadata") or {}
            if not self.resource_version:
                self.resource_version = str(meta.get("resourceVersion") or "")
            items = body.get("items") or []
            del body
            yield from items
            token = meta.get("continue")
            if not token:
                return


def _events(response: Any) -> Iterator[dict[str, Any]]:
    """Watch events from a streaming response, one JSON object per line."""
    buffer = b""
    for chunk in response.stream(65536, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)
