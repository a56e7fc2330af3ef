"""A local HTTP server that answers as the Kubernetes API server does, for pods and nodes, and
for `resource.k8s.io/v1` DeviceClasses, ResourceSlices, ResourceClaims (with `/status`) and
ResourceClaimTemplates.

Grown from tests/deviceplugin/dp_apiserver.py. It serves, over real HTTP/1.1 on 127.0.0.1:
- list (with `limit`/`continue` pages of one snapshot) and watch (`watch=true`, chunked JSON
  lines) of pods (all or one namespace) and nodes, with `resourceVersion` (410 Gone for one older
  than the kept history), `timeoutSeconds`, `fieldSelector` and `labelSelector`;
- GET, POST (create), PUT, PATCH (merge, strategic merge, JSON patch) and DELETE of single pods and
  nodes, and of their `/status`; `pods/<name>/binding`, which sets spec.nodeName once;
- a resourceVersion on every object and 409 Conflict when a write's resourceVersion is stale;
- GET through a pod's proxy (`pods/<name>:<port>/proxy/<path>`) to its `status.podIP`.
Every PATCH is recorded (`patches`: path, Content-Type, body). A `/status` write keeps the
stored spec, as the real status strategies do (metadata such as annotations may change).
The official `kubernetes` client drives it. Tests may add `hooks` (called before each request) and
`faults` (canned error replies) to act out races and failures.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from .patches import PatchError, apply_patch
from .selectors import SelectorError, field_matcher, label_matcher
from .store import KINDS, RESOURCES, AlreadyExists, Conflict, NotFound, Obj, Store, Watcher

ROUTE = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[a-z0-9.-]+/v1))(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<res>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status|binding))?/?$"
)
# GET /api/v1/namespaces/<ns>/pods/<name>[:<port>]/proxy/<path>: forwarded, as the real API
# server forwards it, to http://<the pod's status.podIP>:<port>/<path>.
PROXY = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/proxy(?P<rest>/.*)?$")
REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
}
Hook = Callable[[str, str], None]


def status_body(code: int, message: str, reason: str | None = None) -> Obj:
    """A metav1.Status failure body."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }


@dataclass
class Fault:
    """Answer `times` requests whose method matches and whose path contains `path` with `code`."""

    method: str
    path: str
    code: int
    times: int = 1


