"""The compute share (aliyun.com/gpu-core.percentage) in filter, prioritize and bind.

Memory and compute of a pod must land on one GPU: the extender's GPU index names it for both.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from compute_objects import CORE, compute_node, compute_pod, schedule
from kube.objects import gpu_node, gpu_pod
from sched_peer import SchedulerPeer, url_of, wait_until

IDX = "ALIYUN_COM_GPU_MEM_IDX"


def running(name: str, units: int, percent: int, node: str, idx: str) -> dict[str, Any]:
    return compute_pod(name, units, percent, node=node, annotations={IDX: idx}, phase="Running")


def usage(api) -> dict[tuple[str, int], tuple[int, int]]:
    """(memory units, compute percent) on each (node, GPU) from the API server's bound pods."""
    used: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for pod in api.pods():
        node = pod["spec"].get("nodeName")
        if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        gpu = int(pod["metadata"]["annotations"][IDX])
        for container in pod["spec"]["containers"]:
            limits = (container.get("resources") or {}).get("limits") or {}
            used[(node, gpu)][0] += int(limits.get("aliyun.com/gpu-mem", 0))
            used[(node, gpu)][1] += int(limits.get(CORE, 0))
    return {key: (m, c) for key, (m, c) in used.items()}


def test_filter_needs_one_gpu_with_both_memory_and_compute(kube_api, extender):
    kube_api.create("nodes", compute_node("split", 2, 8))
    kube_api.create("nodes", compute_node("roomy", 2, 8))
    kube_api.create("nodes", gpu_node("memonly", 2, 8))
    # GPU0 has memory but little compute, GPU1 compute but little memory.
    kube_api.create("pods", running("a", 2, 80, "split", "0"))  # GPU0: 6 units, 20%
    kube_api.create("pods", running("b", 6, 10, "split", "1"))  # GPU1: 2 units, 90%
    pod = kube_api.create("pods", compute_pod("want", 4, 30))
    peer = SchedulerPeer(kube_api, url_of(extender()))

    result = peer.filter(pod, ["split", "roomy", "memonly"])
    assert result["Error"] == ""
    assert result["NodeNames"] == ["roomy"]
    assert result["FailedNodes"] == {
        "split": "no GPU has both 4 free units and 30% free compute "
        "(best: GPU 0 with 6 units and 20%)"
    }
    assert result["FailedAndUnresolvableNodes"] == {"memonly": f"node advertises no {CORE}"}
    # The same pod without compute fits GPU0's 6 units beside pod a's 80%: by default it is
    # best effort there (the compute arbiter serves a first). With --unlimited-neighbours=count
    # (nodes without the arbiter) pod a would get at most 50% beside it (the compute ceiling).
    plain = kube_api.create("pods", gpu_pod("plain", 4))
    assert peer.filter(plain, ["split"])["NodeNames"] == ["split"]
    strict = SchedulerPeer(kube_api, url_of(extender(unlimited_neighbours="count")))
    assert strict.filter(plain, ["split"])["FailedNodes"] == {
        "split": "GPU 0 runs compute-limited pods with 80% placed: beside 1 pod without a "
        "compute limit (this one) they would get at most 50% together"
    }
    assert schedule(peer, "want") == "roomy"


def test_compute_only_pods_need_only_compute(kube_api, extender):
    kube_api.create("nodes", compute_node("n1", 2, 4))
    kube_api.create("pods", running("full", 4, 60, "n1", "0"))  # GPU0: no memory left, 40%
    kube_api.create("pods", running("busy", 0, 70, "n1", "1"))  # GPU1: all memory, 30%
    small = kube_api.create("pods", compute_pod("small", 0, 40))
    big = kube_api.create("pods", compute_pod("big", 0, 50))
    peer = SchedulerPeer(kube_api, url_of(extender()))

    assert peer.filter(small, ["n1"])["NodeNames"] == ["n1"]
    assert peer.filter(big, ["n1"])["FailedNodes"] == {
        "n1": "no GPU has 50% free compute (most free: 40%)"
    }
    assert schedule(peer, "small") == "n1"
    notes = kube_api.get("pods", "small")["metadata"]["annotations"]
    # A compute-only pod needs no memory: GPU0, whose memory is all taken, holds its 40%.
    assert notes[IDX] == "0"
    assert notes["ALIYUN_COM_GPU_MEM_POD"] == "0"
    assert notes["ALIYUN_COM_GPU_MEM_DEV"] == "4"


