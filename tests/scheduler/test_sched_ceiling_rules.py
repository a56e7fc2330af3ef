"""The compute ceiling as pure rules, counted with --unlimited-neighbours=count (nodes without
the compute arbiter): beside u pods without a compute limit, the compute-limited pods of a GPU
get at most 100/(u+1)% together (see docs/operations-scheduler.md). Not counted by default."""

from __future__ import annotations

import random

from cgpu.scheduler.fit import NodeView, check, place, score
from cgpu.scheduler.podspec import GpuRequest
from cgpu.scheduler.state import ClusterState

CORE = "aliyun.com/gpu-core.percentage"
IDX = "ALIYUN_COM_GPU_MEM_IDX"


def view(placed: list[int], unlimited: list[int] | None, free: list[int] | None = None) -> NodeView:
    """A node of len(placed) GPUs of 16 units and 100% each: `placed` percent of compute-limited
    pods on each, `unlimited` pods without a limit (None: the ceiling is not counted)."""
    free = free or [16] * len(placed)
    counted = tuple(unlimited) if unlimited is not None else ()
    return NodeView(16, tuple(free), 0, None, 100, tuple(100 - p for p in placed), 0, None, counted)


def limited(percent: int, units: int = 2) -> GpuRequest:
    return GpuRequest(units, 1, compute=percent)


def test_a_limited_pod_fits_at_the_ceiling_and_not_one_percent_above() -> None:
    node = view([30], [1])
    assert place(node, limited(20), "binpack").gpus == (0,)
    assert check(node, limited(20)).fits
    refused = check(node, limited(21))
    assert not refused.fits and not refused.permanent  # freeing the GPU would help
    assert refused.reason == (
        "GPU 0 runs 1 pod without a compute limit: compute-limited pods there get at most "
        "50% together (30% placed, the pod needs 21%)"
    )
    # On an empty GPU beside one unlimited pod: 50 fits, 51 does not.
    assert check(view([0], [1]), limited(50)).fits
    assert not check(view([0], [1]), limited(51)).fits


def test_two_unlimited_pods_leave_a_third() -> None:
    node = view([0], [2])
    assert check(node, limited(33)).fits
    assert check(node, limited(34)).reason == (
        "GPU 0 runs 2 pods without a compute limit: compute-limited pods there get at most "
        "33% together (0% placed, the pod needs 34%)"
    )


def test_the_reason_names_the_gpu_with_the_most_room() -> None:
    node = view([40, 20, 0], [1, 1, 2])  # room: 10, 30, 33
    assert check(node, limited(34)).reason.startswith("GPU 2 runs 2 pods without")
    assert place(node, limited(31), "binpack").gpus == (2,)
    # A GPU that lacks the free compute anyway keeps today's reason.
    assert check(view([80], [1]), limited(30)).reason == (
        "no GPU has both 2 free units and 30% free compute (best: GPU 0 with 16 units and 20%)"
    )


def test_a_pod_without_a_limit_may_not_push_limited_pods_past_the_new_ceiling() -> None:
    memory = GpuRequest(4, 1)
    assert check(view([50], [0]), memory).fits  # 50 <= 100/2
    refused = check(view([51], [0]), memory)
    assert not refused.fits and not refused.permanent
    assert refused.reason == (
        "GPU 0 runs compute-limited pods with 51% placed: beside 1 pod without a compute limit "
        "(this one) they would get at most 50% together"
    )
    assert check(view([33], [1]), memory).fits  # 33 <= 100/3
    assert check(view([34], [1]), memory).reason == (
        "GPU 0 runs compute-limited pods with 34% placed: beside 2 pods without a compute "
        "limit (1 there now and this one) they would get at most 33% together"
    )
    # Another GPU of the node takes it instead.
    assert place(view([60, 10], [0, 0]), memory, "binpack").gpus == (1,)


