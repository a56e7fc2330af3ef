"""The device plugin and the DRA driver on one node: each GPU is handed out by one of them.

Both run as on a node in migration: the device plugin against a fake kubelet over real gRPC,
the DRA driver against the kubelet peer and the fake API server (claims allocated by the
scheduler's stand-in), one simulated 2-GPU node (16 GiB each) and one state directory.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from dra_helpers import NODE, UUIDS, claim_body, own_slices, wait_for
from dra_scheduler import Unschedulable
from kube.processes import stop

from cgpu.core.config import load_config
from cgpu.core.containers import list_container_dirs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deviceplugin"))
from fake_kubelet import FakeKubelet, PluginClient

GiB = 1 << 30
GPU_BYTES = 16 * GiB
POD = ("trainer", "5b7f0a52-0c3e-4a55-9b1e-2f3a4b5c6d7e")


@dataclass
class DevicePlugin:
    """A running `cgpu device-plugin` and its kubelet."""

    proc: subprocess.Popen[bytes]
    kubelet: FakeKubelet
    client: PluginClient | None
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def start_plugin(
    sim_env: Callable[..., dict[str, str]], dra_root: Path
) -> Iterator[Callable[..., DevicePlugin]]:
    """Start `cgpu device-plugin` on the DRA tests' node and state directory."""
    running: list[DevicePlugin] = []

    def start(*args: str, register: bool = True) -> DevicePlugin:
        kubelet_dir = dra_root / "device-plugins"
        kubelet_dir.mkdir(exist_ok=True)
        kubelet = FakeKubelet(kubelet_dir)
        kubelet.start()
        log = dra_root / f"plugin-{len(running)}.log"
        command = [
            sys.executable, "-m", "cgpu.cli", "device-plugin",
            "--kubelet-dir", str(kubelet_dir), "--state-dir", str(dra_root / "state"),
            "--pod-resources-socket", str(dra_root / "pod-resources.sock"),
            "--node-name", NODE, "--compute-resource=", *args,
        ]  # fmt: skip
        env = sim_env(devices=2, uuids=",".join(UUIDS), extra={"KUBECONFIG": ""})
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        plugin = DevicePlugin(proc, kubelet, None, log)
        running.append(plugin)
        if register:
            try:
                registration = kubelet.wait_registration(1, 20)
            except AssertionError:
                raise AssertionError(f"plugin did not register:\n{plugin.output()}") from None
            plugin.client = kubelet.plugin(registration["endpoint"])
        return plugin

    yield start
    for plugin in running:
        stop(plugin.proc, timeout=10)
        if plugin.client is not None:
            plugin.client.close()
        plugin.kubelet.stop()


def _claim(kube_api, scheduler, name: str, memory: str) -> tuple[str, str, str]:
    created = kube_api.create("resourceclaims", claim_body(name, memory=memory))
    scheduler.allocate("default", name, POD)
    return ("default", created["metadata"]["uid"], name)


def _published(kube_api) -> list[str]:
    (slice_,) = own_slices(kube_api)
    return [d["attributes"]["uuid"]["string"] for d in slice_["spec"]["devices"]]


def _handed_out(state_dir: Path) -> dict[str, int]:
    """Bytes every container directory holds per GPU, whoever made it (what the shims enforce)."""
    total = dict.fromkeys(UUIDS, 0)
    for path in list_container_dirs(state_dir):
        for uuid, size in load_config(path / "cgpu.conf").items():
            total[uuid] += size
    return total


def _units(plugin: DevicePlugin, uuid: str) -> list[str]:
    assert plugin.client is not None
    return [ident for ident, _ in plugin.client.devices() if ident.startswith(uuid + "-")]


