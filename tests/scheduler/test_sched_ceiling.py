"""The compute ceiling through the extender's HTTP verbs, the fake API server and a
kube-scheduler-shaped peer. On a node without the compute arbiter, beside u pods without a
compute limit (never gated there), a GPU's compute-limited pods get at most 100/(u+1)% together:
with --unlimited-neighbours=count the extender places no more there. By default (ignore: under
the arbiter those pods are best effort) limits add up to 100 per GPU whatever runs beside them.
"""

from __future__ import annotations

import subprocess
import threading
from collections import defaultdict
from typing import Any

from compute_objects import CORE, compute_node, compute_pod
from kube.objects import gpu_pod
from kube_scheduler import KubeScheduler
from sched_peer import (
    PREFIX,
    SchedulerPeer,
    extender_cli,
    extender_command,
    extender_env,
    get,
    url_of,
    wait_until,
)

IDX = "ALIYUN_COM_GPU_MEM_IDX"
MEM = "aliyun.com/gpu-mem"


def running(name: str, units: int, percent: int, node: str) -> dict[str, Any]:
    return compute_pod(name, units, percent, node=node, annotations={IDX: "0"}, phase="Running")


def gpus_from_pods(api) -> dict[str, tuple[int, int]]:
    """(compute-limited percent, pods without a limit) on GPU 0 of each node, from the API
    server's active bound pods (their limits and the extender's annotations)."""
    seen: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for pod in api.pods():
        node = pod["spec"].get("nodeName")
        if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        assert pod["metadata"]["annotations"][IDX] == "0"
        limits = [(c.get("resources") or {}).get("limits") or {} for c in pod["spec"]["containers"]]
        percent = sum(int(lim.get(CORE, 0)) for lim in limits)
        seen[node][0] += percent
        seen[node][1] += not percent
    return {node: (placed, unlimited) for node, (placed, unlimited) in seen.items()}


def test_limited_pods_are_placed_within_the_ceiling(kube_api, extender):
    kube_api.create("nodes", compute_node("n1", 1, 16))
    kube_api.create("nodes", compute_node("n2", 1, 16))
    kube_api.create("pods", running("notebook", 4, 0, "n1"))  # no compute limit
    kube_api.create("pods", running("train", 4, 60, "n2"))
    for name, units, percent in (("a", 2, 45), ("b", 2, 10), ("c", 2, 0), ("d", 2, 10)):
        kube_api.create("pods", compute_pod(name, units, percent))
    ext = extender(unlimited_neighbours="count")
    scheduler = KubeScheduler(kube_api, url_of(ext), managed=(MEM, CORE), seed=3)

    # a: 45% fits n1 (50% beside the notebook); n2 has 40% free.
    decision = scheduler.schedule_one("default", "a")
    assert decision.node == "n1", decision
    assert decision.failed == {
        "n2": "no GPU has both 2 free units and 45% free compute "
        "(best: GPU 0 with 12 units and 40%)"
    }
    # b: n1 has 55% free, but its limited pods get 50% together beside the notebook.
    decision = scheduler.schedule_one("default", "b")
    assert decision.node == "n2", decision
    assert decision.failed == {
        "n1": "GPU 0 runs 1 pod without a compute limit: compute-limited pods there get at "
        "most 50% together (45% placed, the pod needs 10%)"
    }
    # c asks for no compute: beside it, a's 45% (n1) or train + b's 70% (n2) could not hold.
    decision = scheduler.schedule_one("default", "c")
    assert decision.node is None
    assert decision.failed == {
        "n1": "GPU 0 runs compute-limited pods with 45% placed: beside 2 pods without a "
        "compute limit (1 there now and this one) they would get at most 33% together",
        "n2": "GPU 0 runs compute-limited pods with 70% placed: beside 1 pod without a "
        "compute limit (this one) they would get at most 50% together",
    }
    # The notebook ends: c takes its place on n1, and d goes where its 10% holds.
    kube_api.set_phase("notebook", "Succeeded")
    wait_until(lambda: ext.state.pod("default", "notebook") is None, what="the notebook gone")
    assert scheduler.schedule_one("default", "c").node == "n1"
    assert scheduler.schedule_one("default", "d").node == "n2"
    assert gpus_from_pods(kube_api) == {"n1": (45, 1), "n2": (80, 0)}

    # The inspect endpoint shows the ceiling beside the compute placed.
    wait_until(lambda: ext.state.assumed_count() == 0)
    status, body = get(f"{url_of(ext)}{PREFIX}/inspect")
    assert status == 200
    devs = {n["name"]: n["devs"][0] for n in body["nodes"]}
    assert (devs["n1"]["usedCompute"], devs["n1"]["unlimitedPods"]) == (45, 1)
    assert devs["n1"]["computeCeiling"] == 50
    assert devs["n2"]["usedCompute"] == 80 and "computeCeiling" not in devs["n2"]

    # A restarted extender rebuilds the same view from the pods and refuses the same.
    restarted = extender(unlimited_neighbours="count")
    assert restarted.state.inspect() == ext.state.inspect()
    late = kube_api.create("pods", compute_pod("late", 1, 10))
    assert SchedulerPeer(kube_api, url_of(restarted)).filter(late, ["n1"])["FailedNodes"] == {
        "n1": "GPU 0 runs 1 pod without a compute limit: compute-limited pods there get at "
        "most 50% together (45% placed, the pod needs 10%)"
    }


