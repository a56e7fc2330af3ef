"""Bind: annotations then Binding, conflicts, rollback, assume cache, freeing, restarts."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from kube.objects import gpu_node, gpu_pod
from sched_peer import SchedulerPeer, url_of, wait_until

IDX = "ALIYUN_COM_GPU_MEM_IDX"
GPUSHARE = (
    "ALIYUN_COM_GPU_MEM_IDX",
    "ALIYUN_COM_GPU_MEM_POD",
    "ALIYUN_COM_GPU_MEM_DEV",
    "ALIYUN_COM_GPU_MEM_ASSIGNED",
    "ALIYUN_COM_GPU_MEM_ASSUME_TIME",
)


def gpu_usage(api) -> dict[tuple[str, int], int]:
    """Units on each (node, GPU) according to the API server's bound, active pods."""
    used: dict[tuple[str, int], int] = defaultdict(int)
    for pod in api.pods():
        node = pod["spec"].get("nodeName")
        notes = pod["metadata"].get("annotations") or {}
        if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        gpus = [int(g) for g in notes[IDX].split(",")]
        for gpu in gpus:
            used[(node, gpu)] += int(notes["ALIYUN_COM_GPU_MEM_POD"]) // len(gpus)
    return used


def test_bind_writes_annotations_before_the_binding(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 2, 15))
    kube_api.create("pods", gpu_pod("p", [3, 1], namespace="ml"))
    peer = SchedulerPeer(kube_api, url_of(extender()))
    before = time.time_ns()
    assert peer.schedule("ml", "p").node == "n1"
    pod = kube_api.get("pods", "p", "ml")
    notes = pod["metadata"]["annotations"]
    assert {k: notes[k] for k in GPUSHARE[:4]} == {
        "ALIYUN_COM_GPU_MEM_IDX": "0",
        "ALIYUN_COM_GPU_MEM_POD": "4",
        "ALIYUN_COM_GPU_MEM_DEV": "15",
        "ALIYUN_COM_GPU_MEM_ASSIGNED": "false",
    }
    assert before <= int(notes["ALIYUN_COM_GPU_MEM_ASSUME_TIME"]) <= time.time_ns()
    assert pod["spec"]["nodeName"] == "n1"
    writes = [(m, p) for m, p in kube_api.requests if m in ("PATCH", "POST")]
    assert writes == [
        ("PATCH", "/api/v1/namespaces/ml/pods/p"),
        ("POST", "/api/v1/namespaces/ml/pods/p/binding"),
    ]


