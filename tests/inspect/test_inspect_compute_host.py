"""`kubectl inspect cgpu -d` with the compute host view: each node's exporter, scraped through
the API server's pod proxy.

A real `cgpu exporter` (its collector and HTTP server, in this process) reads a state dir and
the compute arbiter's status file; the fake API server lists its pod (podIP 127.0.0.1, its
metrics port) and forwards the proxy GET to it, as the real API server does.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter.exporter_helpers import GIB, UUID0, UUID1, FakeNvml
from kube.objects import gpu_node, gpu_pod
from prometheus_client import CollectorRegistry

from cgpu.core.computestatus import status_path
from cgpu.core.containers import create_container_dir
from cgpu.exporter.collector import CgpuCollector
from cgpu.exporter.nvml import NvmlSource
from cgpu.exporter.server import MetricsServer

CORE = "aliyun.com/gpu-core.percentage"
IDX = "ALIYUN_COM_GPU_MEM_IDX"
FIGURES = {
    "limit": 30,
    "policy": "fixed",
    "share_percent": 29.5,
    "host_percent": 41.25,
    "out_of_turn_s": 3.5,
    "over_compute": True,
}


class Node:
    """One node's state dir, its arbiter's status file kept fresh, and its exporter."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.entries: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()
        self.writer = threading.Thread(target=self._keep_fresh, daemon=True)
        nvml = FakeNvml([(UUID0, "NVIDIA H200", 16 * GIB, 0), (UUID1, "NVIDIA H200", 16 * GIB, 0)])
        registry = CollectorRegistry()
        registry.register(CgpuCollector(state, gpus=NvmlSource(loader=lambda: nvml)))
        self.server = MetricsServer(registry, "127.0.0.1", 0)
        self.serving = False

    def container(
        self, key: str, pod: str, container: str, figures: dict[str, Any], priority: str = "normal"
    ) -> None:
        meta = {
            "source": "device-plugin",
            "namespace": "default",
            "pod": pod,
            "container": container,
        }
        share = {UUID0: (30, "fixed", priority)}
        directory = create_container_dir(self.state, key, {UUID0: GIB}, meta, share)
        self.entries[str(directory)] = figures

    def _write(self) -> None:
        doc = {
            "time": time.time(),
            "gpus": {UUID0: {"host_view": True, "containers": self.entries}},
        }
        path = status_path(self.state)
        tmp = path.with_name(".status.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)

    def _keep_fresh(self) -> None:
        while not self.stop.wait(0.3):
            self._write()

    def start(self) -> None:
        self._write()
        self.writer.start()
        self.serve()

    def serve(self) -> None:
        """The exporter alone, with no status file."""
        self.server.start()
        self.serving = True

    def close(self) -> None:
        self.stop.set()
        if self.writer.is_alive():
            self.writer.join(timeout=5)
        if self.serving:
            self.server.stop()
        else:
            self.server._httpd.server_close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    state = tmp_path / "state"
    state.mkdir()
    made = Node(state)
    yield made
    made.close()


def _exporter_pod(name: str, node: str, port: int, namespace: str = "kube-system") -> dict:
    pod = gpu_pod(name, 0, namespace=namespace, node=node, phase="Running")
    pod["metadata"]["labels"]["app.kubernetes.io/name"] = "cgpu-exporter"
    pod["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": port}]
    pod["status"]["podIP"] = "127.0.0.1"
    return pod


def _cluster(api: Any) -> None:
    node = gpu_node("gpu-a", 1, 15, ip="10.0.0.1")
    for section in ("capacity", "allocatable"):
        node["status"][section][CORE] = "100"
    api.create("nodes", node)
    api.create("nodes", gpu_node("gpu-b", 1, 15, ip="10.0.0.2"))
    train = gpu_pod("train", 4, node="gpu-a", annotations={IDX: "0"}, phase="Running")
    train["spec"]["containers"][0]["resources"]["limits"][CORE] = "30"
    api.create("pods", train)
    api.create("pods", gpu_pod("old", 3, node="gpu-b", annotations={IDX: "0"}, phase="Running"))


