"""The webhook's HTTPS server: POST /mutate-pods, GET /healthz, GET /metrics.

It listens as controller-runtime webhooks do: `tls.crt` and `tls.key` in the cert directory.
A change of either file (cert-manager renewing, a Secret volume swapping its data) is picked
up for the next connection: the files are looked at, at most once a second, when a connection
is accepted, and a pair that does not load (one file written, the other not yet) leaves the
last good pair in use until it does. HTTP/1.1 keep-alive, as the API server reuses connections.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cgpu.webhook.admit import Admitter

log = logging.getLogger(__name__)

MUTATE_PATH = "/mutate-pods"
CERT_NAME, KEY_NAME = "tls.crt", "tls.key"
RELOAD_EVERY_S = 1.0
READ_TIMEOUT_S = 30.0


class CertReloader:
    """The TLS context of the cert directory's current pair."""

    def __init__(self, cert_dir: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.cert = cert_dir / CERT_NAME
        self.key = cert_dir / KEY_NAME
        self.clock = clock
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._context = self._load()  # the first pair must load: no server without one
        self._checked = clock()
        self.reloads = 0

    def _files_stamp(self) -> tuple[Any, ...]:
        stamps = []
        for path in (self.cert, self.key):
            try:
                st = os.stat(path)
                stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context

    def context(self) -> ssl.SSLContext:
        """The context for a new connection, reloaded first if the files changed."""
        now = self.clock()
        with self._lock:
            if now - self._checked >= RELOAD_EVERY_S:
                self._checked = now
                stamp = self._files_stamp()
                if stamp != self._stamp:
                    try:
                        self._context = self._load()
                        self._stamp = stamp
                        self.reloads += 1
                        log.info("reloaded the serving certificate from %s", self.cert)
                    except (OSError, ssl.SSLError) as err:
                        log.warning(
                            "new certificate pair does not load yet (%s); keeping the last one", err
                        )
            return self._context


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: Any, certs: CertReloader) -> None:
        self.certs = certs
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        sock.settimeout(READ_TIMEOUT_S)
        # The answer's headers and body leave in two writes: with Nagle's algorithm the second
        # waits for the API server's delayed ACK of the first (40 ms), which capped a keep-alive
        # connection at about 25 reviews a second (p50 0.5 s at 100 a second on four).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The handshake runs in the handler's thread, on its first read.
        wrapped = self.certs.context().wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class WebhookServer:
    """Serves the admitter over HTTPS on a thread of its own."""

    def __init__(self, admitter: Admitter, certs: CertReloader, address: str, port: int) -> None:
        self.admitter = admitter
        self.certs = certs
        self._server = _TlsServer((address, port), self._handler(), certs)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen when asked for 0)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Start serving."""
        self._thread.start()

    def serve_forever(self) -> None:
        """Serve on the calling thread until stop()."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        admitter = self.admitter

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("%s " + fmt, self.address_string(), *args)

            def _send(self, code: int, data: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in ("/healthz", "/readyz"):
                    self._send(200, b"ok\n", "text/plain")
                elif path == "/metrics":
                    data = generate_latest(admitter.metrics.registry)
                    self._send(200, data, CONTENT_TYPE_LATEST)
                else:
                    self._send(404, b"not found\n", "text/plain")

            def do_POST(self) -> None:

                path = self.path.split("?", 1)[0]
                length = self.headers.get("Content-Length")
                if not length or not length.isdigit():
                    self.close_connection = True
                    self._send(411, b"a body with Content-Length is required\n", "text/plain")
                    return
                if int(length) > (3 << 20):
                    self.close_connection = True
                    self._send(413, b"body over 3 MiB\n", "text/plain")
                    return
                body = self.rfile.read(int(length))
                if path != MUTATE_PATH:
                    self._send(
                        404, f"no webhook at {path}; use {MUTATE_PATH}\n".encode(), "text/plain"
                    )
                    return
                status, answer = admitter.handle(body)
                if isinstance(answer, str):
                    self._send(status, (answer + "\n").encode(), "text/plain")
                else:
                    self._send(status, json.dumps(answer).encode(), "application/json")

        return Handler
