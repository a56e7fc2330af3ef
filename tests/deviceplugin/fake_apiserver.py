"""A local HTTP server that answers like the Kubernetes API server, from recorded JSON.

It serves GET /api/v1/pods (honouring spec.nodeName and status.phase field selectors),
PATCH of a pod (merging annotations) and PATCH of a node's status (merging capacity,
allocatable and annotations), and records each PATCH.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

DATA = Path(__file__).resolve().parent / "data"


def load(name: str) -> dict[str, Any]:
    """A recorded API-server response from tests/deviceplugin/data/."""
    return json.loads((DATA / name).read_text())


def _selected(pod: dict[str, Any], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, want = term.partition("=")
        if key == "spec.nodeName" and pod.get("spec", {}).get("nodeName") != want:
            return False
        if key == "status.phase" and pod.get("status", {}).get("phase") != want:
            return False
    return True


class FakeApiServer:
    """Pods and nodes in memory, served over HTTP on 127.0.0.1."""

    def __init__(self, pod_list: dict[str, Any], node: dict[str, Any]) -> None:
        self.pods: list[dict[str, Any]] = copy.deepcopy(pod_list["items"])
        self.pod_list_meta = {k: v for k, v in pod_list.items() if k != "items"}
        self.node = copy.deepcopy(node)
        self.patches: list[dict[str, Any]] = []
        self.lists = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig pointing at this server."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "plugin", "user": {"token": "test-token"}}],
                    "contexts": [
                        {"name": "fake", "context": {"cluster": "fake", "user": "plugin"}}
                    ],
                    "current-context": "fake",
                }
            )
        )
        return path

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        """The stored pod (with any patches applied)."""
        with self.lock:
            return next(
                p
                for p in self.pods
                if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == name
            )

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _not_found(self) -> None:
                self._reply(
                    404,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": "NotFound",
                        "code": 404,
                    },
                )

            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path != "/api/v1/pods":
                    return self._not_found()
                selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                with api.lock:
                    api.lists += 1
                    items = [copy.deepcopy(p) for p in api.pods if _selected(p, selector)]
                self._reply(200, {**api.pod_list_meta, "items": items})

            def do_PATCH(self) -> None:
                url = urlparse(self.path)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                parts = url.path.strip("/").split("/")
                record = {
                    "path": url.path,
                    "content_type": self.headers["Content-Type"],
                    "body": body,
                }
                with api.lock:
                    api.patches.append(record)
                if len(parts) == 6 and parts[2] == "namespaces" and parts[4] == "pods":
                    try:
                        pod = api.pod(parts[3], parts[5])
                    except StopIteration:
                        return self._not_found()
                    with api.lock:
                        notes = pod["metadata"].setdefault("annotations", {})
                        notes.update(body.get("metadata", {}).get("annotations", {}))
                        reply = copy.deepcopy(pod)
                    return self._reply(200, reply)
                if len(parts) == 5 and parts[2] == "nodes" and parts[4] == "status":
                    with api.lock:
                        status = api.node.setdefault("status", {})
                        for part in ("capacity", "allocatable"):
                            status.setdefault(part, {}).update(body.get("status", {}).get(part, {}))
                        notes = api.node["metadata"].setdefault("annotations", {})
                        for key, value in (
                            body.get("metadata", {}).get("annotations") or {}
                        ).items():
                            if value is None:  # strategic merge patch: null removes the key
                                notes.pop(key, None)
                            else:
                                notes[key] = value
                        reply = copy.deepcopy(api.node)
                    return self._reply(200, reply)
                return self._not_found()

        return Handler
