"""Plugin registration and the published ResourceSlice, seen by a kubelet peer and the API."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from dra_helpers import NODE, UUIDS, own_slices, wait_for
from kubelet_peer import KubeletPeer


def test_registers_as_a_dra_plugin_with_its_socket_under_plugins(start_driver, peer) -> None:
    driver = start_driver()
    info = peer.register()
    assert info["type"] == "DRAPlugin"
    assert info["name"] == "gpu.cgpu.io"
    assert "v1.DRAPlugin" in info["supported_versions"]
    assert info["endpoint"] == str(driver.kubelet_dir / "plugins" / "gpu.cgpu.io" / "dra.sock")
    assert peer.find_socket().parent == driver.kubelet_dir / "plugins_registry"
    wait_for(lambda: "registered with the kubelet" in driver.output(), "the driver's log")


def test_sockets_are_removed_on_exit_and_recreated_on_restart(start_driver, peer) -> None:
    driver = start_driver()
    peer.register()
    assert driver.stop() == 0
    registry = driver.kubelet_dir / "plugins_registry"
    assert not any(p.is_socket() for p in registry.iterdir())
    start_driver()
    fresh = KubeletPeer(driver.kubelet_dir)
    try:
        assert fresh.register()["name"] == "gpu.cgpu.io"
    finally:
        fresh.close()


def _devices(slice_: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in slice_["spec"]["devices"]}


def test_one_pool_for_the_node_each_gpu_one_shareable_device(start_driver, kube_api) -> None:
    start_driver(memory="16GiB,24GiB", name="NVIDIA A100-SXM4-40GB")
    (slice_,) = own_slices(kube_api)
    spec = slice_["spec"]
    assert spec["nodeName"] == NODE
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    devices = _devices(slice_)
    assert sorted(devices) == ["gpu-0", "gpu-1"]
    gpu1 = devices["gpu-1"]
    assert gpu1["allowMultipleAllocations"] is True
    assert gpu1["attributes"]["uuid"] == {"string": UUIDS[1]}
    assert gpu1["attributes"]["index"] == {"int": 1}
    assert gpu1["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}
    for name in ("architecture", "driverVersion", "cudaComputeCapability"):
        assert name in gpu1["attributes"]
    memory = gpu1["capacity"]["memory"]
    assert memory["value"] == "24Gi"
    assert memory["requestPolicy"]["validRange"] == {"min": "256Mi", "max": "24Gi", "step": "256Mi"}
    assert devices["gpu-0"]["capacity"]["memory"]["value"] == "16Gi"
    compute = gpu1["capacity"]["compute"]
    assert compute["value"] == "100"
    assert compute["requestPolicy"]["validRange"]["max"] == "100"


def test_bad_options_and_a_missing_api_server_fail_at_start(start_driver, tmp_path) -> None:
    base = [sys.executable, "-m", "cgpu.cli", "dra-driver"]
    bad = subprocess.run([*base, "--health-recovery", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "seconds >= 0" in bad.stderr
    driver = start_driver("--kubeconfig", str(tmp_path / "missing"), wait=False)
    assert driver.proc.wait(timeout=30) == 1
    assert "cannot start" in driver.output() and "--kubeconfig" in driver.output()
