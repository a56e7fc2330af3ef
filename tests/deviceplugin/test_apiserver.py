"""Allocation with an API server: recorded Kubernetes JSON served locally, read by the client."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kube.apiserver import FakeApiServer
from plugin_harness import UUIDS

from cgpu.core.config import load_config

GIB = 1 << 30


def ids(gpu: int, *units: int) -> list[str]:
    return [f"{UUIDS[gpu]}-{n}" for n in units]


def ledger_dir(resp: dict) -> Path:
    return Path(
        next(m["host_path"] for m in resp["mounts"] if m["container_path"] == "/var/run/cgpu")
    )


def start_with_api(start_plugin, recorded_api, dp_root: Path, pods: str, **sim):
    server = recorded_api(pods, "node.json")
    kubeconfig = server.kubeconfig(dp_root / "kubeconfig")
    plugin = start_plugin("--kubeconfig", str(kubeconfig), "--node-name", "node-1", **sim)
    return plugin, server


def wait_for_patch(server: FakeApiServer, path: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        found = [p for p in server.recorded_patches(path) if p["path"] == path]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no PATCH of {path}"
        time.sleep(0.05)


def pod_patches(server: FakeApiServer) -> list[dict]:
    return server.recorded_patches("/pods/")


def test_gpu_count_label_spreads_over_m_gpus_and_node_capacity(
    start_plugin, recorded_api, dp_root
) -> None:
    plugin, server = start_with_api(
        start_plugin, recorded_api, dp_root, "pods_gpucount.json", devices=4, memory="16GiB"
    )
    node_patch = wait_for_patch(server, "/api/v1/nodes/node-1/status")
    assert node_patch["body"] == {"status": {"capacity": {"aliyun.com/gpu-count": "4"}}}
    assert node_patch["content_type"] == "application/strategic-merge-patch+json"

    # GPU 1 is partly used, so best fit puts two units there and on the fullest others.
    available = (
        ids(0, *range(16)) + ids(1, *range(10, 16)) + ids(2, *range(16)) + ids(3, *range(16))
    )
    chosen = plugin.client.preferred(available, [], 8)
    assert chosen == ids(1, 10, 11) + ids(0, 0, 1) + ids(2, 0, 1) + ids(3, 0, 1)

    (resp,) = plugin.client.allocate(chosen)
    envs = resp["envs"]
    assert envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(UUIDS[:4])
    assert envs["ALIYUN_COM_GPU_MEM_IDX"] == "0,1,2,3"
    assert envs["ALIYUN_COM_GPU_MEM_CONTAINER"] == "2"
    assert envs["ALIYUN_COM_GPU_MEM_DEV"] == "16"
    assert envs["ALIYUN_COM_GPU_MEM_POD"] == "8"
    directory = ledger_dir(resp)
    assert load_config(directory / "cgpu.conf") == {
        u: 16 * GIB * 2 // 16 for u in UUIDS[:4]
    }
    meta = json.loads((directory / "meta.json").read_text())
    assert (meta["namespace"], meta["pod"], meta["container"]) == (
        "default",
        "binpack-1-0",
        "binpack-1",
    )
    assert meta["pod_uid"] == "c2b4f7a0-5d1e-4e8a-9c3f-7a6b5d4e3f21"
    (patch,) = pod_patches(server)
    assert patch["path"] == "/api/v1/namespaces/default/pods/binpack-1-0"
    assert patch["body"] == {
        "metadata": {
            "annotations": {
                "ALIYUN_COM_GPU_MEM_ASSIGNED": "true",
                "ALIYUN_COM_GPU_MEM_IDX": "0,1,2,3",
            }
        }
    }


def test_gpu_count_needs_an_even_split(start_plugin, recorded_api, dp_root) -> None:
    import grpc

    plugin, _ = start_with_api(
        start_plugin, recorded_api, dp_root, "pods_gpucount.json", devices=4, memory="16GiB"
    )
    with pytest.raises(grpc.RpcError) as err:
        plugin.client.allocate(ids(0, *range(8)))  # the kubelet ignored the preferred split
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "2 units on each of 4 GPUs" in err.value.details()


def test_gpushare_extender_annotations_are_honoured(start_plugin, recorded_api, dp_root) -> None:
    plugin, server = start_with_api(
        start_plugin, recorded_api, dp_root, "pods_gpushare.json", devices=2, memory="16130MiB"
    )
    available = ids(0, *range(15)) + ids(1, *range(15))
    assert plugin.client.preferred(available, [], 4) == ids(1, 0, 1, 2, 3)

    # An older kubelet that skips GetPreferredAllocation offers GPU 0; the extender said GPU 1.
    (resp,) = plugin.client.allocate(ids(0, 0, 1, 2, 3))
    assert resp["envs"]["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
    assert resp["envs"]["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert resp["envs"]["ALIYUN_COM_GPU_MEM_POD"] == "4"
    assert load_config(ledger_dir(resp) / "cgpu.conf") == {
        UUIDS[1]: (16130 << 20) * 4 // 15
    }
    plugin.wait_log("following the scheduler extender")
    (patch,) = pod_patches(server)
    assert patch["path"] == "/api/v1/namespaces/team-a/pods/gs-infer"
    assert patch["body"] == {"metadata": {"annotations": {"ALIYUN_COM_GPU_MEM_ASSIGNED": "true"}}}
    stored = server.get("pods", "gs-infer", "team-a")["metadata"]["annotations"]
    assert stored["ALIYUN_COM_GPU_MEM_IDX"] == "1"


def test_multi_container_pod_is_matched_per_container(start_plugin, recorded_api, dp_root) -> None:
    plugin, server = start_with_api(
        start_plugin, recorded_api, dp_root, "pods_multicontainer.json", devices=2, memory="8GiB"
    )
    names = []
    for request in (ids(0, 0), ids(0, 1, 2, 3), ids(1, 0, 1)):  # fetch (init), trainer, evaluator
        assert pod_patches(server) == []  # not assigned until every container is
        (resp,) = plugin.client.allocate(request)
        assert resp["envs"]["ALIYUN_COM_GPU_MEM_POD"] == "5"
        meta = json.loads((ledger_dir(resp) / "meta.json").read_text())
        names.append(meta["container"])
        assert load_config(ledger_dir(resp) / "cgpu.conf") == {
            request[0].rsplit("-", 1)[0]: len(request) * GIB
        }
    assert names == ["fetch", "trainer", "evaluator"]
    (patch,) = pod_patches(server)
    assert patch["body"]["metadata"]["annotations"] == {
        "ALIYUN_COM_GPU_MEM_ASSIGNED": "true",
        "ALIYUN_COM_GPU_MEM_IDX": "0,1",  # every GPU the pod's containers use
    }


def test_unreachable_api_server_means_standalone(start_plugin, dp_root) -> None:
    kubeconfig = dp_root / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "gone",
            }
        )
    )
    plugin = start_plugin("--kubeconfig", str(kubeconfig), "--node-name", "node-1", memory="8GiB")
    (resp,) = plugin.client.allocate(ids(0, 0, 1))
    assert resp["envs"]["ALIYUN_COM_GPU_MEM_CONTAINER"] == "2"
    assert "ALIYUN_COM_GPU_MEM_POD" not in resp["envs"]
    plugin.wait_log("allocating without pod information")
