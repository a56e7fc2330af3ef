"""Shared pieces of the exporter tests: sizes, UUIDs, a fake NVML, live charging processes,
and reading what a collector yields as {metric: {labels: value}}."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

GIB = 1 << 30
MIB = 1 << 20
UUID0 = "GPU-5eed0000-0000-4000-8000-000000000000"
UUID1 = "GPU-5eed0000-0000-4000-8000-000000000001"


class Holder:
    """A forked child that charges one ledger as a live process and keeps it until released.

    The charge goes through `cgpu_ledger_test_charge`, which claims a slot and its liveness lock
    exactly as the shim does, so the exporter sees a real live process of the container.
    """

    def __init__(self, ledger: Path, charges: dict[int, int]) -> None:
        from cgpu.core.native import load

        _, lib = load()
        ready_r, ready_w = os.pipe()
        self._release_r, self._release_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: charge, report, then block until released or killed
            code = 1
            try:
                os.close(ready_r)
                os.close(self._release_w)
                rc = 0
                for dev, size in charges.items():
                    rc = rc or lib.cgpu_ledger_test_charge(str(ledger).encode(), dev, size, 1)
                os.write(ready_w, str(rc).encode())
                os.close(ready_w)
                os.read(self._release_r, 1)
                code = 0
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(self._release_r)
        self.pid = pid
        answer = os.read(ready_r, 16).decode()
        os.close(ready_r)
        if answer != "0":
            self.kill()
            raise RuntimeError(f"charging {ledger} failed: {answer!r}")

    def release(self) -> None:
        """Let the child exit normally."""
        if self.pid:
            # A byte, not EOF: later children inherited this pipe's write end too.
            os.write(self._release_w, b"x")
            os.close(self._release_w)
            os.waitpid(self.pid, 0)
            self.pid = 0

    def kill(self) -> None:
        """SIGKILL the child, as an OOM kill would."""
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            os.close(self._release_w)
            self.pid = 0


class FakeNvmlError(Exception):
    """Stands in for pynvml.NVMLError."""


class FakeNvml:
    """Enough of pynvml for the exporter: a list of GPUs, and switches to make calls fail."""

    def __init__(self, gpus: list[tuple[str, str, int, int]]) -> None:
        self.gpus = gpus  # (uuid, name, total, used)
        self.fail_init = False
        self.fail_memory: set[int] = set()
        self.init_calls = 0
        self.shutdown_calls = 0

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return self.gpus[handle][0].encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.gpus[handle][1]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        if handle in self.fail_memory:
            raise FakeNvmlError("GPU is lost")
        _, _, total, used = self.gpus[handle]
        return SimpleNamespace(total=total, used=used, free=total - used)


Series = dict[str, dict[frozenset[tuple[str, str]], float]]


class Collected:
    """A collector that yields metrics already collected (to render them twice alike)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def scrape(collector: Collector) -> Series:
    """One scrape through the text exposition format, as Prometheus would see it.

    The text is the exporter's own (`cgpu.exporter.exposition.render`, what its server
    sends), and must be the very bytes `prometheus_client.generate_latest` writes.
    """
    from cgpu.exporter.exposition import render

    registry = CollectorRegistry()
    registry.register(collector)
    metrics = list(registry.collect())
    registry.unregister(collector)
    text = render(metrics).decode()
    assert text == generate_latest(Collected(metrics)).decode()
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


def labels(**kv: str) -> frozenset[tuple[str, str]]:
    """A label set as `scrape` keys it."""
    return frozenset(kv.items())


def ctr(namespace: str, pod: str, container: str, uuid: str, index: str) -> frozenset:
    """The label set of a container series."""
    return labels(namespace=namespace, pod=pod, container=container, gpu_uuid=uuid, gpu_index=index)


DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "cgpu-dashboard.json"


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query in the Grafana dashboard."""
    with DASHBOARD.open() as f:
        dash = json.load(f)
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]


@contextlib.contextmanager
def pod_resources_kubelet(sock: Path, list_pods: Callable[[Any, Any], Any]) -> Iterator[Path]:
    """A kubelet's pod-resources v1 List on the unix socket `sock`, answered by `list_pods`."""
    import grpc

    from cgpu.core.api import podresources_v1_pb2 as pr

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": grpc.unary_unary_rpc_method_handler(
                list_pods,
                request_deserializer=pr.ListPodResourcesRequest.FromString,
                response_serializer=pr.ListPodResourcesResponse.SerializeToString,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        yield sock
    finally:
        server.stop(None)
