"""The whole chain: extender -> annotations -> device plugin (API mode) -> kubelet's Allocate.

The extender binds a pod to a GPU of a simulated two-GPU node; the device plugin, reading the
same fake API server, follows the extender's GPU even when the kubelet offers another one, and
marks the pod ALIYUN_COM_GPU_MEM_ASSIGNED=true.
"""

from __future__ import annotations

import time

from kube.objects import gpu_node, gpu_pod
from node_plugin import NODE_UUIDS as UUIDS
from sched_peer import SchedulerPeer, url_of, wait_until

IDX = "ALIYUN_COM_GPU_MEM_IDX"
ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"


def test_extender_choice_reaches_the_container(kube_api, extender, node_plugin):
    # A V100-sized node: 16130 MiB GPUs advertise 15 GiB units each.
    kube_api.create("nodes", gpu_node("node-1", 2, 15))
    busy = {IDX: "0", ASSIGNED: "true"}
    kube_api.create("pods", gpu_pod("busy", 12, node="node-1", annotations=busy, phase="Running"))
    kube_api.create("pods", gpu_pod("infer", 4, namespace="team-a"))

    ext = extender()
    assert SchedulerPeer(kube_api, url_of(ext)).schedule("team-a", "infer").node == "node-1"
    assert kube_api.get("pods", "infer", "team-a")["metadata"]["annotations"][IDX] == "1"

    client = None
    try:
        registration = node_plugin.kubelet.wait_registration(1, 30)
        client = node_plugin.kubelet.plugin(registration["endpoint"])
        # An older kubelet that skips GetPreferredAllocation offers four units of GPU 0.
        (resp,) = client.allocate([f"{UUIDS[0]}-{n}" for n in range(4)])
        envs = resp["envs"]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1], node_plugin.log_path.read_text()
        assert envs["ALIYUN_COM_GPU_MEM_IDX"] == "1"
        assert envs["ALIYUN_COM_GPU_MEM_POD"] == "4"
        assert envs["ALIYUN_COM_GPU_MEM_DEV"] == "15"

        def assigned() -> bool:
            notes = kube_api.get("pods", "infer", "team-a")["metadata"]["annotations"]
            return notes.get(ASSIGNED) == "true"

        wait_until(assigned, timeout=15, what="the device plugin to mark the pod assigned")
        # The extender's view follows the plugin's patch and keeps the pod on GPU 1.
        time.sleep(0.2)
        devs = ext.state.inspect("node-1")["nodes"][0]["devs"]
        assert [d["usedGPU"] for d in devs] == [12, 4]
    finally:
        if client is not None:
            client.close()