class _HttpServer(ThreadingHTTPServer):
    request_queue_size = 256
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not block close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-reply is normal here; anything else is reported."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class FakeApiServer:
    """Pods and nodes in memory, served over HTTP on 127.0.0.1."""

    def __init__(self, history: int = 10_000) -> None:
        self.store = Store(history)
        self.requests: list[tuple[str, str]] = []
        self.hooks: list[Hook] = []
        self.faults: list[Fault] = []
        self.bindings_swallowed = False  # reply 201 to bindings but do not bind (a lost write)
        self.continues: dict[str, tuple[list[Obj], int]] = {}  # paginated list snapshots
        self.patches: list[Obj] = []  # every PATCH: {"path", "content_type", "body"}
        self._lock = threading.Lock()
        self.httpd = _HttpServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    # --- test-side helpers -------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig pointing at this server."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": "test-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "test"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    def create(self, resource: str, obj: Obj) -> Obj:
        """Create a pod or node directly (watchers see ADDED)."""
        return self.store.create(resource, obj)

    def load_list(self, resource: str, listing: Obj) -> None:
        """Create every item of a recorded list response (`kubectl get pods -o json`)."""
        for item in listing["items"]:
            self.create(resource, item)

    def update(
        self, resource: str, name: str, change: Callable[[Obj], Obj], namespace: str = ""
    ) -> Obj:
        """Replace an object by `change(copy)` directly, as another client's write would."""
        return self.store.update(resource, (_namespace(resource, namespace), name), change)

    def recorded_patches(self, path_part: str = "") -> list[Obj]:
        """The PATCH requests so far whose path contains `path_part`, oldest first."""
        with self._lock:
            return [p for p in self.patches if path_part in p["path"]]

    def get(self, resource: str, name: str, namespace: str = "") -> Obj:
        """The stored object; namespaced ones default to namespace `default`."""
        return self.store.get(resource, (_namespace(resource, namespace), name))

    def pods(self) -> list[Obj]:
        """Every stored pod."""
        return self.store.snapshot("pods")[0]

    def set_phase(self, name: str, phase: str, namespace: str = "default") -> Obj:
        """Move a pod to `phase` (as the kubelet does through pods/status)."""

        def change(pod: Obj) -> Obj:
            pod.setdefault("status", {})["phase"] = phase
            return pod

        return self.store.update("pods", (namespace, name), change)

    def delete(self, resource: str, name: str, namespace: str = "") -> Obj:
        """Delete an object (watchers see DELETED)."""
        return self.store.delete(resource, (_namespace(resource, namespace), name))

    def objects(self, resource: str) -> list[Obj]:
        """Every stored object of a resource."""
        return self.store.snapshot(resource)[0]

    def fault(self, method: str, path: str, code: int, times: int = 1) -> None:
        """Make the next `times` matching requests fail with `code`."""
        with self._lock:
            self.faults.append(Fault(method, path, code, times))

    def close(self) -> None:
        """End watches and stop serving."""
        self.store.close_watches()
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- request handling ---------------------------------------------------------------
    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.method == method and fault.path in path and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go in two writes

            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: Obj) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _fail(self, code: int, message: str, reason: str | None = None) -> None:
                self._reply(code, status_body(code, message, reason))

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                return json.loads(raw) if raw else None

            def _dispatch(self, method: str) -> None:
                url = urlparse(self.path)
                with api._lock:
                    api.requests.append((method, url.path))
                for hook in list(api.hooks):
                    hook(method, url.path)
                fault = api._take_fault(method, url.path)
                if fault is not None:
                    if method in ("POST", "PUT", "PATCH"):
                        self._body()
                    return self._fail(fault.code, f"injected failure {fault.code}")
                proxied = PROXY.match(url.path)
                if proxied and method == "GET":
                    return self._proxy(proxied)
                route = ROUTE.match(url.path)
                if not route:
                    return self._fail(404, f"the server could not find {url.path}")
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                try:
                    Routes(api, self, route, query).serve(method)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                except json.JSONDecodeError as err:
                    self._fail(400, f"malformed JSON body: {err}")
                except SelectorError as err:
                    self._fail(400, str(err))
                except PatchError as err:
                    self._fail(422, str(err))
                except NotFound as err:
                    self._fail(404, str(err))
                except AlreadyExists as err:
                    self._fail(409, str(err), "AlreadyExists")
                except Conflict as err:
                    self._fail(409, str(err))

            def _proxy(self, route: re.Match[str]) -> None:
                """Forward a GET to the pod's IP and port; 503 when it does not answer."""
                name, _, port = unquote(route["name"]).partition(":")
                try:
                    pod = api.store.get("pods", (route["ns"], name))
                except NotFound as err:
                    return self._fail(404, str(err))
                ip = (pod.get("status") or {}).get("podIP", "")
                target = f"http://{ip}:{port or 80}{route['rest'] or '/'}"
                try:
                    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                    with opener.open(target, timeout=5) as upstream:
                        code, body = upstream.status, upstream.read()
                        kind = upstream.headers.get("Content-Type", "text/plain")
                except urllib.error.HTTPError as err:
                    code, body, kind = err.code, err.read(), "text/plain"
                except OSError as err:
                    return self._fail(503, f"error trying to reach service: {err}")
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def do_PUT(self) -> None:
                self._dispatch("PUT")

            def do_PATCH(self) -> None:
                self._dispatch("PATCH")

            def do_DELETE(self) -> None:
                self._dispatch("DELETE")

        return Handler


def _namespace(resource: str, namespace: str) -> str:
    """The namespace of a key: `default` when a namespaced resource names none."""
    return (namespace or "default") if RESOURCES[resource].namespaced else ""


