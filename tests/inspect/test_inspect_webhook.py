"""`kubectl inspect cgpu` on a node where the device plugin owns GPU 0 and the DRA driver GPU 1:
pods that `cgpu webhook` rewrote into claims are shown beside the device plugin's pods, each
pod once (however many claims it holds), each GPU in one account, and the rewritten pods,
which no longer ask for aliyun.com/gpu-mem, are not counted a second time."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from kube.objects import gpu_node, gpu_pod

from cgpu.dra.devices import device
from cgpu.dra.inventory import GpuInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dra"))
from dra_scheduler import Scheduler
from webhook_chain import admit, claim_pod, gpushare_pod

NODE = "mixed"


def _dra_slice(index: int, gib: int) -> dict[str, Any]:
    """The DRA driver's pool on NODE: the one GPU it owns (GPU `index`), as it publishes it."""
    gpu = GpuInfo(index, "GPU-d7a00000-0000-4000-8000-00000000000a", "H100", gib << 30,
                  "Hopper", "580.65.6", "9.0", index)  # fmt: skip
    return {
        "metadata": {"name": f"{NODE}-gpu.cgpu.io"},
        "spec": {
            "driver": "gpu.cgpu.io",
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [device(gpu)],
        },
    }


@pytest.fixture
def scheduler(kube_api: Any, tmp_path: Path) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(kube_api.kubeconfig(tmp_path / "kubeconfig-scheduler")),
        client_configuration=configuration,
    )
    with client.ApiClient(configuration) as api_client:
        yield Scheduler(api_client)


def _webhook_pod(kube_api: Any, scheduler: Any, tmp_path: Path, name: str, uid: str,
                 *units: int) -> None:  # fmt: skip
    """A gpushare pod (one container per entry of `units`) through the webhook, its claims
    allocated on NODE, and the rewritten pod bound there."""
    pod = gpushare_pod(name, {"aliyun.com/gpu-mem": str(units[0])})
    for i, amount in enumerate(units[1:], 1):
        extra = dict(pod["spec"]["containers"][0], name=f"side-{i}")
        extra["resources"] = {"limits": {"aliyun.com/gpu-mem": str(amount)}}
        pod["spec"]["containers"].append(extra)
    rewritten = admit(kube_api, pod, tmp_path)
    claim_pod(kube_api, scheduler, rewritten, uid)
    rewritten["metadata"]["uid"] = uid
    rewritten["spec"]["nodeName"] = NODE
    rewritten["status"] = {"phase": "Running"}
    kube_api.create("pods", rewritten)


def _mixed_cluster(kube_api: Any, scheduler: Any, tmp_path: Path) -> None:
    kube_api.create("nodes", gpu_node(NODE, 1, 15, ip="10.0.0.8"))  # the plugin's GPU 0
    kube_api.create("pods", gpu_pod("legacy", 4, node=NODE, annotations={
        "ALIYUN_COM_GPU_MEM_IDX": "0"}, phase="Running"))  # fmt: skip
    kube_api.create("resourceslices", _dra_slice(1, 16))
    _webhook_pod(kube_api, scheduler, tmp_path, "pair", "0d6f7a1e-1111-4c2b-9d3e-000000000001",
                 2, 3)  # fmt: skip
    _webhook_pod(kube_api, scheduler, tmp_path, "single", "0d6f7a1e-1111-4c2b-9d3e-000000000002",
                 1)  # fmt: skip


def test_webhook_claims_beside_device_plugin_pods_each_pod_once(
    kube_api, inspect_cli, scheduler, tmp_path
) -> None:
    _mixed_cluster(kube_api, scheduler, tmp_path)
    assert len(kube_api.objects("resourceclaims")) == 3  # pair holds two claims

    done = inspect_cli("-d", NODE)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    header = next(r for r in rows if r[0] == "NAME" and "NAMESPACE" in r)
    assert header[2:4] == ["GPU0(Allocated)", "GPU1(Allocated)"]
    pods = {r[0]: r[2:4] for r in rows if r[0] in ("legacy", "pair", "single")}
    assert pods == {"legacy": ["4", "0"], "pair": ["0", "5"], "single": ["0", "1"]}
    assert sum(1 for r in rows if r[0] == "pair") == 1  # two claims, one row
    assert ["Allocated", ":", "10", "(32%)"] in rows
    assert ["Total", ":", "31"] in rows  # the plugin's 15 units and the DRA GPU's 16 GiB

    done = inspect_cli("-o", "json")
    assert done.returncode == 0, done.stderr
    (node,) = json.loads(done.stdout)["nodes"]
    devices = {d["id"]: d for d in node["devs"]}
    assert (devices[0]["usedGPU"], devices[0]["totalGPU"]) == (4, 15)
    assert (devices[1]["usedGPU"], devices[1]["totalGPU"]) == (6, 16)
    assert (node["usedGPU"], node["totalGPU"]) == (10, 31)
    held = [(p["name"], d["id"]) for d in node["devs"] for p in d["pods"]]
    assert sorted(held) == [("legacy", 0), ("pair", 1), ("single", 1)]
