"""`kubectl inspect cgpu` on a cluster that uses the compute share (aliyun.com/gpu-core.percentage).

The compute columns appear only when some node advertises the resource; the seeds' clusters,
which do not, keep gpushare's text (test_inspect_seeds.py).
"""

from __future__ import annotations

import json
from typing import Any

from kube.objects import gpu_node, gpu_pod

CORE = "aliyun.com/gpu-core.percentage"
IDX = "ALIYUN_COM_GPU_MEM_IDX"

SUMMARY = """\
NAME   IPADDRESS  GPU0(Allocated/Total)  GPU1(Allocated/Total)  PENDING(Allocated)  GPU Memory(GiB)  GPU0(Compute %)  GPU1(Compute %)  GPU Compute(%)
gpu-a  10.0.0.1   4/15                   2/15                   1                   7/30             30/100           20/100           60/200
gpu-b  10.0.0.2   3/15                   0/0                                        3/15             0/0              0/0              0/0
-------------------------------------------------------------------------
Allocated/Total GPU Memory In Cluster:
10/45 (22%)
Allocated/Total GPU Compute In Cluster (%):
60/200 (30%)
"""  # noqa: E501

DETAILS_GPU_A = """\
NAME:       gpu-a
IPADDRESS:  10.0.0.1

NAME                 NAMESPACE  GPU0(Allocated)  GPU1(Allocated)  Pending(Allocated)  GPU0(Compute %)  GPU1(Compute %)  Pending(Compute %)
train                default    4                0                0                   30               0                0
infer                default    0                0                0                   0                20               0
plain                default    0                2                0                   0                0                0
lost                 default    0                0                1                   0                0                10
Allocated :          7 (23%)
Total :              30
Allocated Compute :  60% (30%)
Total Compute :      200%
"""  # noqa: E501


def compute_node(name: str, gpus: int, units: int, ip: str) -> dict[str, Any]:
    node = gpu_node(name, gpus, units, ip=ip)
    for section in ("capacity", "allocatable"):
        node["status"][section][CORE] = str(100 * gpus)
    return node


def running(name: str, node: str, units: int, percent: int, idx: str | None) -> dict[str, Any]:
    pod = gpu_pod(name, units, node=node, annotations={IDX: idx} if idx else {}, phase="Running")
    if percent:
        pod["spec"]["containers"][0].setdefault("resources", {}).setdefault("limits", {})[CORE] = (
            str(percent)
        )
    return pod


def build(api) -> None:
    api.create("nodes", compute_node("gpu-a", 2, 15, "10.0.0.1"))
    api.create("nodes", gpu_node("gpu-b", 1, 15, ip="10.0.0.2"))  # no compute share here
    api.create("pods", running("train", "gpu-a", 4, 30, "0"))
    api.create("pods", running("infer", "gpu-a", 0, 20, "1"))  # compute only
    api.create("pods", running("plain", "gpu-a", 2, 0, "1"))  # memory only
    api.create("pods", running("lost", "gpu-a", 1, 10, None))  # bound without an index
    api.create("pods", running("old", "gpu-b", 3, 0, "0"))
    done = running("done", "gpu-a", 4, 50, "0")
    api.create("pods", done | {"status": {"phase": "Succeeded"}})  # holds nothing


def test_summary_adds_compute_columns(kube_api, inspect_cli) -> None:
    build(kube_api)
    result = inspect_cli()
    assert result.returncode == 0, result.stderr
    assert result.stdout == SUMMARY


def test_details_list_each_pods_compute(kube_api, inspect_cli) -> None:
    build(kube_api)
    result = inspect_cli("-d")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(DETAILS_GPU_A)
    assert "Allocated/Total GPU Compute In Cluster (%):  60/200 (30%)\n" in result.stdout
    assert "old                  default    3                0\n" in result.stdout


def test_json_has_compute_keys(kube_api, inspect_cli) -> None:
    build(kube_api)
    result = inspect_cli("-o", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["usedCompute"], data["totalCompute"]) == (60, 200)
    a, b = data["nodes"]
    assert (a["usedCompute"], a["totalCompute"], a["pendingCompute"]) == (60, 200, 10)
    assert [(d["usedCompute"], d["totalCompute"]) for d in a["devs"]] == [(30, 100), (20, 100)]
    # GPU 1 runs "plain" (memory, no compute limit): counted, but no ceiling shown (the plugin
    # cannot tell whether the node runs the compute arbiter, under which "plain" is best effort).
    assert "unlimitedPods" not in a["devs"][0]
    assert a["devs"][1]["unlimitedPods"] == 1
    assert all("computeCeiling" not in d for d in a["devs"])
    assert a["devs"][1]["pods"] == [
        {"name": "infer", "namespace": "default", "usedGPU": 0, "usedCompute": 20},
        {"name": "plain", "namespace": "default", "usedGPU": 2, "usedCompute": 0},
    ]
    assert a["pendingPods"] == [
        {"name": "lost", "namespace": "default", "usedGPU": 1, "usedCompute": 10}
    ]
    assert (b["usedCompute"], b["totalCompute"]) == (0, 0)


def test_compute_only_pods_stay_out_of_a_cluster_without_the_share(kube_api, inspect_cli):
    kube_api.create("nodes", gpu_node("n1", 1, 15, ip="10.0.0.9"))
    kube_api.create("pods", running("mem", "n1", 4, 0, "0"))
    kube_api.create("pods", running("cpu-share", "n1", 0, 30, "0"))
    result = inspect_cli("-d")
    assert result.returncode == 0, result.stderr
    assert "Compute" not in result.stdout and "cpu-share" not in result.stdout
    data = json.loads(inspect_cli("-o", "json").stdout)
    assert "usedCompute" not in data and "usedCompute" not in data["nodes"][0]
