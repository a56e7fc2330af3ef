"""The compute resource with an API server: the pod and container name the directory."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kube.apiserver import FakeApiServer
from kube.recorded import load
from plugin_harness import COMPUTE, UUIDS

GIB = 1 << 30
MEM = "aliyun.com/gpu-mem"
LEDGER = "/var/run/cgpu"


def container(name: str, mem: int = 0, core: int = 0) -> dict[str, Any]:
    limits = {**({MEM: str(mem)} if mem else {}), **({COMPUTE: str(core)} if core else {})}
    return {"name": name, "image": "example/app:1", "resources": {"limits": limits}}


def pod(name: str, uid: str, containers: list[dict[str, Any]], **notes: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "creationTimestamp": "2026-11-23T08:00:00Z",
            "annotations": dict(notes),
        },
        "spec": {"nodeName": "node-1", "containers": containers},
        "status": {"phase": "Pending"},
    }


def mem_ids(gpu: int, count: int) -> list[str]:
    return [f"{UUIDS[gpu]}-{n}" for n in range(count)]


def core_ids(gpu: int, count: int) -> list[str]:
    return [f"{UUIDS[gpu]}-core-{n}" for n in range(count)]


def directory(resp: dict) -> Path:
    return Path(next(m["host_path"] for m in resp["mounts"] if m["container_path"] == LEDGER))


def conf(resp: dict) -> list[str]:
    text = (directory(resp) / "cgpu.conf").read_text()
    # `context` lines (the measured context cost): tests/deviceplugin/test_plugin_context_cost.py
    skip = ("#", "context ")
    return [line for line in text.splitlines() if line and not line.startswith(skip)]


def assigned_patches(server: FakeApiServer) -> list[dict]:
    return [
        p
        for p in server.recorded_patches("/pods/")
        if p["body"]["metadata"]["annotations"].get("ALIYUN_COM_GPU_MEM_ASSIGNED") == "true"
    ]


@pytest.fixture
def servers() -> Iterator[list[FakeApiServer]]:
    made: list[FakeApiServer] = []
    yield made
    for server in made:
        server.close()


@pytest.fixture
def with_pods(start_plugin, servers, dp_root):
    def start(pods: list[dict[str, Any]], *args: str, **sim: object):
        listing = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}
        server = FakeApiServer()
        servers.append(server)
        server.load_list("pods", copy.deepcopy(listing))
        server.create("nodes", load("node.json"))
        kubeconfig = server.kubeconfig(dp_root / "kubeconfig")
        sim.setdefault("memory", "16GiB")
        plugin = start_plugin(
            "--kubeconfig", str(kubeconfig), "--node-name", "node-1", *args, **sim
        )
        return plugin, server

    return start


EXTENDER = {
    "ALIYUN_COM_GPU_MEM_IDX": "1",
    "ALIYUN_COM_GPU_MEM_ASSIGNED": "false",
    "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "1763884800000000000",
}


@pytest.mark.parametrize("compute_first", [False, True], ids=["memory-first", "compute-first"])
def test_both_halves_meet_on_the_extenders_gpu(with_pods, compute_first: bool) -> None:
    plugin, server = with_pods([pod("both", "uid-both", [container("main", 4, 50)], **EXTENDER)])
    compute = plugin.client_for(COMPUTE)
    offered = core_ids(0, 100) + core_ids(1, 100)
    chosen_core = compute.preferred(offered, [], 50)
    assert all(i.startswith(UUIDS[1]) for i in chosen_core)  # the extender chose GPU 1

    if compute_first:
        (c_resp,) = compute.allocate(chosen_core)
        assert not assigned_patches(server)  # memory still missing
        (m_resp,) = plugin.client.allocate(mem_ids(1, 4))
    else:
        (m_resp,) = plugin.client.allocate(mem_ids(1, 4))
        assert not assigned_patches(server)  # compute still missing
        (c_resp,) = compute.allocate(chosen_core)

    assert directory(m_resp) == directory(c_resp)
    assert conf(m_resp) == ["version 1", f"device {UUIDS[1]} {4 * GIB}", f"compute {UUIDS[1]} 50"]
    assert c_resp["envs"]["CGPU_COMPUTE_LIMIT"] == "50"
    assert m_resp["envs"]["NVIDIA_VISIBLE_DEVICES"] == c_resp["envs"]["NVIDIA_VISIBLE_DEVICES"]
    (patch,) = assigned_patches(server)
    assert patch["path"] == "/api/v1/namespaces/default/pods/both"


def test_compute_on_another_gpu_than_the_memory_is_refused(with_pods) -> None:
    plugin, _ = with_pods([pod("both", "uid-both", [container("main", 4, 50)])])
    compute = plugin.client_for(COMPUTE)
    plugin.client.allocate(mem_ids(0, 4))
    with pytest.raises(grpc.RpcError) as err:
        compute.allocate(core_ids(1, 50))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "both must be on the same GPU" in err.value.details()
    # The memory's directory is intact and still has no compute line.
    (only,) = list((plugin.state_dir / "containers").iterdir())
    assert "compute" not in (only / "cgpu.conf").read_text()


def test_compute_with_no_matching_pod_is_refused(with_pods) -> None:
    plugin, _ = with_pods([pod("both", "uid-both", [container("main", 4, 50)])])
    with pytest.raises(grpc.RpcError) as err:
        plugin.client_for(COMPUTE).allocate(core_ids(0, 70))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no pending pod on node node-1 has a container asking for 70" in err.value.details()


def test_each_container_of_a_pod_gets_its_own_directory(with_pods) -> None:
    containers = [container("a", 2, 20), container("b", 2), container("c", 0, 30)]
    plugin, server = with_pods([pod("multi", "uid-multi", containers)])
    compute = plugin.client_for(COMPUTE)
    # The kubelet's order: container by container, each one's resources back to back.
    (a_mem,) = plugin.client.allocate(mem_ids(0, 2))
    (a_core,) = compute.allocate(core_ids(0, 20))
    (b_mem,) = plugin.client.allocate(mem_ids(0, 4)[2:])
    (c_core,) = compute.allocate(core_ids(0, 50)[20:])

    assert directory(a_mem) == directory(a_core)
    assert len({directory(a_mem), directory(b_mem), directory(c_core)}) == 3
    assert conf(a_core)[-1] == f"compute {UUIDS[0]} 20"
    assert not any(line.startswith("compute") for line in conf(b_mem))
    assert conf(c_core) == ["version 1", f"device {UUIDS[0]} {16 * GIB}", f"compute {UUIDS[0]} 30"]
    metas = {
        d.name: (d / "meta.json").read_text() for d in (plugin.state_dir / "containers").iterdir()
    }
    assert len(metas) == 3
    assert len(assigned_patches(server)) == 1


def test_a_compute_share_needs_a_one_gpu_container(with_pods) -> None:
    spread = pod("spread", "uid-spread", [container("main", 4, 50)])
    spread["metadata"]["labels"] = {"aliyun.com/gpu-count": "2"}
    plugin, _ = with_pods([spread])
    with pytest.raises(grpc.RpcError) as err:
        plugin.client.allocate(mem_ids(0, 2) + mem_ids(1, 2))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "a compute share applies to a one-GPU container" in err.value.details()


def test_the_second_half_finds_the_directory_after_a_plugin_restart(with_pods) -> None:
    pods = [pod("both", "uid-both", [container("main", 4, 50)])]
    plugin, _ = with_pods(pods)
    (m_resp,) = plugin.client.allocate(mem_ids(0, 4))
    plugin.proc.terminate()
    assert plugin.proc.wait(timeout=10) == 0

    again, server = with_pods(pods)
    (c_resp,) = again.client_for(COMPUTE).allocate(core_ids(0, 50))
    assert directory(c_resp) == directory(m_resp)
    assert conf(c_resp) == ["version 1", f"device {UUIDS[0]} {4 * GIB}", f"compute {UUIDS[0]} 50"]
    assert len(assigned_patches(server)) == 1


@pytest.mark.parametrize("compute_first", [False, True], ids=["memory-first", "compute-first"])
def test_the_pods_compute_priority_reaches_the_compute_line(with_pods, compute_first) -> None:
    notes = {"cgpu.io/compute-priority": "high"}
    plugin, _ = with_pods([pod("infer", "uid-infer", [container("main", 4, 30)], **notes)])
    compute = plugin.client_for(COMPUTE)
    if compute_first:
        (resp,) = compute.allocate(core_ids(0, 30))
        plugin.client.allocate(mem_ids(0, 4))
    else:
        plugin.client.allocate(mem_ids(0, 4))
        (resp,) = compute.allocate(core_ids(0, 30))
    assert conf(resp)[-1] == f"compute {UUIDS[0]} 30 fixed high"
    from cgpu.core.config import load_compute_lines

    (line,) = load_compute_lines(directory(resp) / "cgpu.conf").values()
    assert line.priority == "high"


def test_a_malformed_compute_priority_fails_the_allocate(with_pods) -> None:
    notes = {"cgpu.io/compute-priority": "urgent"}
    plugin, _ = with_pods([pod("infer", "uid-infer", [container("main", 0, 30)], **notes)])
    with pytest.raises(grpc.RpcError) as err:
        plugin.client_for(COMPUTE).allocate(core_ids(0, 30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        "cgpu.io/compute-priority='urgent' is not one of high, normal, low" in err.value.details()
    )
    made = plugin.state_dir / "containers"
    assert not made.exists() or not list(made.iterdir())


def test_a_pod_without_a_compute_limit_has_its_priority_recorded(with_pods) -> None:
    """Without a compute request the container has no compute line, but its turns, as best
    effort on a GPU where another has a limit, are at its pod's priority: the device plugin
    records it in meta.json (the host's file), where the arbiter reads it."""
    from cgpu.core.containers import read_meta

    notes = {"cgpu.io/compute-priority": "low"}
    plugin, _ = with_pods([pod("train", "uid-train", [container("main", 4, 0)], **notes)])
    (resp,) = plugin.client.allocate(mem_ids(0, 4))
    assert not any(line.startswith("compute") for line in conf(resp))
    assert read_meta(directory(resp))["compute_priority"] == "low"


def test_a_malformed_priority_fails_a_memory_allocate_too(with_pods) -> None:
    bad = {"cgpu.io/compute-priority": "urgent"}
    plugin, _ = with_pods([pod("odd", "uid-odd", [container("main", 4, 0)], **bad)])
    with pytest.raises(grpc.RpcError) as err:
        plugin.client.allocate(mem_ids(0, 4))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cgpu.io/compute-priority='urgent'" in err.value.details()