def test_bad_compute_requests_are_unresolvable_with_reasons(kube_api, extender):
    kube_api.create("nodes", compute_node("n1", 4, 8))
    over = kube_api.create("pods", compute_pod("over", 2, 120))
    summed = kube_api.create("pods", compute_pod("summed", [1, 1], [60, 50]))
    multi = kube_api.create("pods", compute_pod("multi", 4, 20, gpu_count=2))
    junk = kube_api.create("pods", compute_pod("junk", 2, 0))
    junk["spec"]["containers"][0]["resources"]["limits"][CORE] = "30%"
    peer = SchedulerPeer(kube_api, url_of(extender()))

    def reason(pod: dict[str, Any]) -> str:
        result = peer.filter(pod, ["n1"])
        assert result["NodeNames"] == [] and result["FailedNodes"] == {}
        return result["FailedAndUnresolvableNodes"]["n1"]

    assert reason(over) == (
        f"container c0 asks for 120 {CORE}: a container gets at most 100 (one GPU's compute)"
    )
    assert reason(summed) == (
        f"the pod's containers ask for 110 {CORE} in all: they share one GPU, which has 100"
    )
    assert reason(multi) == (
        f"{CORE}=20 with aliyun.com/gpu-count=2: a compute share applies to a one-GPU container"
    )
    assert reason(junk) == f"container c0 {CORE}='30%' is not a Kubernetes quantity"
    assert peer.bind(multi, "n1").endswith("a compute share applies to a one-GPU container")
    assert kube_api.get("pods", "multi")["spec"].get("nodeName") is None


def test_malformed_node_compute_capacity_takes_no_compute_pods(kube_api, extender):
    node = compute_node("odd", 1, 8)
    node["status"]["allocatable"][CORE] = "lots"
    kube_api.create("nodes", node)
    share = kube_api.create("pods", compute_pod("share", 1, 10))
    plain = kube_api.create("pods", gpu_pod("plain", 1))
    peer = SchedulerPeer(kube_api, url_of(extender()))
    assert peer.filter(share, ["odd"])["FailedAndUnresolvableNodes"] == {
        "odd": f"node capacity {CORE}='lots' is not a Kubernetes quantity"
    }
    assert peer.filter(plain, ["odd"])["NodeNames"] == ["odd"]


def test_gpu_policies_weigh_memory_and_compute(kube_api, extender):
    kube_api.create("nodes", compute_node("n1", 3, 10))
    kube_api.create("pods", running("m", 6, 0, "n1", "0"))  # GPU0: 40% memory, 100% compute
    kube_api.create("pods", running("c", 2, 70, "n1", "1"))  # GPU1: 80% memory, 30% compute
    kube_api.create("pods", compute_pod("pack", 2, 20))
    peer = SchedulerPeer(kube_api, url_of(extender(gpu_policy="binpack")))
    # Left free (memory + compute fractions): GPU0 1.4, GPU1 1.1, GPU2 2.0. Memory alone
    # would pick GPU0 (fewest free units).
    assert schedule(peer, "pack") == "n1"
    assert kube_api.get("pods", "pack")["metadata"]["annotations"][IDX] == "1"


def test_spread_policy_takes_the_emptiest_gpu_by_both(kube_api, extender):
    kube_api.create("nodes", compute_node("n1", 2, 10))
    kube_api.create("pods", running("m", 3, 0, "n1", "0"))  # GPU0 left: 0.7 + 1.0 = 1.7
    kube_api.create("pods", running("c", 0, 40, "n1", "1"))  # GPU1 left: 1.0 + 0.6 = 1.6
    kube_api.create("pods", compute_pod("p", 1, 10))
    peer = SchedulerPeer(kube_api, url_of(extender(gpu_policy="spread")))
    assert schedule(peer, "p") == "n1"
    assert kube_api.get("pods", "p")["metadata"]["annotations"][IDX] == "0"  # memory alone: 1