def test_details_show_the_host_view_from_the_nodes_exporter(kube_api, inspect_cli, node) -> None:
    node.container("k-train", "train", "c0", FIGURES, priority="high")
    node.container("k-evil", "evil\tpod\nx", "c0", {**FIGURES, "over_compute": False})
    node.start()
    _cluster(kube_api)
    kube_api.create("pods", _exporter_pod("cgpu-exporter-a", "gpu-a", node.server.port))
    result = inspect_cli("-d")
    assert result.returncode == 0, result.stderr
    block = result.stdout.split("NAME:       gpu-b")[0]
    lines = [line.split() for line in block.splitlines()]
    title = "Compute host view (kube-system/cgpu-exporter-a):"
    header = [
        "NAME", "NAMESPACE", "CONTAINER", "GPU", "LIMIT(%)", "PRIORITY", "USED(%)", "HOST",
        "10s(%)", "OUT", "OF", "TURN(s)", "OVER",
    ]  # fmt: skip
    at = lines.index(title.split())
    assert lines[at + 1] == header
    assert ["train", "default", "c0", "0", "30", "high", "29.5", "41.2", "3.5", "yes"] in lines
    # A label with a tab and a newline stays in its cell, on its line.
    evil = ["evil?pod?x", "default", "c0", "0", "30", "normal", "29.5", "41.2", "3.5", "no"]
    assert evil in lines
    # The node without an exporter pod keeps gpushare's layout.
    assert "Compute host view" not in result.stdout.split("NAME:       gpu-b")[1]
    # The request went through the pod proxy.
    assert any("/pods/cgpu-exporter-a" in path and "/proxy/metrics" in path
               for _, path in kube_api.requests)  # fmt: skip

    shown = inspect_cli("-d", "-o", "json")
    data = json.loads(shown.stdout)
    view = data["nodes"][0]["computeHostView"]
    assert view["statusUp"] is True and view["exporter"] == "kube-system/cgpu-exporter-a"
    train = next(c for c in view["containers"] if c["pod"] == "train")
    assert (train["hostPercent"], train["outOfTurnSeconds"], train["overCompute"]) == (
        41.25, 3.5, True,
    )  # fmt: skip
    assert (train["policy"], train["priority"]) == ("fixed", "high")
    assert "computeHostView" not in data["nodes"][1]
    # Without -d nothing is scraped.
    before = len(kube_api.requests)
    assert inspect_cli().returncode == 0
    assert not any("/proxy/" in path for _, path in kube_api.requests[before:])


def test_an_exporter_that_cannot_be_reached_or_has_no_status(kube_api, inspect_cli, node) -> None:
    _cluster(kube_api)
    node.container("k-train", "train", "c0", FIGURES)
    node.serve()  # no status file: the exporter serves no compute host view
    kube_api.create("pods", _exporter_pod("cgpu-exporter-a", "gpu-a", node.server.port))
    result = inspect_cli("-d")
    assert result.returncode == 0, result.stderr
    assert (
        "Compute host view :  no current compute-arbiter status (kube-system/cgpu-exporter-a)"
        in result.stdout
    )

    # An exporter pod whose port does not answer: one line says why, the rest is shown.
    kube_api.delete("pods", "cgpu-exporter-a", "kube-system")
    kube_api.create("pods", _exporter_pod("cgpu-exporter-b", "gpu-b", 1))
    result = inspect_cli("-d")
    assert result.returncode == 0, result.stderr
    after_b = result.stdout.split("NAME:       gpu-b")[1]
    assert "Compute host view :  unavailable (kube-system/cgpu-exporter-b:" in after_b
    assert "HTTP 503" in after_b
    assert "Allocated/Total GPU Memory In Cluster:" in result.stdout


def test_a_role_without_pod_proxy_access_still_inspects(kube_api, inspect_cli, node) -> None:
    _cluster(kube_api)
    kube_api.create("pods", _exporter_pod("cgpu-exporter-a", "gpu-a", 1))
    kube_api.fault("GET", "/proxy/", 403)
    result = inspect_cli("-d")
    assert result.returncode == 0, result.stderr
    assert "unavailable (kube-system/cgpu-exporter-a: " in result.stdout
    assert "HTTP 403" in result.stdout
    assert "train" in result.stdout