def test_allocating_from_both_sides_never_passes_a_gpu(
    start_plugin, start_driver, peer, kube_api, scheduler
) -> None:
    plugin = start_plugin("--gpus", "0")
    driver = start_driver()
    peer.register()
    assert _published(kube_api) == [UUIDS[1]]  # GPU 0 is the device plugin's
    assert f"GPU 0 ({UUIDS[0]}) is owned by the device plugin" in driver.output()
    assert f"pid {plugin.proc.pid} on node {NODE}" in driver.output()
    assert plugin.client is not None
    units = [ident for ident, _ in plugin.client.devices()]
    assert len(units) == 16 and all(u.startswith(UUIDS[0] + "-") for u in units)

    # The device plugin gives out all of GPU 0; the scheduler gives out all of GPU 1.
    plugin.client.allocate(units[:12], units[12:])
    refs = [_claim(kube_api, scheduler, n, m) for n, m in (("a", "12Gi"), ("b", "4Gi"))]
    answers = peer.prepare(*refs)
    assert [a["error"] for a in answers.values()] == ["", ""]
    assert {a["devices"][0]["device_name"] for a in answers.values()} == {"gpu-1"}
    with pytest.raises(Unschedulable):
        _claim(kube_api, scheduler, "c", "1Gi")  # no room left on the published GPU
    with pytest.raises(grpc.RpcError):  # a unit of GPU 1 is not the plugin's to give
        plugin.client.allocate([f"{UUIDS[1]}-0"])
    assert _handed_out(driver.state_dir) == {UUIDS[0]: GPU_BYTES, UUIDS[1]: GPU_BYTES}


def test_a_second_owner_is_refused_by_name(start_plugin, start_driver) -> None:
    plugin = start_plugin()
    driver = start_driver(wait=False)
    assert driver.proc.wait(timeout=30) == 1
    out = driver.output()
    assert f"the DRA driver (cgpu dra-driver) owns no GPU on node {NODE}" in out
    for index, uuid in enumerate(UUIDS):
        assert (
            f"GPU {index} ({uuid}) is owned by the device plugin (cgpu device-plugin), "
            f"pid {plugin.proc.pid} on node {NODE}"
        ) in out
    assert not (driver.kubelet_dir / "plugins_registry").exists()  # it never served


def test_a_killed_plugins_gpus_go_to_the_driver_once_its_containers_are_gone(
    start_plugin, start_driver, peer, kube_api, scheduler
) -> None:
    plugin = start_plugin()
    (held,) = plugin.client.allocate(_units(plugin, UUIDS[0])[:4])  # type: ignore[union-attr]
    plugin.proc.send_signal(signal.SIGKILL)
    plugin.proc.wait(timeout=10)

    driver = start_driver()  # the lock went with the plugin; its container still runs on GPU 0
    peer.register()
    assert _published(kube_api) == [UUIDS[1]]
    assert f"GPU 0 ({UUIDS[0]}) still has containers of the device plugin" in driver.output()
    ref = _claim(kube_api, scheduler, "whole", "16Gi")
    assert peer.prepare(ref)[ref[1]]["devices"][0]["device_name"] == "gpu-1"
    with pytest.raises(Unschedulable):
        _claim(kube_api, scheduler, "more", "13Gi")  # GPU 0 holds 4 GiB of the plugin's

    # The plugin's container ends and its directory goes (what its clean-up does).
    (directory,) = [p for p in list_container_dirs(driver.state_dir) if p.name.startswith("dp")]
    assert held["mounts"] and str(directory) in {m["host_path"] for m in held["mounts"]}
    shutil.rmtree(directory)
    wait_for(lambda: _published(kube_api) == UUIDS, "GPU 0 in the slice", timeout=30)
    assert f"GPU 0 ({UUIDS[0]}) is free now: offering it" in driver.output()

    again = start_plugin(register=False)  # the driver owns both GPUs now
    assert again.proc.wait(timeout=30) == 1
    out = again.output()
    assert "the device plugin (cgpu device-plugin) owns no GPU" in out
    assert f"is owned by the DRA driver (cgpu dra-driver), pid {driver.proc.pid}" in out
