"""One pod spec, two paths: the device plugin's Allocate, and webhook -> template -> claim ->
DRA prepare. The container gets the same variables, the same slice and the same nvidia-smi
view on both, except for the one documented difference (docs/contract.md, "Webhook claims
and the device plugin"): in GiB mode on a card that is not a whole number of GiB, the device
plugin gives units/DEV of the card and a claim exactly the GiBs asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dra_helpers import UUIDS
from webhook_chain import (
    SMI_RELEASE,
    TESTS,
    admit,
    allocated,
    claim_pod,
    device_plugin,
    gpushare_pod,
    prepared,
    smi_path,
    smi_view,
)

MiB, GiB = 1 << 20, 1 << 30
POD_UID = "7a4e9c1d-2b3f-4d5e-8f60-718293a4b5c6"


@pytest.fixture(scope="module")
def smi() -> Path:
    path = smi_path()
    if not path.is_file():
        pytest.fail(f"{path} is missing: run scripts/install-nvidia-smi.sh (scripts/setup.sh does)")
    return path


def _both_paths(start_driver, peer, kube_api, scheduler, dra_root, sim_env, *, memory: str,
                limits: dict[str, str], unit_mib: int, dp_args: tuple[str, ...] = ()):  # fmt: skip
    """(device plugin's, webhook's) for a pod asking for `limits` on a node of `memory`."""
    sim = {"devices": 2, "uuids": ",".join(UUIDS), "memory": memory, **SMI_RELEASE}
    driver = start_driver(**sim)
    peer.register()
    pod = admit(kube_api, gpushare_pod("trainer", limits), dra_root, unit_mib)
    ref = claim_pod(kube_api, scheduler, pod, POD_UID)["main"]
    dra, answer = prepared(driver, peer, ref)
    index = int(answer["devices"][0]["device_name"].removeprefix("gpu-"))
    units = int(next(iter(limits.values())))
    with device_plugin(dra_root / "dp", sim_env(**sim), *dp_args) as client:
        # The kubelet hands the plugin units of the GPU the claim landed on.
        plugin = allocated(client, [f"{UUIDS[index]}-{n}" for n in range(units)])
    return plugin, dra, index, sim


@pytest.mark.parametrize(
    ("memory", "limits", "unit_mib", "dp_args", "slice_bytes"),
    [
        ("16GiB,16GiB", {"aliyun.com/gpu-mem": "4"}, 1024, (), 4 * GiB),
        ("16130MiB,16GiB", {"aliyun.com/gpu-mem": "3000"}, 1, ("--memory-unit", "MiB"), 3000 * MiB),
    ],
    ids=["gib-units", "mib-units"],
)
def test_the_same_pod_gets_the_same_variables_slice_and_smi_view(
    start_driver, peer, kube_api, scheduler, dra_root, sim_env, shim, smi,
    memory, limits, unit_mib, dp_args, slice_bytes,
) -> None:  # fmt: skip
    plugin, dra, index, sim = _both_paths(
        start_driver, peer, kube_api, scheduler, dra_root, sim_env,
        memory=memory, limits=limits, unit_mib=unit_mib, dp_args=dp_args,
    )  # fmt: skip
    assert dra.env == plugin.env
    assert "ALIYUN_COM_GPU_MEM_CONTAINER" in dra.env and "ALIYUN_COM_GPU_MEM_DEV" in dra.env
    assert dra.slices == plugin.slices == {UUIDS[index]: slice_bytes}
    env = sim_env(**sim)
    views = [smi_view(smi, env, shim, s, UUIDS[index]) for s in (plugin, dra)]
    assert views[0] == views[1] == [slice_bytes // MiB, 0]


def test_gib_units_on_a_card_of_odd_size_differ_only_in_the_slice(
    start_driver, peer, kube_api, scheduler, dra_root, sim_env, shim, smi
) -> None:
    # 16130 MiB (a 16 GB V100): 15 GiB units, the seed's cGPU example.
    plugin, dra, index, sim = _both_paths(
        start_driver, peer, kube_api, scheduler, dra_root, sim_env,
        memory="16130MiB,16130MiB", limits={"aliyun.com/gpu-mem": "4"}, unit_mib=1024,
    )  # fmt: skip
    assert dra.env == plugin.env
    assert (dra.env["ALIYUN_COM_GPU_MEM_CONTAINER"], dra.env["ALIYUN_COM_GPU_MEM_DEV"]) == (
        "4",
        "15",
    )
    uuid = UUIDS[index]
    assert plugin.slices == {uuid: 16130 * MiB * 4 // 15}  # 4 of 15 units: 4301 MiB
    assert dra.slices == {uuid: 4 * GiB}  # exactly what the claim consumed
    env = sim_env(**sim)
    assert smi_view(smi, env, shim, plugin, uuid) == [4301, 0]
    assert smi_view(smi, env, shim, dra, uuid) == [4096, 0]


def test_volcano_gets_the_same_variables_slice_and_smi_view(
    start_driver, peer, kube_api, scheduler, dra_root, sim_env, shim, smi
) -> None:
    sim = {"devices": 2, "uuids": ",".join(UUIDS), "memory": "11178MiB,16GiB", **SMI_RELEASE}
    driver = start_driver(**sim)
    peer.register()
    limits = {"volcano.sh/gpu-memory": "3000"}
    pod = admit(kube_api, gpushare_pod("volcano-job", limits), dra_root)
    ref = claim_pod(kube_api, scheduler, pod, POD_UID)["main"]
    dra, answer = prepared(driver, peer, ref)
    index = int(answer["devices"][0]["device_name"].removeprefix("gpu-"))

    # The same pod as Volcano's scheduler leaves it for the device plugin on node-1.
    node = json.loads((TESTS / "deviceplugin" / "data" / "node.json").read_text())
    kube_api.create("nodes", node)
    scheduled = gpushare_pod("volcano-job", limits)
    scheduled["metadata"].update(
        uid=POD_UID,
        annotations={"volcano.sh/gpu-index": str(index),
                     "volcano.sh/predicate-time": "1732092800000000000"},
    )  # fmt: skip
    scheduled["spec"]["nodeName"] = "node-1"
    scheduled["status"] = {"phase": "Pending"}
    kube_api.create("pods", scheduled)
    kubeconfig = kube_api.kubeconfig(dra_root / "kubeconfig-dp")
    args = ("--resource-name", "volcano.sh/gpu-memory", "--kubeconfig", str(kubeconfig),
            "--node-name", "node-1")  # fmt: skip
    with device_plugin(dra_root / "dp", sim_env(**sim), *args, resources=1) as client:
        plugin = allocated(client, [f"{index}-{n}" for n in range(3000)])  # Volcano's IDs

    assert dra.env == plugin.env
    assert dra.env["NVIDIA_VISIBLE_DEVICES"] == str(index)
    assert dra.env["VOLCANO_GPU_ALLOCATED"] == "3000"
    assert dra.slices == plugin.slices == {UUIDS[index]: 3000 * MiB}
    env = sim_env(**sim)
    views = [smi_view(smi, env, shim, s, UUIDS[index]) for s in (plugin, dra)]
    assert views[0] == views[1] == [3000, 0]
