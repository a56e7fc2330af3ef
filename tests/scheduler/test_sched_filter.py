"""Filter and prioritize over real HTTP, with the JSON kube-scheduler sends."""

from __future__ import annotations

import pytest
from kube.objects import gpu_node, gpu_pod
from sched_peer import PREFIX, SchedulerPeer, post, url_of

IDX = "ALIYUN_COM_GPU_MEM_IDX"


def running(name: str, units: int, node: str, idx: str, **kw) -> dict:
    return gpu_pod(name, units, node=node, annotations={IDX: idx}, phase="Running", **kw)


@pytest.mark.parametrize("node_cache_capable", [True, False])
def test_fragmentation_is_refused_with_a_human_reason(kube_api, extender, node_cache_capable):
    kube_api.create("nodes", gpu_node("frag", 2, 8))
    kube_api.create("nodes", gpu_node("roomy", 2, 8))
    kube_api.create("pods", running("x", 5, "frag", "0"))
    kube_api.create("pods", running("y", 5, "frag", "1"))
    pod = kube_api.create("pods", gpu_pod("want4", 4))
    peer = SchedulerPeer(kube_api, url_of(extender()), node_cache_capable)

    result = peer.filter(pod, ["frag", "roomy"])
    assert result["Error"] == ""
    assert result["FailedNodes"] == {"frag": "no single GPU has 4 free units (largest free: 3)"}
    if node_cache_capable:
        assert result["NodeNames"] == ["roomy"]
    else:
        assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["roomy"]
        assert result["Nodes"]["items"][0] == kube_api.get("nodes", "roomy")
    # 6 units are free on "frag" in all, but no GPU has 4: the pod must not go there.
    assert peer.schedule("default", "want4").node == "roomy"


def test_gpu_count_needs_m_distinct_gpus_each_holding_n_over_m(kube_api, extender):
    kube_api.create("nodes", gpu_node("four", 4, 4))
    kube_api.create("nodes", gpu_node("two", 2, 16))
    kube_api.create("pods", running("busy", 2, "four", "3"))  # GPU3: 2 of 4 free
    quad = kube_api.create("pods", gpu_pod("quad", 8, gpu_count=4))
    triple = kube_api.create("pods", gpu_pod("triple", 6, gpu_count=3))
    uneven = kube_api.create("pods", gpu_pod("uneven", 7, gpu_count=2))
    peer = SchedulerPeer(kube_api, url_of(extender()))

    result = peer.filter(quad, ["four", "two"])
    assert result["NodeNames"] == ["four"]
    assert result["FailedAndUnresolvableNodes"] == {
        "two": "pod needs 4 GPUs (aliyun.com/gpu-count=4), the node has 2"
    }
    result = peer.filter(triple, ["four"])
    assert result["NodeNames"] == ["four"]  # 2 units on each of 3 GPUs
    result = peer.filter(uneven, ["four", "two"])
    assert result["NodeNames"] == []
    reason = "aliyun.com/gpu-mem=7 does not split evenly over aliyun.com/gpu-count=2 GPUs"
    assert result["FailedAndUnresolvableNodes"] == {"four": reason, "two": reason}

    # The quad pod takes 2 units on each GPU; GPU3 is then full and a second one cannot fit.
    assert peer.schedule("default", "quad").node == "four"
    notes = kube_api.get("pods", "quad")["metadata"]["annotations"]
    assert notes[IDX] == "0,1,2,3"
    assert notes["ALIYUN_COM_GPU_MEM_POD"] == "8" and notes["ALIYUN_COM_GPU_MEM_DEV"] == "4"
    second = kube_api.create("pods", gpu_pod("quad2", 8, gpu_count=4))
    result = peer.filter(second, ["four"])
    assert result["FailedNodes"] == {
        "four": "only 3 of 4 GPUs have 2 free units, the pod needs 4 (aliyun.com/gpu-count=4)"
    }