def test_a_multi_gpu_pod_without_a_limit_is_checked_on_each_gpu() -> None:
    node = view([60, 0, 20], [0, 0, 1])
    assert place(node, GpuRequest(8, 2), "binpack").gpus == (1, 2)
    assert check(node, GpuRequest(12, 3)).reason == (
        "only 2 of 3 GPUs with 4 free units take a pod without a compute limit, the pod needs "
        "3 (aliyun.com/gpu-count=3): GPU 0 runs compute-limited pods with 60% placed: beside "
        "1 pod without a compute limit (this one) they would get at most 50% together"
    )
    # Too little memory is still reported as before.
    assert check(view([0, 0], [0, 0], [2, 2]), GpuRequest(6, 2)).reason == (
        "only 0 of 2 GPUs have 3 free units, the pod needs 2 (aliyun.com/gpu-count=2)"
    )


def test_ignore_gives_the_placement_without_the_ceiling() -> None:
    assert check(view([30], None), limited(70)).fits
    assert not check(view([30], None), limited(71)).fits
    assert check(view([0], None), limited(100)).fits
    assert check(view([90], None), GpuRequest(4, 1)).fits
    assert place(view([60, 10], None), GpuRequest(4, 1), "binpack").gpus == (0,)


def test_nodes_without_limited_pods_place_memory_pods_as_before() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        gpus = rng.randint(1, 4)
        free = [rng.randint(0, 16) for _ in range(gpus)]
        unlimited = [rng.randint(0, 3) for _ in range(gpus)]
        count = rng.randint(1, gpus)
        request = GpuRequest(count * rng.randint(1, 16), count)
        counted, ignored = view([0] * gpus, unlimited, free), view([0] * gpus, None, free)
        assert counted.closed == ()
        assert check(counted, request) == check(ignored, request)
        for policy in ("binpack", "spread"):
            assert place(counted, request, policy) == place(ignored, request, policy)
            assert score(counted, request, policy) == score(ignored, request, policy)


def test_rankings_see_the_compute_within_the_ceiling() -> None:
    # GPU 0: 40% placed beside an unlimited pod (10% usable); GPU 1: 70% placed (30% usable).
    node = view([40, 70], [1, 0])
    assert place(node, limited(10), "spread").gpus == (1,)
    assert place(node, limited(10), "binpack").gpus == (0,)
    assert place(view([40, 70], None), limited(10), "spread").gpus == (0,)
    # Node scores: the same node is fuller when its lost compute counts.
    full, free = view([40], [1]), view([40], None)
    assert score(full, limited(10), "spread") < score(free, limited(10), "spread")


def test_cluster_state_counts_pods_without_a_limit_on_each_of_their_gpus() -> None:
    def pod(name: str, units: int, percent: int, idx: str) -> dict:
        limits = {"aliyun.com/gpu-mem": str(units)}
        if percent:
            limits[CORE] = str(percent)
        return {
            "metadata": {"name": name, "namespace": "d", "uid": name, "annotations": {IDX: idx}},
            "spec": {
                "nodeName": "n",
                "containers": [{"name": "c", "resources": {"limits": limits}}],
            },
            "status": {"phase": "Running"},
        }

    node = {"metadata": {"name": "n"}, "status": {"allocatable": {
        "aliyun.com/gpu-mem": "32", "aliyun.com/gpu-count": "2", CORE: "200"}}}  # fmt: skip
    pods = [pod("wide", 4, 0, "0,1"), pod("one", 2, 0, "1"), pod("lim", 2, 30, "0"),
            pod("solo", 0, 10, "1")]  # fmt: skip
    counted, ignored = ClusterState(count_unlimited=True), ClusterState()  # ignored: the default
    for state in (counted, ignored):
        state.observe_node(node)
        for obj in pods:
            state.observe_pod(obj)
    assert counted.nodes["n"].view.unlimited == (1, 2)
    assert ignored.nodes["n"].view.unlimited == ()
    devs = counted.inspect()["nodes"][0]["devs"]
    assert [(d["unlimitedPods"], d["computeCeiling"], d["usedCompute"]) for d in devs] == [
        (1, 50, 30),
        (2, 33, 10),
    ]
    assert all("computeCeiling" not in d for d in ignored.inspect()["nodes"][0]["devs"])
    counted.forget_pod("one")
    assert counted.nodes["n"].view.unlimited == (1, 1)
