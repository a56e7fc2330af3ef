"""A kube-scheduler-shaped peer: filter -> prioritize -> pick -> bind over real HTTP.

It sends what kube-scheduler sends (Go field names; node names when nodeCacheCapable, full node
objects otherwise) and honours `managedResources` with `ignoredByScheduler`: only pods asking for
aliyun.com/gpu-mem go to the extender.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kube.apiserver import FakeApiServer
from kube.processes import free_port, stop

from cgpu.scheduler.cli import Extender, build
from cgpu.scheduler.kubeapi import KubeApi, load_configuration

PREFIX = "/gpushare-scheduler"
MANAGED = "aliyun.com/gpu-mem"


def post(url: str, body: Any, raw: bytes | None = None) -> tuple[int, Any]:
    """POST JSON (or raw bytes) and return (status, decoded JSON reply)."""
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def get(url: str) -> tuple[int, Any]:
    """GET and return (status, body as JSON when it is JSON, else text)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            status, text = reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def asks_for_gpu_mem(pod: dict[str, Any]) -> bool:
    """managedResources: whether kube-scheduler would call the extender for this pod."""
    for container in pod.get("spec", {}).get("containers", []):
        resources = container.get("resources") or {}
        if MANAGED in (resources.get("limits") or {}) or MANAGED in (
            resources.get("requests") or {}
        ):
            return True
    return False


@dataclass
class Decision:
    """What the peer did with one pod."""

    node: str | None
    failed: dict[str, str]
    error: str = ""


class SchedulerPeer:
    """Schedules pods through one extender, as kube-scheduler's extender client does."""

    def __init__(self, api: FakeApiServer, url: str, node_cache_capable: bool = True) -> None:
        self.api = api
        self.url = url
        self.node_cache_capable = node_cache_capable

    def node_names(self) -> list[str]:
        """Every node, as kube-scheduler's own filters would leave them (no taints here)."""
        return sorted(n["metadata"]["name"] for n in self.api.store.snapshot("nodes")[0])

    def args(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        """ExtenderArgs for `pod` over `nodes`."""
        if self.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": nodes}
        items = [self.api.get("nodes", name) for name in nodes]
        return {"Pod": pod, "Nodes": {"kind": "NodeList", "items": items}, "NodeNames": None}

    def filter(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        status, body = post(f"{self.url}{PREFIX}/filter", self.args(pod, nodes))
        assert status == 200, body
        return body

    def prioritize(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, int]:
        status, body = post(f"{self.url}{PREFIX}/prioritize", self.args(pod, nodes))
        assert status == 200, body
        return {entry["Host"]: entry["Score"] for entry in body}

    def bind(self, pod: dict[str, Any], node: str) -> str:
        meta = pod["metadata"]
        body = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        }
        status, reply = post(f"{self.url}{PREFIX}/bind", body)
        assert status == 200, reply
        return reply["Error"]

    def schedule(self, namespace: str, name: str, nodes: list[str] | None = None) -> Decision:
        """One scheduling cycle for a pending pod; binds it when a node is found."""
        pod = self.api.get("pods", name, namespace)
        candidates = nodes or self.node_names()
        if not asks_for_gpu_mem(pod):  # ignoredByScheduler resources: no extender call
            return Decision(candidates[0] if candidates else None, {})
        result = self.filter(pod, candidates)
        if result["Error"]:
            return Decision(None, {}, result["Error"])
        if self.node_cache_capable:
            passed = result["NodeNames"] or []
        else:
            passed = [n["metadata"]["name"] for n in (result["Nodes"] or {}).get("items", [])]
        failed = {**(result["FailedNodes"] or {}), **(result["FailedAndUnresolvableNodes"] or {})}
        if not passed:
            return Decision(None, failed)
        scores = self.prioritize(pod, passed)
        best = max(passed, key=lambda n: (scores.get(n, 0), -passed.index(n)))
        error = self.bind(pod, best)
        return Decision(None if error else best, failed, error)


class Extenders:
    """Extenders started in this process against one fake API server."""

    def __init__(self, api: FakeApiServer, kubeconfig: Path) -> None:
        self.api = api
        self.kubeconfig = api.kubeconfig(kubeconfig)
        self.running: list[Extender] = []

    def start(self, sync_timeout: float = 20.0, **options: Any) -> Extender:
        extender = build(KubeApi(load_configuration(str(self.kubeconfig))), **options)
        self.running.append(extender)
        deadline = time.monotonic() + sync_timeout
        while not extender.synced:
            assert time.monotonic() < deadline, "extender did not list the cluster"
            time.sleep(0.02)
        return extender

    def stop_all(self) -> None:
        for extender in self.running:
            extender.stop()


def url_of(extender: Extender) -> str:
    return f"http://127.0.0.1:{extender.server.port}"


def wait_until(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    """Poll `predicate` until true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def extender_command(api: FakeApiServer, tmp_path: Path, *flags: str) -> list[str]:
    """The `cgpu scheduler-extender` command line against `api`, with `flags`."""
    kubeconfig = str(api.kubeconfig(tmp_path / "kc"))
    return [sys.executable, "-m", "cgpu.cli", "scheduler-extender", "--kubeconfig", kubeconfig,
            *flags]  # fmt: skip


def extender_env() -> dict[str, str]:
    """This environment without the in-cluster variable (the kubeconfig is what counts)."""
    return {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}


@contextmanager
def extender_cli(api: FakeApiServer, tmp_path: Path, *flags: str) -> Iterator[tuple[str, Path]]:
    """`cgpu scheduler-extender` as a process on a free port, with `flags`, once it has listed
    the cluster; yields its URL and its log's path, and stops it."""
    port = free_port()
    env = extender_env()
    listen = ("--address", "127.0.0.1", "--port", str(port))
    command = extender_command(api, tmp_path, *listen, *flags)
    log_path = tmp_path / "extender.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, log_path.read_text()
        try:
            return get(f"{url}/healthz")[0] == 200
        except OSError:
            return False

    try:
        wait_until(ready, timeout=30, what="the extender to list the cluster")
        yield url, log_path
    finally:
        stop(proc)