def test_fifty_parallel_binds_never_overcommit(kube_api, extender):
    for i in range(5):
        kube_api.create("nodes", gpu_node(f"n{i}", 2, 8))
    sizes = [3, 2, 5, 1, 4] * 10
    for i, size in enumerate(sizes):
        kube_api.create("pods", gpu_pod(f"p{i}", size))
    ext = extender()
    peer = SchedulerPeer(kube_api, url_of(ext))
    nodes = peer.node_names()
    barrier = threading.Barrier(len(sizes), timeout=30)
    outcome: dict[str, str | None] = {}

    def cycle(i: int) -> None:
        pod = kube_api.get("pods", f"p{i}")
        result = peer.filter(pod, nodes)
        scores = peer.prioritize(pod, result["NodeNames"]) if result["NodeNames"] else {}
        barrier.wait()  # every bind races every other, on the node binpack ranks first
        best = max(scores, key=lambda n: (scores[n], n)) if scores else None
        outcome[f"p{i}"] = peer.bind(pod, best) if best else "no node"

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(len(sizes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcome) == len(sizes)
    bound = [name for name, error in outcome.items() if not error]
    assert bound, outcome
    assert max(gpu_usage(kube_api).values()) <= 8
    # Requeued pods (as kube-scheduler retries them) fill what is left, still within bounds.
    for i in range(len(sizes)):
        if outcome[f"p{i}"]:
            peer.schedule("default", f"p{i}")
    usage = gpu_usage(kube_api)
    assert all(units <= 8 for units in usage.values()), usage
    assert sum(usage.values()) >= 70  # 80 units in all; greedy placement leaves little
    wait_until(lambda: ext.state.assumed_count() == 0, what="watch confirms every bind")
    view = ext.state.inspect()
    for node in view["nodes"]:
        for dev in node["devs"]:
            assert dev["usedGPU"] == usage.get((node["name"], dev["id"]), 0)


def test_conflicting_patch_is_reread_and_retried(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    kube_api.create("pods", gpu_pod("p", 2))
    ext = extender()
    raced = []

    def race(method: str, path: str) -> None:
        # Someone else changes the pod just before the extender's first patch arrives.
        if method == "PATCH" and path.endswith("/pods/p") and not raced:
            raced.append(path)

            def relabel(pod: dict) -> dict:
                pod["metadata"].setdefault("labels", {})["touched"] = "yes"
                return pod

            kube_api.store.update("pods", ("default", "p"), relabel)

    kube_api.hooks.append(race)
    assert SchedulerPeer(kube_api, url_of(ext)).schedule("default", "p").node == "n1"
    pod = kube_api.get("pods", "p")
    assert pod["metadata"]["labels"]["touched"] == "yes"
    assert pod["metadata"]["annotations"][IDX] == "0"
    calls = [(m, p) for m, p in kube_api.requests if "/pods/p" in p]
    assert calls.count(("PATCH", "/api/v1/namespaces/default/pods/p")) == 2
    assert ("GET", "/api/v1/namespaces/default/pods/p") in calls


def test_failed_binding_rolls_back_annotations_and_units(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    kube_api.create("pods", gpu_pod("p", 6))
    ext = extender()
    peer = SchedulerPeer(kube_api, url_of(ext))
    kube_api.fault("POST", "/pods/p/binding", 500)
    decision = peer.schedule("default", "p")
    assert decision.node is None and "500" in decision.error
    pod = kube_api.get("pods", "p")
    assert not set(GPUSHARE) & set(pod["metadata"].get("annotations") or {})
    assert not pod["spec"].get("nodeName")
    assert ext.state.inspect()["nodes"][0]["usedGPU"] == 0
    # The next cycle succeeds. A retried bind to the same node succeeds without writing again;
    # a bind to another node is refused.
    assert peer.schedule("default", "p").node == "n1"
    kube_api.create("nodes", gpu_node("n2", 1, 8))
    writes = sum(m in ("PATCH", "POST") for m, _ in kube_api.requests)
    assert peer.bind(kube_api.get("pods", "p"), "n1") == ""
    assert "already bound to n1" in peer.bind(kube_api.get("pods", "p"), "n2")
    assert sum(m in ("PATCH", "POST") for m, _ in kube_api.requests) == writes


def test_assumed_units_are_released_when_the_bind_never_shows(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    kube_api.create("pods", gpu_pod("lost", 6))
    big = kube_api.create("pods", gpu_pod("big", 8))
    ext = extender(assume_timeout=0.5)
    peer = SchedulerPeer(kube_api, url_of(ext))
    kube_api.bindings_swallowed = True  # the API server acknowledges but never binds
    assert peer.schedule("default", "lost").node == "n1"
    assert peer.filter(big, ["n1"])["FailedNodes"]["n1"].startswith("no single GPU has 8")
    wait_until(lambda: ext.state.assumed_count() == 0, timeout=5, what="assumption expiry")
    assert peer.filter(big, ["n1"])["NodeNames"] == ["n1"]


def test_completed_and_deleted_pods_free_their_units(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    kube_api.create("pods", gpu_pod("a", 4))
    kube_api.create("pods", gpu_pod("b", 4))
    big = kube_api.create("pods", gpu_pod("big", 8))
    ext = extender()
    peer = SchedulerPeer(kube_api, url_of(ext))
    assert peer.schedule("default", "a").node == "n1"
    assert peer.schedule("default", "b").node == "n1"
    wait_until(lambda: ext.state.assumed_count() == 0)
    assert peer.filter(big, ["n1"])["NodeNames"] == []
    kube_api.set_phase("a", "Succeeded")
    wait_until(lambda: ext.state.nodes["n1"].view.free == (4,), what="completed pod freed")
    kube_api.delete("pods", "b")
    wait_until(lambda: ext.state.nodes["n1"].view.free == (8,), what="deleted pod freed")
    assert peer.schedule("default", "big").node == "n1"


def test_restart_rebuilds_the_identical_view(kube_api, extender):
    for i in range(4):
        kube_api.create("nodes", gpu_node(f"n{i}", 4, 16, ip=f"10.0.0.{i}"))
    first = extender()
    peer = SchedulerPeer(kube_api, url_of(first))
    for i in range(30):
        labels = {"aliyun.com/gpu-count": "2"} if i % 5 == 0 else None
        kube_api.create("pods", gpu_pod(f"p{i}", 2 + i % 7 * 2, labels=labels))
        peer.schedule("default", f"p{i}")
    kube_api.set_phase("p3", "Failed")
    kube_api.delete("pods", "p4")
    wait_until(lambda: first.state.assumed_count() == 0)
    wait_until(
        lambda: first.state.pod("default", "p4") is None, what="the watch shows the deletion"
    )
    first.stop()
    second = extender()
    assert second.state.inspect() == first.state.inspect()
    assert sum(n["usedGPU"] for n in second.state.inspect()["nodes"]) > 0


def test_watch_gone_leads_to_a_relist(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    ext = extender()
    pods_informer = next(i for i in ext.informers if i.resource == "pods")
    lists = pods_informer.relists
    armed = [True]

    def compact_before_rewatch(method: str, path: str) -> None:
        # While the watch is down, a pod changes and etcd compacts past the extender's
        # resourceVersion: the re-opened watch gets 410 Gone and the extender must re-list.
        if armed and method == "GET" and path == "/api/v1/pods":
            armed.clear()
            kube_api.create("pods", gpu_pod("b", 2, node="n1", annotations={IDX: "0"}))
            kube_api.store.compact()

    kube_api.create("pods", gpu_pod("a", 3, node="n1", annotations={IDX: "0"}))
    wait_until(lambda: ext.state.nodes["n1"].view.free == (5,), what="the watch shows a")
    kube_api.hooks.append(compact_before_rewatch)
    kube_api.store.close_watches()
    wait_until(lambda: ext.state.nodes["n1"].view.free == (3,), what="re-list after 410")
    assert pods_informer.relists > lists


def test_a_cluster_larger_than_a_list_page(kube_api, extender):
    for i in range(3):
        kube_api.create("nodes", gpu_node(f"n{i}", 8, 80))
    for i in range(1300):  # three pages of 500
        notes = {IDX: str(i % 8)}
        kube_api.create("pods", gpu_pod(f"p{i}", 1, node=f"n{i % 3}", annotations=notes))
    ext = extender()
    gets = [p for m, p in kube_api.requests if m == "GET" and p == "/api/v1/pods"]
    assert len(gets) >= 3
    assert len(ext.state.pods) == 1300
    assert sum(n["usedGPU"] for n in ext.state.inspect()["nodes"]) == 1300
