"""The whole chain for the compute share: extender -> annotations -> device plugin (API mode,
both resources) -> the kubelet's Allocate calls -> one cgpu.conf with both lines.

GPU 0 of a two-GPU node has memory left but little compute, so the extender puts a pod asking
for both on GPU 1 (memory alone would have chosen GPU 0), and a compute-only pod on GPU 0. The
device plugin follows the extender's GPU for both resources of each container.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compute_objects import CORE, compute_node, compute_pod, schedule
from node_plugin import NODE_UUIDS as UUIDS
from sched_peer import SchedulerPeer, url_of, wait_until

IDX = "ALIYUN_COM_GPU_MEM_IDX"
ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"
MEM = "aliyun.com/gpu-mem"
MIB = 1 << 20
LEDGER = "/var/run/cgpu"


def directory(resp: dict[str, Any]) -> Path:
    return Path(next(m["host_path"] for m in resp["mounts"] if m["container_path"] == LEDGER))


def conf(resp: dict[str, Any]) -> list[str]:
    text = (directory(resp) / "cgpu.conf").read_text()
    # `context` lines (the measured context cost): tests/deviceplugin/test_plugin_context_cost.py
    skip = ("#", "context ")
    return [line for line in text.splitlines() if line and not line.startswith(skip)]


def test_memory_and_compute_meet_on_the_extenders_gpu(kube_api, extender, node_plugin):
    kube_api.create("nodes", compute_node("node-1", 2, 15))
    busy = {IDX: "0", ASSIGNED: "true"}
    kube_api.create(
        "pods", compute_pod("busy", 8, 80, node="node-1", annotations=busy, phase="Running")
    )
    kube_api.create("pods", compute_pod("infer", 4, 30, namespace="team-a"))
    kube_api.create("pods", compute_pod("solo", 0, 20, namespace="team-a"))

    ext = extender()
    peer = SchedulerPeer(kube_api, url_of(ext))
    assert schedule(peer, "infer", "team-a") == "node-1"
    assert schedule(peer, "solo", "team-a") == "node-1"
    assert kube_api.get("pods", "infer", "team-a")["metadata"]["annotations"][IDX] == "1"
    assert kube_api.get("pods", "solo", "team-a")["metadata"]["annotations"][IDX] == "0"

    clients = {}
    try:
        kubelet = node_plugin.kubelet
        kubelet.wait_registration(2, 30)
        endpoints = {r["resource_name"]: r["endpoint"] for r in kubelet.registrations}
        clients = {name: kubelet.plugin(endpoint) for name, endpoint in endpoints.items()}
        memory, compute = clients[MEM], clients[CORE]
        every_core = [f"{u}-core-{n}" for u in UUIDS for n in range(100)]

        # infer: an older kubelet offers memory units of GPU 0; the plugin follows the index.
        (mem_resp,) = memory.allocate([f"{UUIDS[0]}-{n}" for n in range(4)])
        log = node_plugin.log_path
        assert mem_resp["envs"]["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1], log.read_text()
        cores = compute.preferred(every_core, [], 30)
        assert all(c.startswith(UUIDS[1]) for c in cores), cores
        (core_resp,) = compute.allocate(cores)
        assert directory(core_resp) == directory(mem_resp)
        slice_bytes = 16130 * MIB * 4 // 15  # 4 of the GPU's 15 units (as cGPU computes it)
        both = ["version 1", f"device {UUIDS[1]} {slice_bytes}", f"compute {UUIDS[1]} 30"]
        assert conf(mem_resp) == both
        assert core_resp["envs"]["CGPU_COMPUTE_LIMIT"] == "30"

        # solo: compute only, on GPU 0 as the extender chose; its memory is not limited.
        cores = compute.preferred(every_core, [], 20)
        assert all(c.startswith(UUIDS[0]) for c in cores), cores
        (solo_resp,) = compute.allocate(cores)
        assert solo_resp["envs"]["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]
        solo_conf = conf(solo_resp)
        assert solo_conf[0] == "version 1" and solo_conf[1].startswith(f"device {UUIDS[0]} ")
        assert solo_conf[2:] == [f"compute {UUIDS[0]} 20"]

        def assigned(name: str) -> bool:
            notes = kube_api.get("pods", name, "team-a")["metadata"]["annotations"]
            return notes.get(ASSIGNED) == "true"

        wait_until(lambda: assigned("infer") and assigned("solo"), timeout=15, what="assigned")
        devs = ext.state.inspect("node-1")["nodes"][0]["devs"]
        assert [(d["usedGPU"], d["usedCompute"]) for d in devs] == [(8, 100), (4, 30)]
        # GPU 0's compute is now full: a further compute pod can only go to GPU 1.
        kube_api.create("pods", compute_pod("late", 1, 10, namespace="team-a"))
        assert schedule(peer, "late", "team-a") == "node-1"
        assert kube_api.get("pods", "late", "team-a")["metadata"]["annotations"][IDX] == "1"
    finally:
        for client in clients.values():
            client.close()
