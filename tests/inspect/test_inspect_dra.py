"""`kubectl inspect cgpu` counts the memory of DRA claims (driver gpu.cgpu.io) on each GPU."""

from __future__ import annotations

import json
from typing import Any

from kube.objects import gpu_node, gpu_pod

IDX = "ALIYUN_COM_GPU_MEM_IDX"


def _slice(node: str, gib: list[int], generation: int = 1, name: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name or f"{node}-gpu.cgpu.io"},
        "spec": {
            "driver": "gpu.cgpu.io",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"index": {"int": i}},
                    "capacity": {"memory": {"value": f"{size}Gi"}, "compute": {"value": "100"}},
                }
                for i, size in enumerate(gib)
            ],
        },
    }


def _claim(name: str, node: str, results: list[tuple[str, dict]], pods: list[str]) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.cgpu.io",
                            "pool": node,
                            "device": device,
                            "consumedCapacity": consumed,
                        }
                        for device, consumed in results
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
        },
    }


def _dra_cluster(api) -> None:
    node = {
        "metadata": {"name": "dra-1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]},
    }
    api.create("nodes", node)
    api.create("resourceslices", _slice("dra-1", [16, 16, 16], generation=1, name="old"))
    api.create("resourceslices", _slice("dra-1", [16, 16], generation=2))
    api.create(
        "resourceclaims",
        _claim(
            "trainer-gpu", "dra-1", [("gpu-0", {"memory": "4Gi", "compute": "30"})], ["trainer"]
        ),
    )
    shared = _claim("shared", "dra-1", [("gpu-1", {"memory": "768Mi"})], ["a", "b"])
    api.create("resourceclaims", shared)
    pending = _claim("pending", "dra-1", [], [])
    del pending["status"]
    api.create("resourceclaims", pending)
    other = _claim("nvidia", "dra-1", [("gpu-0", {"memory": "8Gi"})], ["x"])
    other["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.nvidia.com"
    api.create("resourceclaims", other)


def test_dra_claims_are_counted_on_their_gpus(kube_api, inspect_cli) -> None:
    _dra_cluster(kube_api)
    done = inspect_cli("-o", "json")
    assert done.returncode == 0, done.stderr
    (node,) = json.loads(done.stdout)["nodes"]
    assert (node["name"], node["ipAddress"], node["unit"]) == ("dra-1", "10.0.0.7", "MiB")
    assert node["totalGPU"] == 2 * 16384  # the newest generation: two GPUs
    devices = {d["id"]: d for d in node["devs"]}
    assert (devices[0]["usedGPU"], devices[0]["totalGPU"]) == (4096, 16384)
    assert (devices[1]["usedGPU"], devices[1]["totalGPU"]) == (768, 16384)
    assert node["usedGPU"] == 4096 + 768
    holders = {(p["name"], p["namespace"]) for d in node["devs"] for p in d["pods"]}
    assert holders == {("trainer", "ml"), ("shared", "ml")}  # one pod: the pod; else the claim
    assert devices[0]["usedCompute"] == 30


def test_details_list_dra_claims_beside_gpushare_pods(kube_api, inspect_cli) -> None:
    kube_api.create("nodes", gpu_node("mixed", 1, 15, ip="10.0.0.8"))
    kube_api.create("pods", gpu_pod("legacy", 4, node="mixed", annotations={IDX: "0"}))
    kube_api.create("resourceslices", _slice("mixed", [15]))
    kube_api.create(
        "resourceclaims", _claim("c", "mixed", [("gpu-0", {"memory": "1536Mi"})], ["modern"])
    )
    done = inspect_cli("-d", "mixed")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.strip()}
    assert rows["legacy"][2] == "4"
    assert rows["modern"][1:3] == ["ml", "2"]  # 1.5 GiB, in the node's GiB units, rounded up
    assert "Allocated :" in done.stdout and "6 (40%)" in done.stdout


def test_a_cluster_without_resource_v1_still_inspects(kube_api, inspect_cli) -> None:
    kube_api.create("nodes", gpu_node("n1", 1, 15, ip="10.0.0.9"))
    kube_api.fault("GET", "/apis/resource.k8s.io/v1/resourceslices", 404)
    done = inspect_cli()
    assert done.returncode == 0, done.stderr
    assert "0/15" in done.stdout


def test_a_role_without_dra_access_warns_and_still_inspects(kube_api, inspect_cli) -> None:
    kube_api.create("nodes", gpu_node("n1", 1, 15, ip="10.0.0.9"))
    kube_api.fault("GET", "/apis/resource.k8s.io/v1/resourceslices", 403)
    done = inspect_cli()
    assert done.returncode == 0, done.stderr
    assert "0/15" in done.stdout
    assert "DRA claims not counted" in done.stderr and "403" in done.stderr
