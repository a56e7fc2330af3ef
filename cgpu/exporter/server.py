"""A small threaded HTTP server: `/metrics` (and `/`) from a registry, `/healthz` for probes.

Metrics are always served in the text format, version 0.0.4, which every Prometheus accepts
(whatever its Accept header prefers), written by `cgpu.exporter.exposition`; gzipped when the
client accepts gzip, as `prometheus_client` does. `?name[]=` selections, OPTIONS and other
methods are left to `prometheus_client`'s app.
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from cgpu.exporter.exposition import render

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# zlib's default: half the time of level 9 (prometheus_client's) for about 10% more bytes
# (1.4 against 2.8 ms for the 230 KB of 200 containers).
_GZIP_LEVEL = 6

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


def _gzip_accepted(environ: dict[str, Any]) -> bool:
    accepted = environ.get("HTTP_ACCEPT_ENCODING") or ""
    return "gzip" in [part.split(";")[0].strip().lower() for part in accepted.split(",")]


def build_app(registry: CollectorRegistry) -> WsgiApp:
    """The WSGI app: metrics on every path but /healthz (and /favicon.ico, empty)."""
    fallback = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO"), environ.get("REQUEST_METHOD", "GET")
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if method != "GET" or path == "/favicon.ico":
            return fallback(environ, start_response)  # OPTIONS, 405, the empty icon
        if "name[]" in parse_qs(environ.get("QUERY_STRING", "")):
            return fallback(environ, start_response)
        body = render(registry.collect())
        headers = [("Content-Type", CONTENT_TYPE)]
        if _gzip_accepted(environ):
            body = gzip.compress(body, compresslevel=_GZIP_LEVEL)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

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
