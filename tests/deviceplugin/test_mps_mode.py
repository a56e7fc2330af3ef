"""`cgpu device-plugin --isolation mps` with `cgpu mps-daemon` running the stand-in daemon."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from plugin_harness import COMPUTE, UUIDS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mps"))
from mps_harness import MpsDaemon, start_mps_daemon

GIB = 1 << 30
LEDGER = "/var/run/cgpu"


@pytest.fixture
def mps(dp_root: Path) -> Iterator[MpsDaemon]:
    daemon = start_mps_daemon(dp_root / "mps", dp_root / "bin", UUIDS[:2])
    yield daemon
    daemon.stop()


def directory(resp: dict) -> Path:
    return Path(next(m["host_path"] for m in resp["mounts"] if m["container_path"] == LEDGER))


def wait_health(client, prefix: str, health: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    for devices in client.watch():
        mine = {h for ident, h in devices if ident.startswith(prefix)}
        if mine == {health}:
            return
        assert time.monotonic() < deadline, f"{prefix} not {health}: {mine}"


def test_mps_environment_and_mounts(start_plugin, mps: MpsDaemon) -> None:
    plugin = start_plugin("--isolation", "mps", "--mps-root", str(mps.root), memory="16GiB")
    compute = plugin.client_for(COMPUTE)
    (m_resp,) = plugin.client.allocate([f"{UUIDS[1]}-{n}" for n in range(4)])
    (c_resp,) = compute.allocate([f"{UUIDS[1]}-core-{n}" for n in range(30)])

    pipe = str(mps.root / UUIDS[1] / "pipe")
    for resp in (m_resp, c_resp):
        envs = resp["envs"]
        assert envs["CUDA_MPS_PIPE_DIRECTORY"] == pipe
        assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
        assert "CGPU_COMPUTE_LIMIT" not in envs  # MPS enforces compute, not the shim too
        mounts = {m["container_path"]: m for m in resp["mounts"]}
        assert mounts[pipe]["host_path"] == pipe and not mounts[pipe]["read_only"]
        assert mounts["/dev/shm"]["host_path"] == str(mps.root / "shm")
        # The shim stays: it accounts and reports the slice.
        assert mounts["/usr/local/cgpu/libcgpu.so"]["read_only"]
        assert LEDGER in mounts
    assert c_resp["envs"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert directory(m_resp) == directory(c_resp)
    conf = (directory(m_resp) / "cgpu.conf").read_text()
    assert f"device {UUIDS[1]} {4 * GIB}" in conf and "compute" not in conf
    assert "context" not in conf  # an MPS client's context is not what the plugin measures
    assert '"compute_percent": 30' in (directory(m_resp) / "meta.json").read_text()


def test_memory_alone_gets_the_pinned_limit_and_no_thread_share(start_plugin, mps) -> None:
    plugin = start_plugin("--isolation", "mps", "--mps-root", str(mps.root), memory="8GiB")
    (resp,) = plugin.client.allocate([f"{UUIDS[0]}-0", f"{UUIDS[0]}-1"])
    assert resp["envs"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in resp["envs"]
    assert resp["envs"]["CUDA_MPS_PIPE_DIRECTORY"] == str(mps.root / UUIDS[0] / "pipe")


def test_a_dead_daemon_makes_its_gpu_unhealthy_until_it_returns(start_plugin, mps) -> None:
    plugin = start_plugin("--isolation", "mps", "--mps-root", str(mps.root), memory="4GiB")
    compute = plugin.client_for(COMPUTE)
    wait_health(plugin.client, UUIDS[1], "Healthy")

    mps.kill_daemon(UUIDS[1])
    wait_health(plugin.client, UUIDS[1], "Unhealthy")
    wait_health(compute, UUIDS[1], "Unhealthy")  # memory and compute units alike
    wait_health(plugin.client, UUIDS[0], "Healthy")  # the other GPU keeps its daemon
    plugin.wait_log("MPS daemon not ready")

    mps.wait_state(UUIDS[1], "ready")
    wait_health(plugin.client, UUIDS[1], "Healthy")
    wait_health(compute, UUIDS[1], "Healthy")


def test_no_daemon_at_all_means_unhealthy(start_plugin, dp_root: Path) -> None:
    plugin = start_plugin("--isolation", "mps", "--mps-root", str(dp_root / "none"), memory="4GiB")
    assert {h for _, h in plugin.client.devices()} == {"Unhealthy"}
    assert "is cgpu mps-daemon running" in plugin.wait_log("MPS daemon not ready")


def test_mps_refuses_a_container_over_several_gpus(start_plugin, dp_root, mps) -> None:
    import json

    from kube.apiserver import FakeApiServer
    from kube.recorded import load

    pod = {
        "metadata": {"name": "spread", "namespace": "default", "uid": "u-spread",
                     "labels": {"aliyun.com/gpu-count": "2"}, "annotations": {}},
        "spec": {"nodeName": "node-1", "containers": [
            {"name": "main", "resources": {"limits": {"aliyun.com/gpu-mem": "4"}}}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip
    server = FakeApiServer()
    try:
        server.create("pods", pod)
        server.create("nodes", load("node.json"))
        kubeconfig = server.kubeconfig(dp_root / "kubeconfig")
        plugin = start_plugin(
            "--isolation", "mps", "--mps-root", str(mps.root),
            "--kubeconfig", str(kubeconfig), "--node-name", "node-1", memory="4GiB",
        )  # fmt: skip
        with pytest.raises(grpc.RpcError) as err:
            plugin.client.allocate(
                [f"{UUIDS[0]}-0", f"{UUIDS[0]}-1", f"{UUIDS[1]}-0", f"{UUIDS[1]}-1"]
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "--isolation mps gives each container one GPU" in err.value.details()
        assert json.dumps(server.get("pods", "spread")["metadata"]["annotations"]) == "{}"
    finally:
        server.close()
