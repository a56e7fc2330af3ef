"""The API-server calls the extender makes, through the official `kubernetes` client.

Calls go through cgpu.core.kube (one precedence of configuration sources, one error type,
retried calls). Responses are read as raw JSON (`_preload_content=False`): it is much faster
than building client models for tens of thousands of pods, and it keeps every field the
server sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from cgpu.core import kube
from cgpu.core.kube import KubeError

from .pages import read_ahead

__all__ = ["KubeApi", "KubeError", "ListResult", "load_configuration"]

WATCH_SECONDS = 300
LIST_PAGE = 500


def load_configuration(kubeconfig: str | None) -> client.Configuration:
    """cgpu.core.kube.load_config: `kubeconfig` when given, else $KUBECONFIG, else in-cluster,
    else ~/.kube/config (KubeConfigError when none is present or the one present is bad)."""
    return kube.load_config(kubeconfig)


class KubeApi:
    """Pods and nodes: list, watch, get, patch, bind."""

    def __init__(self, configuration: client.Configuration, timeout: float = 10.0) -> None:
        self.api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api_client)
        self.timeout = timeout

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", self.timeout)
        return kube.call(what, fn, *args, **kwargs)

    def _json(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("timeout", self.timeout)
        return kube.call_json(what, fn, *args, **kwargs)

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
            timeout=(self.timeout, WATCH_SECONDS + 30),
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
            idempotent=False,
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
        what = f"list {self.resource}"

        def fetch(token: str | None) -> bytes:
            kwargs: dict[str, Any] = {"limit": self.page}
            if token:
                kwargs["_continue"] = token
            return self.api._call(what, fn, **kwargs).data

        for page in read_ahead(what, fetch):
            if not self.resource_version:
                self.resource_version = str(page.metadata.get("resourceVersion") or "")
            yield from page.items()


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