def test_parallel_binds_keep_every_gpu_within_its_ceiling(kube_api, extender):
    for i in range(3):
        kube_api.create("nodes", compute_node(f"n{i}", 1, 64))
    kube_api.create("pods", running("nb0", 2, 0, "n0"))
    kube_api.create("pods", running("nb1", 2, 0, "n1"))
    kube_api.create("pods", running("nb2", 2, 0, "n1"))
    shares = [20, 10, 15, 5, 0] * 8  # every fifth asks for no compute
    for i, share in enumerate(shares):
        kube_api.create("pods", compute_pod(f"p{i}", 1, share))
    ext = extender(unlimited_neighbours="count")
    peer = SchedulerPeer(kube_api, url_of(ext))
    barrier = threading.Barrier(len(shares), timeout=30)
    errors: dict[str, str] = {}

    def cycle(i: int) -> None:
        pod = kube_api.get("pods", f"p{i}")
        passed = peer.filter(pod, ["n0", "n1", "n2"])["NodeNames"]
        barrier.wait()  # every bind races every other
        errors[f"p{i}"] = peer.bind(pod, passed[i % len(passed)]) if passed else "no node"

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(len(shares))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(errors) == len(shares)
    assert any(e == "" for e in errors.values()) and any(errors.values())
    for node, (placed, unlimited) in gpus_from_pods(kube_api).items():
        assert placed <= 100 // (unlimited + 1), (node, placed, unlimited)


def test_by_default_limits_add_up_to_100_beside_pods_without_a_limit(kube_api, tmp_path):
    kube_api.create("nodes", compute_node("n1", 1, 16))
    kube_api.create("pods", running("notebook", 4, 0, "n1"))
    kube_api.create("pods", running("a", 2, 45, "n1"))
    kube_api.create("pods", compute_pod("b", 2, 55))
    kube_api.create("pods", gpu_pod("c", 2))
    kube_api.create("pods", compute_pod("d", 2, 1))
    with extender_cli(kube_api, tmp_path) as (url, log_path):  # no --unlimited-neighbours
        peer = SchedulerPeer(kube_api, url)
        assert peer.schedule("default", "b").node == "n1"  # 100% placed beside the notebook
        assert peer.schedule("default", "c").node == "n1"  # a second pod without a limit
        decision = peer.schedule("default", "d")  # but never past 100
        assert decision.node is None
        assert decision.failed == {
            "n1": "no GPU has both 2 free units and 1% free compute "
            "(best: GPU 0 with 6 units and 0%)"
        }
        status, body = get(f"{url}{PREFIX}/inspect")
        dev = body["nodes"][0]["devs"][0]
        assert status == 200 and dev["usedCompute"] == 100 and "computeCeiling" not in dev
    assert "unlimited neighbours: ignore" in log_path.read_text()
    assert gpus_from_pods(kube_api) == {"n1": (100, 2)}


def test_the_option_count_refuses_past_the_ceiling(kube_api, tmp_path):
    kube_api.create("nodes", compute_node("n1", 1, 16))
    kube_api.create("pods", running("notebook", 4, 0, "n1"))
    kube_api.create("pods", running("a", 2, 45, "n1"))
    kube_api.create("pods", compute_pod("b", 2, 10))
    kube_api.create("pods", compute_pod("e", 2, 5))
    with extender_cli(kube_api, tmp_path, "--unlimited-neighbours", "count") as (url, log_path):
        peer = SchedulerPeer(kube_api, url)
        decision = peer.schedule("default", "b")
        assert decision.node is None
        assert decision.failed == {
            "n1": "GPU 0 runs 1 pod without a compute limit: compute-limited pods there get at "
            "most 50% together (45% placed, the pod needs 10%)"
        }
        assert peer.schedule("default", "e").node == "n1"  # 50%: at the ceiling
        status, body = get(f"{url}{PREFIX}/inspect")
        assert status == 200 and body["nodes"][0]["devs"][0]["computeCeiling"] == 50
    assert "unlimited neighbours: count" in log_path.read_text()
    command = extender_command(kube_api, tmp_path, "--unlimited-neighbours", "sometimes")
    bad = subprocess.run(command, env=extender_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--unlimited-neighbours" in bad.stderr
