"""`cgpu webhook` over HTTPS: real AdmissionReview JSON in, a JSONPatch out, templates written
to a (fake) API server, /healthz and /metrics, and the certificate reloaded when it changes."""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubeschema import validate_for
from webhook_helpers import client_context, make_cert, patched, review, seed_pods

from cgpu.cli import build_parser
from cgpu.webhook import kubeapi
from cgpu.webhook.admit import Admitter
from cgpu.webhook.config import WebhookConfig
from cgpu.webhook.metrics import Metrics
from cgpu.webhook.server import CertReloader, WebhookServer
from cgpu.webhook.templates import TemplateStore

Obj = dict[str, Any]


@pytest.fixture
def served(tmp_path: Path, kube_api: Any) -> Iterator[tuple[WebhookServer, Path, Any]]:
    """A webhook on 127.0.0.1 with a self-signed certificate, writing to the fake API server."""
    certs = tmp_path / "certs"
    make_cert(certs)
    api = kubeapi.connect(str(kube_api.kubeconfig(tmp_path / "kubeconfig")))
    config = WebhookConfig(cert_dir=certs, unit_mib=1024)
    admitter = Admitter(config, TemplateStore(api, config.device_class), Metrics())
    server = WebhookServer(admitter, CertReloader(certs), "127.0.0.1", 0)
    server.start()
    yield server, certs, kube_api
    server.stop()


def post(server: WebhookServer, ca: Path, path: str, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection(
        "localhost", server.port, context=client_context(ca), timeout=10
    )
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def get(server: WebhookServer, ca: Path, path: str) -> tuple[int, str]:
    conn = http.client.HTTPSConnection(
        "localhost", server.port, context=client_context(ca), timeout=10
    )
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_the_seeds_pods_are_rewritten_over_https(served: Any) -> None:
    server, certs, api = served
    for _seed, unit, pod in seed_pods():
        if unit != "GiB":
            continue  # this server counts gpu-mem in GiB (the MiB seed: test_webhook_translate)
        request = review(pod)
        status, body = post(server, certs / "tls.crt", "/mutate-pods", json.dumps(request).encode())
        assert status == 200
        answer = json.loads(body)
        assert answer["response"]["uid"] == request["request"]["uid"]
        assert answer["response"]["allowed"] is True
        after = patched(pod, answer)
        if "nvidia.com/gpu" in json.dumps(pod):
            assert after == pod
            continue
        validate_for(after, ("1.37.0",))
        for entry in after["spec"]["resourceClaims"]:
            stored = api.get(
                "resourceclaimtemplates", entry["resourceClaimTemplateName"], "default"
            )
            validate_for(stored, ("1.37.0",))
    names = {t["metadata"]["name"] for t in api.objects("resourceclaimtemplates")}
    assert len(names) == 2  # 001 (2 GiB x 4) and 004 (4 GiB, twice): shared by shape


def test_health_metrics_and_bad_requests(served: Any) -> None:
    server, certs, _ = served
    ca = certs / "tls.crt"
    assert get(server, ca, "/healthz") == (200, "ok\n")
    status, _ = post(server, ca, "/mutate-pods", b"{broken")
    assert status == 400
    status, text = post(server, ca, "/validate", json.dumps(review(seed_pods()[1][2])).encode())
    assert status == 404 and "/mutate-pods" in text.decode()
    post(server, ca, "/mutate-pods", json.dumps(review(seed_pods()[1][2])).encode())
    status, metrics = get(server, ca, "/metrics")
    assert status == 200
    assert 'cgpu_webhook_requests_total{result="malformed"} 1.0' in metrics
    assert 'cgpu_webhook_requests_total{result="rewritten"} 1.0' in metrics
    assert "cgpu_webhook_rewrites_total 1.0" in metrics
    assert "cgpu_webhook_templates_created_total 1.0" in metrics
    assert "cgpu_webhook_request_duration_seconds_count 2.0" in metrics


def test_a_plain_http_client_gets_no_answer(served: Any) -> None:
    server, _, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("GET", "/healthz")
        conn.getresponse().read()
    conn.close()


def _peer_cert(server: WebhookServer) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=5)
    try:
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        return conn.sock.getpeercert(binary_form=True)
    finally:
        conn.close()


def test_a_renewed_certificate_is_served_without_a_restart(served: Any) -> None:
    server, certs, _ = served
    first = _peer_cert(server)
    make_cert(certs, "renewed")
    deadline = time.monotonic() + 10
    while _peer_cert(server) == first:
        assert time.monotonic() < deadline, "the new certificate was never served"
        time.sleep(0.2)
    assert get(server, certs / "tls.crt", "/healthz")[0] == 200  # trusted as the new CA
    (certs / "tls.key").write_text("half written\n")  # a pair that does not load yet
    time.sleep(1.2)
    assert get(server, certs / "tls.crt", "/healthz")[0] == 200  # the last good pair serves


def test_the_command_line() -> None:
    args = build_parser(["webhook"]).parse_args(
        [
            "webhook",
            "--cert-dir",
            "/certs",
            "--port",
            "9443",
            "--on-error",
            "pass",
            "--memory-unit",
            "MiB",
            "--pod-selector",
            "cgpu.io/dra=true",
            "--exclude-namespaces",
            "kube-system",
        ]
    )
    config = WebhookConfig.from_args(args)
    assert (config.cert_dir, config.port, config.on_error, config.unit_mib) == (
        Path("/certs"),
        9443,
        "pass",
        1,
    )
    assert config.in_scope("default", {"cgpu.io/dra": "true"})
    assert not config.in_scope("default", {})
    assert not config.in_scope("kube-system", {"cgpu.io/dra": "true"})
    with pytest.raises(SystemExit):
        build_parser(["webhook"]).parse_args(["webhook", "--on-error", "ignore"])


def test_accepted_connections_send_without_waiting_for_acks(tmp_path: Path) -> None:
    """An answer leaves in two writes (headers, body): with Nagle's algorithm the second waits
    for the API server's delayed ACK (40 ms a review on a keep-alive connection), so the
    webhook's connections must set TCP_NODELAY."""
    import socket

    certs = tmp_path / "certs"
    make_cert(certs)
    config = WebhookConfig(cert_dir=certs, unit_mib=1024)
    admitter = Admitter(config, TemplateStore(None, config.device_class), Metrics())  # type: ignore[arg-type]
    server = WebhookServer(admitter, CertReloader(certs), "127.0.0.1", 0)  # not serving
    try:
        with socket.create_connection(("127.0.0.1", server.port)):
            accepted, _ = server._server.get_request()
            try:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            finally:
                accepted.close()
    finally:
        server._server.server_close()
