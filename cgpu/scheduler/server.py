"""The extender's HTTP server: gpushare's paths, /healthz and /metrics."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .handlers import BadRequest, Handlers, NotSynced
from .metrics import Metrics
from .state import ClusterState

log = logging.getLogger(__name__)
PREFIX = "/gpushare-scheduler"
MAX_BODY = 256 << 20  # a NodeList of 5,000 full node objects fits well within this
VERBS = {f"{PREFIX}/{verb}": verb for verb in ("filter", "prioritize", "bind")}


class _HttpServer(ThreadingHTTPServer):
    request_queue_size = 256  # kube-scheduler sends many requests at once
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not block stop()


class ExtenderServer:
    """Serve the extender on (address, port); port 0 picks a free one."""

    def __init__(
        self,
        address: str,
        port: int,
        handlers: Handlers,
        state: ClusterState,
        metrics: Metrics,
        healthy: Any = lambda: True,
    ) -> None:
        self.handlers = handlers
        self.state = state
        self.metrics = metrics
        self.healthy = healthy
        self.httpd = _HttpServer((address, port), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _refresh_gauges(self) -> None:
        self.metrics.nodes.set(sum(1 for n in self.state.nodes.values() if n.known))
        self.metrics.pods.set(len(self.state.pods))
        self.metrics.assumed.set(self.state.assumed_count())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go in two writes

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("%s " + fmt, self.address_string(), *args)

            def _send(self, code: int, data: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _json(self, code: int, body: Any) -> None:
                self._send(code, json.dumps(body).encode(), "application/json")

            def do_GET(self) -> None:
                path = urlparse(self.path).path.rstrip("/")
                if path == "/healthz":
                    ok = bool(server.healthy())
                    code, text = (200, b"ok") if ok else (503, b"not synced")
                    return self._send(code, text, "text/plain")
                if path == "/metrics":
                    server._refresh_gauges()
                    data = generate_latest(server.metrics.registry)
                    return self._send(200, data, CONTENT_TYPE_LATEST)
                if path == f"{PREFIX}/inspect":
                    return self._json(200, server.state.inspect())
                if path.startswith(f"{PREFIX}/inspect/"):
                    name = unquote(path[len(PREFIX) + len("/inspect/") :])
                    result = server.state.inspect(name)
                    if not result["nodes"]:
                        result["error"] = f"node {name} is not a GPU-sharing node"
                        return self._json(404, result)
                    return self._json(200, result)
                if path == "/version":
                    return self._send(200, b"cgpu", "text/plain")
                self._json(404, {"Error": f"no such path {path}"})

            def do_POST(self) -> None:
                path = urlparse(self.path).path.rstrip("/")
                verb = VERBS.get(path)
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if length < 0 or length > MAX_BODY:
                    self.close_connection = True
                    return self._json(400, {"Error": "missing or invalid Content-Length"})
                raw = self.rfile.read(length) if length else b""
                if verb is None:
                    return self._json(404, {"Error": f"no such path {path}"})
                started = time.perf_counter()
                try:
                    code, body = self._answer(verb, raw)
                finally:
                    server.metrics.latency.labels(verb).observe(time.perf_counter() - started)
                self._json(code, body)

            def _answer(self, verb: str, raw: bytes) -> tuple[int, Any]:
                try:
                    args = json.loads(raw) if raw else None
                except (ValueError, UnicodeDecodeError) as err:
                    server.metrics.bad_requests.labels(verb).inc()
                    if verb == "bind":
                        server.metrics.bind_failures.labels("bad_request").inc()
                    code = 400 if verb == "prioritize" else 200  # kube-scheduler logs Error
                    return code, _error_body(verb, f"malformed JSON body: {err}")
                try:
                    if verb == "filter":
                        return 200, server.handlers.filter(args)
                    if verb == "prioritize":
                        return 200, server.handlers.prioritize(args)
                    return 200, server.handlers.bind(args)
                except BadRequest as err:
                    return 400, _error_body(verb, str(err))
                except NotSynced as err:
                    return 503, _error_body(verb, str(err))
                except Exception as err:  # a bug must not take the server down
                    log.exception("%s failed", verb)
                    return 500, _error_body(verb, f"internal error: {err}")

        return Handler


def _error_body(verb: str, message: str) -> Any:
    if verb == "filter":
        return {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": message,
        }
    return {"Error": message}
