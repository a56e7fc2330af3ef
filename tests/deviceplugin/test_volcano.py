"""Volcano mode (`--resource-name volcano.sh/gpu-memory`) on a simulated 2-GPU node.

Real gRPC from the kubelet-side peer, recorded Volcano pods served by the local API server and
read by the official client, and the shim enforcing the slice in a process on the simulator.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kube.apiserver import FakeApiServer
from plugin_harness import UUIDS, RunningPlugin

from cgpu.core.config import load_config
from cgpu.core.containers import containers_root
from cgpu.core.ledger import read_ledger

RES = "volcano.sh/gpu-memory"
MIB = 1 << 20
GPU0_MIB = 11178  # the seed's card: VOLCANO_GPU_MEMORY_TOTAL=11178
GPU1_MIB = 16384
SIM = {"devices": 2, "memory": f"{GPU0_MIB}MiB,{GPU1_MIB}MiB"}
NODE_STATUS = "/api/v1/nodes/node-1/status"


def ids(gpu: int, count: int, start: int = 0) -> list[str]:
    """`count` device IDs of one GPU, as the kubelet would hand them out: `<index>-<n>`."""
    return [f"{gpu}-{n}" for n in range(start, start + count)]


def host_dir(resp: dict) -> Path:
    """The container directory on the host (mounted at /var/run/cgpu)."""
    return Path(
        next(m["host_path"] for m in resp["mounts"] if m["container_path"] == "/var/run/cgpu")
    )


def wait_until(what: str, check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return result


def pod_patches(server: FakeApiServer) -> list[dict]:
    return server.recorded_patches("/pods/")


def node_patches(server: FakeApiServer) -> list[dict]:
    return [p for p in server.recorded_patches(NODE_STATUS) if p["path"] == NODE_STATUS]


@pytest.fixture
def volcano(
    start_plugin, recorded_api, dp_root: Path
) -> Iterator[Callable[..., tuple[RunningPlugin, FakeApiServer]]]:
    """Start the plugin in Volcano mode against a local API server holding `pods`."""

    def start(*args: str, pods: str = "pods_volcano.json", **sim: object):
        server = recorded_api(pods, "node.json")
        kubeconfig = server.kubeconfig(dp_root / "kubeconfig")
        plugin = start_plugin(
            "--resource-name", RES, "--kubeconfig", str(kubeconfig), "--node-name", "node-1",
            *args, **{**SIM, **sim},
        )  # fmt: skip
        return plugin, server

    yield start


def test_advertises_mib_and_publishes_gpu_number(volcano) -> None:
    plugin, server = volcano("--memory-unit", "GiB")
    assert plugin.registration["resource_name"] == RES
    assert plugin.registration["endpoint"] == "cgpu-gpu-memory.sock"
    devices = plugin.client.devices()
    # One device per MiB of each card, whatever --memory-unit said; IDs <gpu index>-<n>.
    assert devices == [(i, "Healthy") for i in ids(0, GPU0_MIB) + ids(1, GPU1_MIB)]
    log = plugin.wait_log("--memory-unit GiB ignored: Volcano counts volcano.sh/gpu-memory in MiB")
    assert "advertising 1 MiB units" in log
    assert "GPUs of different sizes (11178, 16384 MiB)" in log

    patch = wait_until("the node patch", lambda: node_patches(server))[0]
    assert patch["content_type"] == "application/strategic-merge-patch+json"
    assert patch["body"] == {
        "metadata": {"annotations": {"volcano.sh/gpu-unhealthy-ids": None}},
        "status": {
            "capacity": {"volcano.sh/gpu-number": "2"},
            "allocatable": {"volcano.sh/gpu-number": "2"},
        },
    }
    status = server.get("nodes", "node-1")["status"]
    assert status["capacity"]["volcano.sh/gpu-number"] == "2"
    assert status["allocatable"]["volcano.sh/gpu-number"] == "2"
    assert status["capacity"]["cpu"] == "64"  # merged, not replaced


def test_pods_land_on_their_gpu_index_in_predicate_time_order(volcano) -> None:
    plugin, server = volcano()
    # gpu-early-0 (index 0) was predicated before gpu-late-0 (index 1), though created after.
    # The kubelet is steered to the pod's card, so its own count follows the card.
    assert plugin.client.preferred(ids(0, GPU0_MIB) + ids(1, GPU1_MIB), [], 2048) == ids(0, 2048)

    # A kubelet that offers units of another card: the annotation still decides.
    (early,) = plugin.client.allocate(ids(1, 2048))
    assert {k: v for k, v in early["envs"].items() if k != "CGPU_LEDGER_DIR"} == {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "VOLCANO_GPU_ALLOCATED": "2048",
        "VOLCANO_GPU_MEMORY_TOTAL": str(GPU0_MIB),
    }
    assert load_config(host_dir(early) / "cgpu.conf") == {UUIDS[0]: 2048 * MIB}
    meta = json.loads((host_dir(early) / "meta.json").read_text())
    assert (meta["namespace"], meta["pod"], meta["container"]) == ("team-a", "gpu-early-0", "main")
    assert meta["gpu_uuids"] == [UUIDS[0]] and meta["allocated_mib"] == 2048
    (patch,) = pod_patches(server)
    assert patch["path"] == "/api/v1/namespaces/team-a/pods/gpu-early-0"
    assert patch["body"] == {"metadata": {"annotations": {"volcano.sh/gpu-assigned": "true"}}}
    stored = server.get("pods", "gpu-early-0", "team-a")["metadata"]["annotations"]
    assert stored["volcano.sh/gpu-assigned"] == "true"

    # The next Allocate of the same size takes the next pod: gpu-late-0, on GPU 1.
    (late,) = plugin.client.allocate(ids(1, 2048, start=2048))
    assert late["envs"]["NVIDIA_VISIBLE_DEVICES"] == "1"
    assert late["envs"]["VOLCANO_GPU_MEMORY_TOTAL"] == str(GPU1_MIB)
    assert load_config(host_dir(late) / "cgpu.conf") == {UUIDS[1]: 2048 * MIB}
    assert pod_patches(server)[-1]["path"] == "/api/v1/namespaces/team-b/pods/gpu-late-0"

    # Both pods are assigned now, and no other pod asks for 2048: a clear refusal.
    with pytest.raises(grpc.RpcError) as err:
        plugin.client.allocate(ids(0, 2048, start=4096))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no pending pod on node node-1 has a container asking for 2048" in err.value.details()
    assert len(list(containers_root(plugin.state_dir.resolve()).iterdir())) == 2


def test_the_shim_enforces_the_volcano_slice(volcano, sim_env, shim, native_build) -> None:
    plugin, server = volcano()
    (resp,) = plugin.client.allocate(ids(0, 1024))  # gpu-small-0: 1024 MiB on GPU 1
    envs = resp["envs"]
    assert envs["NVIDIA_VISIBLE_DEVICES"] == "1" and envs["VOLCANO_GPU_ALLOCATED"] == "1024"
    directory = host_dir(resp)

    # The container as the runtime makes it: only GPU 1 visible, the directory mounted (here
    # its host path), the returned variables set.
    env = {
        **sim_env(**SIM, uuids=",".join(UUIDS[:2])),
        **envs,
        "CGPU_LEDGER_DIR": str(directory),
        "CUDA_VISIBLE_DEVICES": envs["NVIDIA_VISIBLE_DEVICES"],
        "LD_PRELOAD": str(shim),
    }
    probe = [str(native_build / "cuda_probe"), "dlsym", "init", "info"]
    run = subprocess.run(
        [*probe, "alloc", str(768 * MIB), "alloc", str(512 * MIB)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line.split() for line in run.stdout.splitlines()]
    assert ["init", "0"] in lines, run.stderr
    info = next(line for line in lines if line[0] == "info")
    assert info[1] == "0" and int(info[3]) == 1024 * MIB  # the program sees its slice
    allocs = [line[1] for line in lines if line[0] == "alloc"]
    assert allocs == ["0", "2"]  # 768 MiB fits, 512 more would exceed 1024: out of memory
    assert (
        f"out of GPU memory slice on {UUIDS[1]}: requested {512 * MIB} bytes, "
        f"{768 * MIB} of {1024 * MIB} in use" in run.stderr
    )

    snap = read_ledger(directory / "cgpu.ledger")
    assert [(d.uuid, d.limit) for d in snap.devices] == [(UUIDS[1], 1024 * MIB)]
    (patch,) = pod_patches(server)
    assert patch["path"] == "/api/v1/namespaces/team-a/pods/gpu-small-0"


def _with_pod(
    server: FakeApiServer, name: str, mib: int, annotations: dict[str, str], sidecar_mib: int = 0
) -> None:
    """Add a pending pod like gpu-small-0 with these Volcano annotations (and no others).

    With `sidecar_mib`, the pod has a second container, "sidecar", asking for that much.
    """
    pod = copy.deepcopy(server.get("pods", "gpu-small-0", "team-a"))
    pod["metadata"].update(name=name, uid=f"uid-{name}", annotations=annotations)
    pod["spec"]["containers"][0]["resources"] = {"limits": {RES: str(mib)}}
    if sidecar_mib:
        second = copy.deepcopy(pod["spec"]["containers"][0])
        second.update(name="sidecar", resources={"limits": {RES: str(sidecar_mib)}})
        pod["spec"]["containers"].append(second)
    server.create("pods", pod)


T0 = "1000"  # predicate time older than any recorded pod: these are matched first


@pytest.mark.parametrize(
    ("annotations", "mib", "code", "message"),
    [
        (
            {"volcano.sh/predicate-time": T0},
            100,
            grpc.StatusCode.FAILED_PRECONDITION,
            "pod team-a/bad-0 has no volcano.sh/gpu-index annotation",
        ),
        (
            {"volcano.sh/gpu-index": "one", "volcano.sh/predicate-time": T0},
            100,
            grpc.StatusCode.INVALID_ARGUMENT,
            "annotation volcano.sh/gpu-index='one' is not a GPU index",
        ),
        (
            {"volcano.sh/gpu-index": "0,1", "volcano.sh/predicate-time": T0},
            100,
            grpc.StatusCode.INVALID_ARGUMENT,
            "names several GPUs",
        ),
        (
            {"volcano.sh/gpu-index": "5", "volcano.sh/predicate-time": T0},
            100,
            grpc.StatusCode.FAILED_PRECONDITION,
            "volcano.sh/gpu-index=5 names a GPU this node does not have (GPU indexes here: 0, 1)",
        ),
        (
            {"volcano.sh/gpu-index": "0", "volcano.sh/predicate-time": T0},
            12000,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "12000 MiB of volcano.sh/gpu-memory do not fit on GPU 0",
        ),
        (
            {"volcano.sh/gpu-index": "1", "volcano.sh/predicate-time": T0},
            300,  # the request below is for 100: no pod asks for it
            grpc.StatusCode.FAILED_PRECONDITION,
            "no pending pod on node node-1 has a container asking for 100",
        ),
    ],
    ids=["no-index", "garbled-index", "several-indexes", "absent-gpu", "too-big", "no-pod"],
)
def test_bad_input_is_a_clear_grpc_error(volcano, annotations, mib, code, message) -> None:
    plugin, server = volcano()
    _with_pod(server, "bad-0", mib, annotations)
    request = ids(0, GPU0_MIB) + ids(1, mib - GPU0_MIB) if mib > GPU0_MIB else ids(1, 100)
    with pytest.raises(grpc.RpcError) as err:
        plugin.client.allocate(request)
    assert err.value.code() == code
    assert message in err.value.details()
    root = containers_root(plugin.state_dir.resolve())
    assert not root.exists() or list(root.iterdir()) == []
    assert pod_patches(server) == []  # nothing marked assigned


def test_unknown_device_ids_are_refused(volcano) -> None:
    plugin, _ = volcano()
    stale = f"{UUIDS[0]}-0"  # an ID of the gpushare mode, e.g. from an old checkpoint
    with pytest.raises(grpc.RpcError) as err:
        plugin.client.allocate([stale, *ids(1, 1023)])
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert f"unknown volcano.sh/gpu-memory device IDs: {stale}" in err.value.details()
    assert "advertises <gpu-index>-<unit> IDs in units of 1 MiB" in err.value.details()


def test_an_80gb_card_stays_in_mib_units(volcano) -> None:
    # Short <index>-<n> IDs, as Volcano's own plugin uses, keep one H100 80GB (81559 MiB)
    # under the kubelet's 4 MiB ListAndWatch limit without coarsening.
    plugin, _ = volcano(devices=1, memory="81559MiB", uuids=UUIDS[0])
    log = plugin.wait_log("advertising 1 MiB units")
    assert "coarsen" not in log and "instead" not in log
    devices = plugin.client.devices()
    assert len(devices) == 81559 and devices[-1] == ("0-81558", "Healthy")


def test_unhealthy_gpu_is_annotated_and_refused(volcano, dp_root: Path) -> None:
    faults = dp_root / "faults"
    faults.write_text("")
    plugin, server = volcano("--health-recovery", "0", faults=str(faults))
    plugin.wait_log("watching XID events on 2 GPUs")
    wait_until("the first node patch", lambda: node_patches(server))

    with open(faults, "a") as handle:
        handle.write(f"{UUIDS[1]} 79\n")  # GPU 1 fell off the bus
    patch = wait_until("the unhealthy patch", lambda: node_patches(server)[1:])[0]
    assert patch["body"]["metadata"] == {"annotations": {"volcano.sh/gpu-unhealthy-ids": "1"}}
    # gpu-number still counts every card: the scheduler divides gpu-memory capacity by it.
    assert patch["body"]["status"]["capacity"] == {"volcano.sh/gpu-number": "2"}
    node = server.get("nodes", "node-1")
    assert node["metadata"]["annotations"]["volcano.sh/gpu-unhealthy-ids"] == "1"

    with pytest.raises(grpc.RpcError) as err:  # gpu-small-0 was placed on GPU 1
        plugin.client.allocate(ids(0, 1024))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "volcano.sh/gpu-index=1 names GPU" in err.value.details()
    assert "which is Unhealthy" in err.value.details()


def test_node_figures_come_back_after_a_kubelet_restart(volcano) -> None:
    plugin, server = volcano()
    wait_until("the first node patch", lambda: node_patches(server))

    def kubelet_reregistered(node: dict) -> dict:  # unknown extended resources are dropped
        for part in ("capacity", "allocatable"):
            node["status"][part].pop("volcano.sh/gpu-number")
        node["metadata"].setdefault("annotations", {})["volcano.sh/gpu-unhealthy-ids"] = "0"
        return node

    server.update("nodes", "node-1", kubelet_reregistered)
    plugin.kubelet.restart()
    plugin.kubelet.wait_registration(2, timeout=10)

    def restored() -> bool:
        node = server.get("nodes", "node-1")
        return (
            node["status"]["capacity"].get("volcano.sh/gpu-number") == "2"
            and node["status"]["allocatable"].get("volcano.sh/gpu-number") == "2"
            and "volcano.sh/gpu-unhealthy-ids" not in node["metadata"]["annotations"]
        )

    wait_until("gpu-number republished", restored)


def test_volcano_mode_needs_an_api_server(sim_env, dp_root: Path) -> None:
    command = [
        sys.executable, "-m", "cgpu.cli", "device-plugin",
        "--resource-name", RES,
        "--kubelet-dir", str(dp_root / "device-plugins"),
        "--state-dir", str(dp_root / "state"),
    ]  # fmt: skip
    run = subprocess.run(
        command,
        env={k: v for k, v in sim_env(**SIM).items() if k not in ("KUBECONFIG",)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 1
    assert "volcano.sh/gpu-memory needs the API server" in run.stderr


def test_a_two_container_pod_is_assigned_once_both_are_served(volcano) -> None:
    plugin, server = volcano()
    _with_pod(
        server, "pair-0", 300,
        {"volcano.sh/gpu-index": "0", "volcano.sh/predicate-time": T0}, sidecar_mib=200,
    )  # fmt: skip

    (main,) = plugin.client.allocate(ids(1, 300))
    assert main["envs"]["VOLCANO_GPU_ALLOCATED"] == "300"
    assert pod_patches(server) == []  # the sidecar is still waiting for its GPU
    (side,) = plugin.client.allocate(ids(1, 200, start=300))
    assert side["envs"]["NVIDIA_VISIBLE_DEVICES"] == "0"
    assert load_config(host_dir(side) / "cgpu.conf") == {UUIDS[0]: 200 * MIB}
    assert json.loads((host_dir(side) / "meta.json").read_text())["container"] == "sidecar"
    (patch,) = pod_patches(server)
    assert patch["path"] == "/api/v1/namespaces/team-a/pods/pair-0"