def test_node_scores_count_compute(kube_api, extender):
    kube_api.create("nodes", compute_node("busy", 1, 10))
    kube_api.create("nodes", compute_node("idle", 1, 10))
    kube_api.create("nodes", gpu_node("old", 1, 10))
    kube_api.create("pods", running("hog", 0, 80, "busy", "0"))  # compute only
    pod = kube_api.create("pods", compute_pod("p", 2, 10))
    plain = kube_api.create("pods", gpu_pod("q", 2))
    peer = SchedulerPeer(kube_api, url_of(extender(node_policy="binpack")))
    # busy: memory 20% after, compute 90% after -> 5.5; idle: 20%, 10% -> 1.5.
    assert peer.prioritize(pod, ["busy", "idle"]) == {"busy": 6, "idle": 2}
    # A memory-only pod on the same nodes: compute taken by others still counts as fullness
    # (with the ceiling counted, "busy" does not fit it beside the hog's 80%).
    assert peer.prioritize(plain, ["busy", "idle", "old"]) == {"busy": 5, "idle": 1, "old": 2}
    strict = extender(node_policy="binpack", unlimited_neighbours="count")
    scores = SchedulerPeer(kube_api, url_of(strict)).prioritize(plain, ["busy", "idle", "old"])
    assert scores == {"busy": 0, "idle": 1, "old": 2}


def test_fifty_parallel_binds_never_overcommit_compute(kube_api, extender):
    for i in range(3):
        kube_api.create("nodes", compute_node(f"n{i}", 2, 100))
    shares = [30, 20, 50, 10, 40] * 10  # 1500% asked of 600%
    for i, share in enumerate(shares):
        kube_api.create("pods", compute_pod(f"p{i}", i % 3, share))
    ext = extender()
    peer = SchedulerPeer(kube_api, url_of(ext))
    nodes = peer.node_names()
    barrier = threading.Barrier(len(shares), timeout=30)
    outcome: dict[str, str | None] = {}

    def cycle(i: int) -> None:
        pod = kube_api.get("pods", f"p{i}")
        result = peer.filter(pod, nodes)
        scores = peer.prioritize(pod, result["NodeNames"]) if result["NodeNames"] else {}
        barrier.wait()  # every bind races every other
        best = max(scores, key=lambda n: (scores[n], n)) if scores else None
        outcome[f"p{i}"] = peer.bind(pod, best) if best else "no node"

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(len(shares))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    bound = [p for p, err in outcome.items() if err == ""]
    refused = [err for err in outcome.values() if err]
    assert len(bound) + len(refused) == len(shares)
    assert bound and refused
    assert all("compute" in err for err in refused if err != "no node"), refused
    used = usage(kube_api)
    assert all(percent <= 100 for _, percent in used.values()), used
    wait_until(lambda: ext.state.assumed_count() == 0)
    view = ext.state.inspect()
    seen = {(n["name"], d["id"]): d["usedCompute"] for n in view["nodes"] for d in n["devs"]}
    assert seen == {key: used.get(key, (0, 0))[1] for key in seen}


def test_restart_rebuilds_compute_from_pods(kube_api, extender):
    kube_api.create("nodes", compute_node("n1", 2, 8))
    # These placements put p3 (no compute limit) beside 90% of limited pods: the default
    # ignores the ceiling (test_sched_ceiling.py rebuilds a counted one).
    first = extender()
    peer = SchedulerPeer(kube_api, url_of(first))
    for i, (units, share) in enumerate([(2, 60), (0, 30), (3, 50), (1, 0), (2, 40)]):
        kube_api.create("pods", compute_pod(f"p{i}", units, share))
        assert schedule(peer, f"p{i}") == "n1"
    kube_api.set_phase("p0", "Succeeded")
    wait_until(lambda: first.state.assumed_count() == 0)
    wait_until(lambda: first.state.pod("default", "p0") is None, what="the watch shows p0 done")
    view = first.state.inspect()
    first.stop()
    second = extender()
    assert second.state.inspect() == view
    node = view["nodes"][0]
    assert (node["totalCompute"], node["usedCompute"]) == (200, 120)
    # What the restarted extender knows still refuses over-commit: 80% is free in all, not 90%.
    kube_api.create("pods", compute_pod("late", 0, 90))
    assert schedule(SchedulerPeer(kube_api, url_of(second)), "late") is None


def test_compute_of_pods_bound_without_an_index_counts_on_the_node(kube_api, extender):
    kube_api.create("nodes", compute_node("n1", 1, 8))
    # Bound by something other than the extender: no GPU index, but it holds its 70%.
    kube_api.create("pods", compute_pod("stray", 1, 70, node="n1", phase="Running"))
    pod = kube_api.create("pods", compute_pod("want", 1, 40))
    peer = SchedulerPeer(kube_api, url_of(extender()))
    assert peer.filter(pod, ["n1"])["FailedNodes"] == {
        "n1": "pods bound without a GPU index hold 70% compute: 30% left, the pod needs 40%"
    }
    kube_api.create("pods", compute_pod("fits", 1, 30))
    assert schedule(peer, "fits") == "n1"
