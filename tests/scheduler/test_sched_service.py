"""The extender as a service: /healthz, /metrics, inspect, and the `cgpu` subcommand."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from kube.objects import gpu_node, gpu_pod
from kube.processes import free_port
from sched_peer import PREFIX, SchedulerPeer, get, post, url_of, wait_until

IDX = "ALIYUN_COM_GPU_MEM_IDX"


def test_inspect_endpoint_has_gpushare_shape(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 2, 8))
    kube_api.create("nodes", {"metadata": {"name": "cpu"}, "status": {}})
    kube_api.create("pods", gpu_pod("a", 3, node="n1", annotations={IDX: "1"}, phase="Running"))
    kube_api.create("pods", gpu_pod("q", 4, node="n1", gpu_count=2, annotations={IDX: "0,1"}))
    url = url_of(extender())
    status, body = get(f"{url}{PREFIX}/inspect")
    assert status == 200
    assert body == {
        "nodes": [
            {
                "name": "n1",
                "totalGPU": 16,
                "usedGPU": 7,
                "pendingGPU": 0,
                "devs": [
                    {"id": 0, "totalGPU": 8, "usedGPU": 2,
                     "pods": [{"name": "q", "namespace": "default", "usedGPU": 2}]},
                    {"id": 1, "totalGPU": 8, "usedGPU": 5,
                     "pods": [{"name": "a", "namespace": "default", "usedGPU": 3},
                              {"name": "q", "namespace": "default", "usedGPU": 2}]},
                ],
            }
        ]
    }  # fmt: skip
    status, one = get(f"{url}{PREFIX}/inspect/n1")
    assert status == 200 and one == body
    status, missing = get(f"{url}{PREFIX}/inspect/cpu")
    assert status == 404 and missing["nodes"] == [] and "cpu" in missing["error"]


def test_healthz_and_metrics(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    kube_api.create("pods", gpu_pod("a", 4))
    kube_api.create("pods", gpu_pod("b", 9))
    ext = extender()
    url = url_of(ext)
    assert get(f"{url}/healthz") == (200, "ok")
    peer = SchedulerPeer(kube_api, url)
    assert peer.schedule("default", "a").node == "n1"
    assert peer.schedule("default", "b").node is None
    assert "node n1" in peer.bind(kube_api.get("pods", "b"), "n1")
    post(f"{url}{PREFIX}/filter", None, raw=b"nope")
    status, text = get(f"{url}/metrics")
    assert status == 200
    lines = text.splitlines()
    assert "cgpu_extender_binds_total 1.0" in lines
    assert 'cgpu_extender_bind_failures_total{reason="no_fit"} 1.0' in lines
    assert 'cgpu_extender_bad_requests_total{verb="filter"} 1.0' in lines
    assert 'cgpu_extender_filter_nodes_total{result="unresolvable"} 1.0' in lines
    for verb in ("filter", "prioritize", "bind"):
        count = next(
            line for line in lines
            if line.startswith(f'cgpu_extender_request_duration_seconds_count{{verb="{verb}"}}')
        )  # fmt: skip
        assert float(count.split()[-1]) >= 1
    assert "cgpu_extender_nodes 1.0" in lines


def test_cli_serves_and_stops_on_sigterm(kube_api, tmp_path):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    kube_api.create("pods", gpu_pod("a", 4))
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = str(kubeconfig)  # found through $KUBECONFIG, no flag
    command = [sys.executable, "-m", "cgpu.cli", "scheduler-extender", "--address", "127.0.0.1",
               "--port", str(port), "--gpu-policy", "spread"]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return get(f"{url}/healthz")[0] == 200
            except OSError:
                return False

        wait_until(healthy, timeout=30, what="the extender to serve")
        assert SchedulerPeer(kube_api, url).schedule("default", "a").node == "n1"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_with_a_bad_kubeconfig_says_so(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("{}")
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "cgpu.cli", "scheduler-extender", "--kubeconfig", str(bad)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "no usable API-server configuration" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30


def test_before_the_first_list_it_is_not_ready_and_refuses_to_guess(tmp_path):
    from kube.apiserver import FakeApiServer

    from cgpu.scheduler.cli import build
    from cgpu.scheduler.kubeapi import KubeApi, load_configuration

    gone = FakeApiServer()
    kubeconfig = gone.kubeconfig(tmp_path / "kubeconfig")
    gone.close()  # nothing listens there any more
    ext = build(KubeApi(load_configuration(str(kubeconfig)), timeout=1.0))
    try:
        url = url_of(ext)
        assert get(f"{url}/healthz") == (503, "not synced")
        status, body = post(f"{url}{PREFIX}/filter", {"Pod": gpu_pod("p", 1), "NodeNames": ["n"]})
        assert status == 200 and "not finished listing" in body["Error"]
        assert body["NodeNames"] is None
    finally:
        ext.stop()


def test_while_the_first_list_is_under_way_no_verb_uses_the_partial_view(kube_api, tmp_path):
    """Pods arriving during a restart's list are refused (kube-scheduler retries them), never
    placed from the part of the cluster listed so far."""
    from cgpu.scheduler.cli import build
    from cgpu.scheduler.kubeapi import KubeApi, load_configuration

    class OnePodAPage(KubeApi):
        def list(self, resource: str, page: int = 1):  # type: ignore[override]
            return super().list(resource, 1)

    kube_api.create("nodes", gpu_node("n1", 1, 8))
    for name in ("a", "b"):  # n1's only GPU is full: a then b, 4 units each
        kube_api.create("pods", gpu_pod(name, 4, node="n1", annotations={IDX: "0"},
                                        phase="Running"))  # fmt: skip
    pending = kube_api.create("pods", gpu_pod("p", 4))
    release = threading.Event()
    pod_lists = []

    def hold_the_second_page(method: str, path: str) -> None:
        if method == "GET" and path == "/api/v1/pods":
            pod_lists.append(path)
            if len(pod_lists) == 2:
                release.wait(30)

    kube_api.hooks.append(hold_the_second_page)
    api = OnePodAPage(load_configuration(str(kube_api.kubeconfig(tmp_path / "kc"))))
    ext = build(api)
    try:
        url = url_of(ext)
        wait_until(lambda: len(pod_lists) >= 2, what="the second page of pods asked for")
        wait_until(lambda: ext.state.pods, what="the first page applied")
        assert set(ext.state.pods) == {kube_api.get("pods", "a")["metadata"]["uid"]}
        assert get(f"{url}/healthz") == (503, "not synced")
        args = {"Pod": pending, "NodeNames": ["n1"]}
        status, body = post(f"{url}{PREFIX}/filter", args)
        assert status == 200 and "not finished listing" in body["Error"], body
        assert body["NodeNames"] is None
        status, body = post(f"{url}{PREFIX}/prioritize", args)
        assert status == 503 and "not finished listing" in body["Error"], body
        binding = {"PodName": "p", "PodNamespace": "default",
                   "PodUID": pending["metadata"]["uid"], "Node": "n1"}  # fmt: skip
        status, body = post(f"{url}{PREFIX}/bind", binding)
        assert status == 200 and "not finished listing" in body["Error"], body
        unbound = kube_api.get("pods", "p")
        assert not unbound["spec"].get("nodeName")
        assert IDX not in unbound["metadata"]["annotations"]
        assert not kube_api.recorded_patches("/pods/p")

        release.set()
        wait_until(lambda: get(f"{url}/healthz")[0] == 200, what="ready after the list")
        status, body = post(f"{url}{PREFIX}/filter", args)
        assert body["NodeNames"] == [] and "n1" in body["FailedNodes"], body  # n1 is full
        status, body = post(f"{url}{PREFIX}/bind", binding)
        assert "node n1" in body["Error"], body
    finally:
        release.set()
        ext.stop()


def test_lists_are_counted(kube_api, extender):
    ext = extender()
    status, text = get(f"{url_of(ext)}/metrics")
    assert status == 200
    assert 'cgpu_extender_lists_total{resource="pods"} 1.0' in text.splitlines()
    assert 'cgpu_extender_lists_total{resource="nodes"} 1.0' in text.splitlines()
