"""`kubectl inspect cgpu` against the clusters of the seeds, compared with their printed text."""

from __future__ import annotations

import json

from kube.objects import gpu_node, gpu_pod

# Seed 000 (gpushare user guide): three one-GPU nodes of 7606 MiB.
SEED_000 = """\
NAME           IPADDRESS     GPU0(Allocated MiB/Total MiB)  GPU Memory
i-2ze0gl97vw1  192.168.0.72  7606/7606                      7606/7606
i-2ze0gl97vw2  192.168.0.73  3803/7606                      3803/7606
i-2ze0gl97vw3  192.168.0.71  7606/7606                      7606/7606
---------------------------------------------------------------------------------------
Allocated/Total GPU Memory In Cluster:
19015/22818 (83%)
"""

# Seed 004 (cGPU guide): one node with one 15 GiB GPU, before and after two 4 GiB pods.
SEED_004_SUMMARY = """\
NAME                       IPADDRESS      GPU0(Allocated/Total)  GPU Memory(GiB)
cn-hangzhou.192.168.2.167  192.168.2.167  0/15                   0/15
----------------------------------------------------------------------
Allocated/Total GPU Memory In Cluster:
0/15 (0%)
"""

SEED_004_DETAILS = """\
NAME:       cn-hangzhou.192.168.2.167
IPADDRESS:  192.168.2.167

NAME         NAMESPACE  GPU0(Allocated)
app-3g-v1-0  default    4
app-3g-v1-1  default    4
Allocated :  8 (53%)
Total :      15
--------------------------------------------------------

Allocated/Total GPU Memory In Cluster:  8/15 (53%)
"""

IDX = "ALIYUN_COM_GPU_MEM_IDX"


def running(name: str, units: int, node: str, idx: str | None = "0", **kw) -> dict:
    annotations = {IDX: idx} if idx is not None else {}
    return gpu_pod(name, units, node=node, annotations=annotations, phase="Running", **kw)


def build_seed_000(api) -> None:
    for name, ip in (("i-2ze0gl97vw1", "192.168.0.72"), ("i-2ze0gl97vw2", "192.168.0.73"),
                     ("i-2ze0gl97vw3", "192.168.0.71")):  # fmt: skip
        api.create("nodes", gpu_node(name, 1, 7606, ip=ip))
    api.create("pods", running("binpack-1-a", 3803, "i-2ze0gl97vw1"))
    api.create("pods", running("binpack-1-b", 3803, "i-2ze0gl97vw1"))
    api.create("pods", running("binpack-1-c", 3803, "i-2ze0gl97vw2"))
    api.create("pods", running("binpack-1-d", 7606, "i-2ze0gl97vw3"))
    # Finished pods hold nothing.
    api.create("pods", running("done", 3803, "i-2ze0gl97vw2") | {"status": {"phase": "Succeeded"}})


def test_summary_matches_gpushare_seed(kube_api, inspect_cli) -> None:
    build_seed_000(kube_api)
    result = inspect_cli(script="kubectl-inspect-gpushare")
    assert result.returncode == 0, result.stderr
    assert result.stdout == SEED_000


def test_summary_and_details_match_cgpu_seed(kube_api, inspect_cli) -> None:
    kube_api.create("nodes", gpu_node("cn-hangzhou.192.168.2.167", 1, 15, ip="192.168.2.167"))
    result = inspect_cli()
    assert result.returncode == 0, result.stderr
    assert result.stdout == SEED_004_SUMMARY

    kube_api.create("pods", running("app-3g-v1-1", 4, "cn-hangzhou.192.168.2.167"))
    kube_api.create("pods", running("app-3g-v1-0", 4, "cn-hangzhou.192.168.2.167"))
    result = inspect_cli("-d")
    assert result.returncode == 0, result.stderr
    assert result.stdout == SEED_004_DETAILS


def test_pending_pods_and_absent_gpus(kube_api, inspect_cli) -> None:
    kube_api.create("nodes", gpu_node("big", 2, 16, ip="10.0.0.2"))
    kube_api.create("nodes", gpu_node("small", 1, 16, ip="10.0.0.3"))
    kube_api.create("pods", running("a", 4, "big", idx="1"))
    kube_api.create("pods", running("b", 6, "big", idx=None))  # no index yet: PENDING
    kube_api.create("pods", running("c", 8, "big", idx="0,1", gpu_count=2))
    kube_api.create("pods", running("d", 2, "small"))
    result = inspect_cli()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "NAME", "IPADDRESS", "GPU0(Allocated/Total)", "GPU1(Allocated/Total)",
        "PENDING(Allocated)", "GPU", "Memory(GiB)",
    ]  # fmt: skip
    assert lines[1].split() == ["big", "10.0.0.2", "4/16", "8/16", "6", "18/32"]
    assert lines[2].split() == ["small", "10.0.0.3", "2/16", "0/0", "2/16"]
    assert lines[-1] == "20/48 (41%)"

    details = inspect_cli("-d", "big")
    assert details.returncode == 0, details.stderr
    rows = [line.split() for line in details.stdout.splitlines()]
    assert ["NAME", "NAMESPACE", "GPU0(Allocated)", "GPU1(Allocated)", "Pending(Allocated)"] in rows
    assert ["a", "default", "0", "4", "0"] in rows
    assert ["c", "default", "4", "4", "0"] in rows
    assert ["b", "default", "0", "0", "6"] in rows
    assert ["Allocated", ":", "18", "(56%)"] in rows
    assert "small" not in details.stdout


def test_json_output(kube_api, inspect_cli) -> None:
    kube_api.create("nodes", gpu_node("n1", 2, 7606, ip="10.0.0.9"))
    kube_api.create("pods", running("a", 1000, "n1", idx="1", namespace="ml"))
    result = inspect_cli("-o", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["usedGPU"] == 1000 and data["totalGPU"] == 15212
    (node,) = data["nodes"]
    assert node["unit"] == "MiB" and node["ipAddress"] == "10.0.0.9"
    assert node["devs"][1] == {
        "id": 1,
        "totalGPU": 7606,
        "usedGPU": 1000,
        "pods": [{"name": "a", "namespace": "ml", "usedGPU": 1000}],
    }
    assert node["devs"][0]["usedGPU"] == 0


def test_unreachable_server_and_bad_kubeconfig_fail_in_one_line(kube_api, inspect_cli, tmp_path):
    kube_api.close()
    result = inspect_cli()
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "cannot reach the API server" in result.stderr

    bad = tmp_path / "bad"
    bad.write_text("this: is: not: a kubeconfig")
    result = inspect_cli(env={"KUBECONFIG": str(bad)})
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr

    result = inspect_cli(env={"KUBECONFIG": str(tmp_path / "missing")})
    assert result.returncode == 1
    assert "not found" in result.stderr


def test_unknown_node(kube_api, inspect_cli) -> None:
    kube_api.create("nodes", gpu_node("n1", 1, 15))
    result = inspect_cli("nope")
    assert result.returncode == 1
    assert result.stderr.strip() == 'error: node "nope" not found'