def test_unknown_nodes_malformed_quantities_and_labels(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    bad_node = gpu_node("bad", 1, 8)
    bad_node["status"]["allocatable"]["aliyun.com/gpu-mem"] = "lots"
    kube_api.create("nodes", bad_node)
    plain = kube_api.create("nodes", {"metadata": {"name": "cpu-only"}, "status": {}})
    peer = SchedulerPeer(kube_api, url_of(extender()))
    pod = kube_api.create("pods", gpu_pod("p", 2))

    result = peer.filter(pod, ["n1", "ghost", "bad", "cpu-only"])
    assert result["NodeNames"] == ["n1"]
    assert "unknown" in result["FailedNodes"]["ghost"]
    assert "lots" in result["FailedAndUnresolvableNodes"]["bad"]
    assert "no aliyun.com/gpu-mem" in result["FailedAndUnresolvableNodes"]["cpu-only"]
    assert plain["metadata"]["name"] == "cpu-only"

    weird = gpu_pod("weird", 2)
    weird["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "2.5"
    result = peer.filter(weird, ["n1"])
    assert "is not a whole number" in result["FailedAndUnresolvableNodes"]["n1"]
    counted = gpu_pod("counted", 2)
    counted["metadata"]["labels"]["aliyun.com/gpu-count"] = "two"
    result = peer.filter(counted, ["n1"])
    assert "is not a positive integer" in result["FailedAndUnresolvableNodes"]["n1"]
    policy = gpu_pod("policy", 2, annotations={"cgpu.io/gpu-policy": "random"})
    result = peer.filter(policy, ["n1"])
    assert "cgpu.io/gpu-policy" in result["FailedAndUnresolvableNodes"]["n1"]
    # A pod that asks for no GPU memory passes everywhere.
    cpu_pod = gpu_pod("cpu", 0)
    assert peer.filter(cpu_pod, ["n1", "ghost"])["NodeNames"] == ["n1", "ghost"]


def seed_policy_cluster(api) -> None:
    api.create("nodes", gpu_node("full", 2, 8))
    api.create("nodes", gpu_node("empty", 2, 8))
    api.create("pods", running("f0", 6, "full", "0"))
    api.create("pods", running("f1", 2, "full", "1"))


def test_node_policies_and_pod_override(kube_api, extender):
    seed_policy_cluster(kube_api)
    pod = kube_api.create("pods", gpu_pod("p", 2))
    spread_pod = kube_api.create(
        "pods", gpu_pod("s", 2, annotations={"cgpu.io/node-policy": "spread"})
    )

    binpack = SchedulerPeer(kube_api, url_of(extender()))
    scores = binpack.prioritize(pod, ["full", "empty"])
    assert scores["full"] > scores["empty"]
    assert all(0 <= s <= 10 for s in scores.values())
    scores = binpack.prioritize(spread_pod, ["full", "empty"])
    assert scores["empty"] > scores["full"]

    spread = SchedulerPeer(kube_api, url_of(extender(node_policy="spread")))
    scores = spread.prioritize(pod, ["full", "empty"])
    assert scores["empty"] > scores["full"]
    binpack_pod = kube_api.create(
        "pods", gpu_pod("b", 2, annotations={"cgpu.io/node-policy": "binpack"})
    )
    scores = spread.prioritize(binpack_pod, ["full", "empty"])
    assert scores["full"] > scores["empty"]
    assert binpack.schedule("default", "p").node == "full"
    assert spread.schedule("default", "s").node == "empty"


def test_gpu_policies_and_pod_override(kube_api, extender):
    seed_policy_cluster(kube_api)  # "full": GPU0 has 2 free, GPU1 has 6 free
    for name, notes in (("p", {}), ("q", {"cgpu.io/gpu-policy": "spread"})):
        kube_api.create("pods", gpu_pod(name, 2, annotations=notes))
    binpack = SchedulerPeer(kube_api, url_of(extender()))
    assert binpack.schedule("default", "p", ["full"]).node == "full"
    assert kube_api.get("pods", "p")["metadata"]["annotations"][IDX] == "0"  # the fullest fit
    assert binpack.schedule("default", "q", ["full"]).node == "full"
    assert kube_api.get("pods", "q")["metadata"]["annotations"][IDX] == "1"  # the emptiest

    spread = SchedulerPeer(kube_api, url_of(extender(gpu_policy="spread")))
    kube_api.create("pods", gpu_pod("r", 1))
    kube_api.create("pods", gpu_pod("t", 1, annotations={"cgpu.io/gpu-policy": "binpack"}))
    assert spread.schedule("default", "r", ["empty"]).node == "empty"
    assert kube_api.get("pods", "r")["metadata"]["annotations"][IDX] == "0"
    # Now GPU0 has 7 free, GPU1 8: spread picks 1, the binpack override picks 0.
    kube_api.create("pods", gpu_pod("r2", 1))
    assert spread.schedule("default", "r2", ["empty"]).node == "empty"
    assert kube_api.get("pods", "r2")["metadata"]["annotations"][IDX] == "1"
    assert spread.schedule("default", "t", ["empty"]).node == "empty"
    assert kube_api.get("pods", "t")["metadata"]["annotations"][IDX] == "0"


def test_malformed_bodies_get_errors_and_the_server_lives(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 1, 8))
    url = url_of(extender())
    for path in ("filter", "bind"):
        status, body = post(f"{url}{PREFIX}/{path}", None, raw=b"{not json")
        assert status == 200 and "malformed JSON" in body["Error"]
    status, body = post(f"{url}{PREFIX}/prioritize", None, raw=b"[1,2")
    assert status == 400 and "malformed JSON" in body["Error"]
    for bad in ([], {"Pod": "x", "NodeNames": ["n1"]}, {"Pod": {}, "NodeNames": "n1"},
                {"Pod": {}}, {"Pod": {}, "Nodes": {"items": [1]}}):  # fmt: skip
        status, body = post(f"{url}{PREFIX}/filter", bad)
        assert status == 200 and body["Error"], bad
        status, body = post(f"{url}{PREFIX}/prioritize", bad)
        assert status == 400 and body["Error"], bad
    for bad in ({}, {"PodName": 3, "PodNamespace": "d", "Node": "n1"}, "x"):
        status, body = post(f"{url}{PREFIX}/bind", bad)
        assert status == 200 and body["Error"], bad
    status, body = post(f"{url}{PREFIX}/bind", {"PodName": "ghost", "PodNamespace": "default",
                                                 "PodUID": "u", "Node": "n1"})  # fmt: skip
    assert "404" in body["Error"]
    # Go's decoder matches keys without regard to case; so does the extender.
    pod = kube_api.create("pods", gpu_pod("p", 2))
    status, body = post(f"{url}{PREFIX}/filter", {"pod": pod, "nodenames": ["n1"]})
    assert body["NodeNames"] == ["n1"]
    assert SchedulerPeer(kube_api, url).schedule("default", "p").node == "n1"