class Routes:
    """One request against /api/v1/... or /apis/<group>/v1/...: <resource>[/name][/sub]."""

    def __init__(
        self, api: FakeApiServer, handler: Any, route: re.Match[str], query: dict[str, str]
    ) -> None:
        self.api = api
        self.h = handler
        self.ns = route["ns"]
        self.resource = route["res"]
        self.name = route["name"]
        self.sub = route["sub"]
        self.query = query
        served = RESOURCES.get(self.resource)
        version = "v1" if route["core"] else route["group"]
        if served is None or served.api_version != version:
            raise NotFound(f"the server could not find the requested resource ({route[0]})")
        if not served.namespaced and self.ns is not None:
            raise NotFound(f"{self.resource} are not namespaced")

    @property
    def key(self) -> tuple[str, str]:
        return (self.ns or "", self.name)

    def serve(self, method: str) -> None:
        if self.name is None:
            if method == "GET":
                return self._watch() if self.query.get("watch") in ("true", "1") else self._list()
            if method == "POST":
                return self._create()
            return self.h._fail(405, f"{method} on a collection is not supported")
        if self.sub == "binding":
            if method != "POST" or self.resource != "pods":
                return self.h._fail(405, "binding takes POST on pods")
            return self._bind()
        if method == "GET":
            return self.h._reply(200, self.api.store.get(self.resource, self.key))
        if method == "PATCH":
            return self._patch()
        if method == "PUT":
            return self._put()
        if method == "DELETE":
            return self.h._reply(200, self.api.store.delete(self.resource, self.key))
        return self.h._fail(405, f"{method} is not supported")

    def _matcher(self) -> Callable[[Obj], bool]:
        by_field = field_matcher(self.query.get("fieldSelector", ""))
        by_label = label_matcher(self.query.get("labelSelector", ""))
        return lambda obj: by_field(obj) and by_label(obj)

    def _list(self) -> None:
        """A list; with `limit`, one page of a consistent snapshot and a `continue` token."""
        token = self.query.get("continue", "")
        if token:
            with self.api._lock:
                snapshot, rv = self.api.continues.pop(token, (None, 0))
            if snapshot is None:
                return self.h._fail(410, "the provided continue parameter is too old", "Expired")
        else:
            matches = self._matcher()
            objects, rv = self.api.store.snapshot(self.resource, self.ns)
            snapshot = [obj for obj in objects if matches(obj)]
        limit = int(self.query.get("limit") or 0)
        metadata: Obj = {"resourceVersion": str(rv)}
        items = snapshot
        if 0 < limit < len(snapshot):
            items, rest = snapshot[:limit], snapshot[limit:]
            token = uuid.uuid4().hex
            with self.api._lock:
                self.api.continues[token] = (rest, rv)
            metadata.update({"continue": token, "remainingItemCount": len(rest)})
        body = {
            "kind": f"{KINDS[self.resource]}List",
            "apiVersion": RESOURCES[self.resource].api_version,
            "metadata": metadata,
            "items": items,
        }
        self.h._reply(200, body)

    def _watch(self) -> None:
        raw_rv = self.query.get("resourceVersion", "")
        if raw_rv not in ("", "0") and not raw_rv.isdigit():
            return self.h._fail(400, f"invalid resourceVersion {raw_rv!r}")
        since = int(raw_rv) if raw_rv not in ("", "0") else None
        timeout = float(self.query.get("timeoutSeconds") or 1800)
        watcher = Watcher(self.resource, self.ns, self._matcher())
        self.h.send_response(200)
        self.h.send_header("Content-Type", "application/json")
        self.h.send_header("Transfer-Encoding", "chunked")
        self.h.end_headers()
        if not self.api.store.watch(watcher, since):
            gone = status_body(410, f"too old resource version: {since} ({self.api.store.rv})")
            self._chunk({"type": "ERROR", "object": gone})
            return self._end()
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    item = watcher.events.get(timeout=min(left, 1.0))
                except queue.Empty:
                    continue
                if item is None:
                    break
                self._chunk({"type": item[0], "object": item[1]})
        finally:
            self.api.store.unwatch(watcher)
        self._end()

    def _chunk(self, event: Obj) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.h.wfile.flush()

    def _end(self) -> None:
        self.h.wfile.write(b"0\r\n\r\n")
        self.h.wfile.flush()

    def _create(self) -> None:
        body = self.h._body()
        if not isinstance(body, dict):
            return self.h._fail(400, "body must be an object")
        if self.ns is not None:
            body.setdefault("metadata", {})["namespace"] = self.ns
        try:
            created = self.api.store.create(self.resource, body)
        except ValueError as err:
            return self.h._fail(422, str(err))
        self.h._reply(201, created)

    def _bind(self) -> None:
        body = self.h._body()
        target = (body or {}).get("target") or {}
        node = target.get("name")
        if not node:
            return self.h._fail(400, "binding needs target.name")
        if self.api.bindings_swallowed:
            return self.h._reply(201, {"kind": "Status", "status": "Success", "code": 201})

        def change(pod: Obj) -> Obj:
            spec = pod.setdefault("spec", {})
            if spec.get("nodeName"):
                raise Conflict(
                    f'Operation cannot be fulfilled on pods/binding "{self.name}": '
                    f'pod {self.name} is already assigned to node "{spec["nodeName"]}"'
                )
            spec["nodeName"] = node
            return pod

        self.api.store.update("pods", self.key, change)
        self.h._reply(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

    def _patch(self) -> None:
        body = self.h._body()
        content_type = self.h.headers.get("Content-Type", "")
        with self.api._lock:
            record = {"path": urlparse(self.h.path).path, "content_type": content_type}
            self.api.patches.append({**record, "body": body})
        want_rv = None
        if isinstance(body, dict):
            want_rv = (body.get("metadata") or {}).get("resourceVersion")
        sub = self.sub

        def change(obj: Obj) -> Obj:
            patched = apply_patch(content_type, obj, body)
            if sub == "status":  # the status strategies keep the stored spec
                return {**patched, "spec": obj["spec"]} if "spec" in obj else patched
            return {**patched, "status": obj.get("status", {})} if "status" in obj else patched

        self.h._reply(200, self.api.store.update(self.resource, self.key, change, want_rv))

    def _put(self) -> None:
        body = self.h._body()
        if not isinstance(body, dict):
            return self.h._fail(400, "body must be an object")
        want_rv = (body.get("metadata") or {}).get("resourceVersion")
        if not want_rv:
            return self.h._fail(422, "metadata.resourceVersion must be specified for an update")
        sub = self.sub

        def change(obj: Obj) -> Obj:
            if sub == "status":
                return {**body, "spec": obj["spec"]} if "spec" in obj else body
            return {**body, "status": obj.get("status", {})}

        self.h._reply(200, self.api.store.update(self.resource, self.key, change, want_rv))
