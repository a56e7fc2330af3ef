"""A small threaded HTTP server: `/metrics` (and `/`) from a registry, `/healthz` for probes."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are frequent; do not log each one."""


def build_app(registry: CollectorRegistry) -> WsgiApp:
    """The WSGI app: metrics on every path but /healthz."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        return metrics(environ, start_response)

    return app


class MetricsServer:
    """Serves `registry` on (address, port) from a background thread."""

    def __init__(self, registry: CollectorRegistry, address: str, port: int) -> None:
        server_class = _Server6 if ":" in address else _Server
        self._httpd = make_server(
            address,
            port,
            build_app(registry),
            server_class=server_class,
            handler_class=_QuietHandler,
        )
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="cgpu-exporter-http")
        self._thread.daemon = True

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        """Start serving in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
