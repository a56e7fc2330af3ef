"""The scheduler extender at cluster scale: filter and bind latency, memory, rebuild time.

Serves a simulated cluster (N nodes x G GPUs, P running pods with gpushare annotations) from the
test suite's fake API server (tests/kube), starts `cgpu scheduler-extender` as its own process
against it, and measures:
- rebuild: process start until /healthz says the first list is done (a restart's cost), the
  CPU seconds the restarted extender and the fake API server (this process) spent on it, the
  list alone (nodes and pods into a fresh cache, in this process), and the fake server's own
  JSON encoding of the pod list (its share, which a real API server does in Go);
- memory: the extender process's RSS once it holds the whole cluster;
- filter: p50/p99 of POST /filter with a NodeNames list of 1,000 names (client side, over HTTP);
- bind: p50/p99 of the extender's own work per bind (choose GPUs, assume, build the patch; the API
  calls answered instantly in memory), and, for reference, whole HTTP binds against the fake
  API server.

    python benchmarks/scheduler_extender.py [--nodes 1000] [--gpus 8] [--pods 20000]
                                            [--filters 200] [--binds 2000]

It exits non-zero when a target is missed: filter p99 <= 20 ms, bind p99 <= 5 ms (without API
latency), RSS <= 300 MB, rebuild <= 10 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from kube.apiserver import FakeApiServer  # noqa: E402
from kube.objects import gpu_node, gpu_pod  # noqa: E402

UNITS_PER_GPU = 80  # an 80 GiB GPU in GiB units
IDX = "ALIYUN_COM_GPU_MEM_IDX"


def realistic(pod: dict[str, Any], i: int) -> dict[str, Any]:
    """Pad a pod to the size of a real one (owner, env, mounts, status conditions)."""
    meta = pod["metadata"]
    meta["labels"].update({"app": f"job-{i % 500}", "team": f"t{i % 40}"})
    meta["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": f"job-{i % 500}-7c9d",
            "uid": f"{i:032x}",
        }
    ]
    container = pod["spec"]["containers"][0]
    container["env"] = [{"name": f"VAR_{k}", "value": f"value-{k}-{i}"} for k in range(12)]
    container["volumeMounts"] = [{"name": f"v{k}", "mountPath": f"/data/{k}"} for k in range(4)]
    pod["spec"]["volumes"] = [{"name": f"v{k}", "emptyDir": {}} for k in range(4)]
    pod["status"]["conditions"] = [
        {"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return pod


def build_cluster(api: FakeApiServer, nodes: int, gpus: int, pods: int, seed: int = 1) -> None:
    """Nodes, then running pods spread over them with random sizes and GPU indexes."""
    rng = random.Random(seed)
    free = {}
    for n in range(nodes):
        name = f"node-{n:04d}"
        api.create("nodes", gpu_node(name, gpus, UNITS_PER_GPU, ip=f"10.{n // 250}.{n % 250}.1"))
        free[name] = [UNITS_PER_GPU] * gpus
    names = list(free)
    for i in range(pods):
        size = rng.choice((2, 4, 5, 8, 10))
        while True:
            node = rng.choice(names)
            gpu = rng.randrange(gpus)
            if free[node][gpu] >= size:
                break
        free[node][gpu] -= size
        pod = gpu_pod(f"pod-{i:05d}", size, namespace=f"ns-{i % 50}", node=node,
                      annotations={IDX: str(gpu), "ALIYUN_COM_GPU_MEM_POD": str(size)},
                      phase="Running")  # fmt: skip
        api.create("pods", realistic(pod, i))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Client:
    """One kept-alive HTTP connection, as kube-scheduler's extender client keeps one."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def post(self, path: str, body: bytes) -> bytes:
        self.conn.request("POST", path, body, {"Content-Type": "application/json"})
        return self.conn.getresponse().read()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_extender(kubeconfig: Path, port: int) -> tuple[subprocess.Popen, float, float]:
    """Start the extender process; return it, the seconds until /healthz answered 200, and
    the CPU seconds the extender had used by then (less sensitive to a busy machine)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    command = [sys.executable, "-m", "cgpu.cli", "scheduler-extender", "--kubeconfig",
               str(kubeconfig), "--address", "127.0.0.1", "--port", str(port)]  # fmt: skip
    started = time.perf_counter()
    log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the process; a pipe could fill)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
                if reply.status == 200:
                    ready = time.perf_counter() - started
                    cpu = psutil.Process(proc.pid).cpu_times()
                    return proc, ready, cpu.user + cpu.system
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(
                f"extender exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        time.sleep(0.02)


def bench_relist(kubeconfig: Path) -> float:
    """Seconds for the extender's informers to list nodes and pods into a fresh ClusterState
    (what a restart costs once the interpreter has started), one after the other."""
    from cgpu.scheduler.informer import Informer
    from cgpu.scheduler.kubeapi import KubeApi, load_configuration
    from cgpu.scheduler.state import ClusterState

    api = KubeApi(load_configuration(str(kubeconfig)))
    started = time.perf_counter()
    state = ClusterState()
    Informer(api, "nodes", state)._relist()
    Informer(api, "pods", state)._relist()
    return time.perf_counter() - started


def bench_server_encoding(api: FakeApiServer, page: int = 500) -> float:
    """Seconds the fake API server spends encoding the pod list as JSON pages of `page`: its
    own share of a relist (a real API server encodes in Go, from its watch cache)."""
    pods, _ = api.store.snapshot("pods")
    started = time.perf_counter()
    for first in range(0, len(pods), page):
        json.dumps({"kind": "PodList", "items": pods[first : first + page]}).encode()
    return time.perf_counter() - started


def bench_filter(client: Client, api: FakeApiServer, nodes: int, count: int) -> list[float]:
    names = [f"node-{n:04d}" for n in range(min(nodes, 1000))]
    timings = []
    for i in range(count):
        pod = api.create("pods", gpu_pod(f"pending-{i}", 8 if i % 2 else 16))
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
        started = time.perf_counter()
        reply = json.loads(client.post("/gpushare-scheduler/filter", body))
        timings.append(time.perf_counter() - started)
        assert not reply["Error"], reply["Error"]
    return timings


class InstantApi:
    """API calls answered at once from memory: bind timing without API latency."""

    def __init__(self, pods: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.pods = pods

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.pods[(namespace, name)]

    def patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.pods[(namespace, name)]

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        return None


def bench_bind_in_memory(api: FakeApiServer, count: int, nodes: int) -> list[float]:
    """Time Binder.bind with the cache built from the same cluster and instant API calls."""
    from cgpu.scheduler.binder import Binder
    from cgpu.scheduler.state import ClusterState

    state = ClusterState()
    state.replace_nodes(api.store.snapshot("nodes")[0])
    state.replace_pods(api.store.snapshot("pods")[0])
    pending = {}
    for i in range(count):
        pod = gpu_pod(f"bind-{i}", 2, namespace="bench")
        pod["metadata"].update(uid=f"uid-bind-{i}", resourceVersion="1")
        pending[("bench", f"bind-{i}")] = pod
        state.observe_pod(pod)
    binder = Binder(state, InstantApi(pending), assume_timeout=3600)
    timings = []
    for i in range(count):
        node = f"node-{i % nodes:04d}"
        started = time.perf_counter()
        binder.bind("bench", f"bind-{i}", f"uid-bind-{i}", node)
        timings.append(time.perf_counter() - started)
    return timings


def bench_bind_http(client: Client, api: FakeApiServer, count: int, nodes: int) -> list[float]:
    timings = []
    for i in range(count):
        pod = api.create("pods", gpu_pod(f"http-bind-{i}", 2, namespace="bench"))
        body = json.dumps({"PodName": pod["metadata"]["name"], "PodNamespace": "bench",
                           "PodUID": pod["metadata"]["uid"],
                           "Node": f"node-{(i * 7) % nodes:04d}"}).encode()  # fmt: skip
        time.sleep(0.005)  # let the watch deliver the new pod, as it would have before a bind
        started = time.perf_counter()
        reply = json.loads(client.post("/gpushare-scheduler/bind", body))
        timings.append(time.perf_counter() - started)
        assert not reply["Error"], reply["Error"]
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--filters", type=int, default=200)
    parser.add_argument("--binds", type=int, default=2000)
    parser.add_argument("--http-binds", type=int, default=200)
    args = parser.parse_args()

    api = FakeApiServer(history=200_000)
    started = time.perf_counter()
    build_cluster(api, args.nodes, args.gpus, args.pods)
    built = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = api.kubeconfig(Path(tmp) / "kubeconfig")
        port = free_port()
        proc, rebuild, _ = start_extender(kubeconfig, port)
        try:
            client = Client(port)
            filters = bench_filter(client, api, args.nodes, args.filters)
            rss_mb = psutil.Process(proc.pid).memory_info().rss / 1e6
            http_binds = bench_bind_http(client, api, args.http_binds, args.nodes)
            rss_mb = max(rss_mb, psutil.Process(proc.pid).memory_info().rss / 1e6)
            # A second process: the time a restart takes with the whole cluster to list.
            server_cpu = time.process_time()  # this process: the fake API server
            proc2, rebuild2, rebuild_cpu = start_extender(kubeconfig, free_port())
            server_cpu = time.process_time() - server_cpu
            proc2.terminate()
            proc2.wait(timeout=30)
            relist = bench_relist(kubeconfig)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    binds = bench_bind_in_memory(api, args.binds, args.nodes)
    server_encoding = bench_server_encoding(api)
    api.close()

    figures = {
        "cluster": f"{args.nodes} nodes x {args.gpus} GPUs, {args.pods} running pods",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "cluster_build_s": round(built, 2),
        "rebuild_s": round(max(rebuild, rebuild2), 2),
        "rebuild_first_and_restart_s": [round(rebuild, 2), round(rebuild2, 2)],
        "restart_cpu_s": {"extender": round(rebuild_cpu, 2), "fake_server": round(server_cpu, 2)},
        "relist_in_process_s": round(relist, 2),
        "fake_server_encoding_s": round(server_encoding, 2),
        "load_average": round(os.getloadavg()[0], 1),
        "rss_mb": round(rss_mb, 1),
        "filter_1000_names_ms": {
            "p50": round(statistics.median(filters) * 1e3, 2),
            "p99": round(percentile(filters, 0.99) * 1e3, 2),
        },
        "bind_without_api_ms": {
            "p50": round(statistics.median(binds) * 1e3, 3),
            "p99": round(percentile(binds, 0.99) * 1e3, 3),
        },
        "bind_http_with_fake_api_ms": {
            "p50": round(statistics.median(http_binds) * 1e3, 2),
            "p99": round(percentile(http_binds, 0.99) * 1e3, 2),
        },
    }
    print(json.dumps(figures, indent=2))
    missed = []
    if figures["filter_1000_names_ms"]["p99"] > 20:
        missed.append("filter p99 > 20 ms")
    if figures["bind_without_api_ms"]["p99"] > 5:
        missed.append("bind p99 > 5 ms")
    if rss_mb > 300:
        missed.append("RSS > 300 MB")
    if figures["rebuild_s"] > 10:
        missed.append("rebuild > 10 s")
    if missed:
        print("missed: " + ", ".join(missed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
