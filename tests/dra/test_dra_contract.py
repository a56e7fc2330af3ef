"""The driver's reading of a webhook-made claim's DevicePluginContract (cgpu.dra.contract):
the slice is exactly the memory asked for, the variables are the device plugin's, and
malformed parameters fail the claim with the field named."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cgpu.core.claimconfig import GPUSHARE, VOLCANO, DevicePluginContract
from cgpu.dra.claims import ClaimError, parse_claim
from cgpu.dra.contract import apply_contract, claim_contract
from cgpu.dra.inventory import GpuInfo, Inventory

MiB, GiB = 1 << 20, 1 << 30
POOL = "node-1"
V100 = GpuInfo(0, "GPU-0000", "Tesla V100", 16130 * MiB, "Volta", "535", "7.0", 0)
A100 = GpuInfo(1, "GPU-1111", "A100", 40960 * MiB, "Ampere", "535", "8.0", 1)
INVENTORY = Inventory([V100, A100])


def _claim(
    parameters: Any, consumed: list[tuple[str, str]], compute: str | None = None
) -> dict[str, Any]:
    """An allocated claim: one result per (device, consumed memory), the config as the
    scheduler copies it from the claim."""
    results = []
    for device, memory in consumed:
        capacity = {"memory": memory, **({"compute": compute} if compute else {})}
        results.append(
            {"request": "gpu", "driver": "gpu.cgpu.io", "pool": POOL, "device": device,
             "consumedCapacity": capacity, "shareID": f"share-{device}"}
        )  # fmt: skip
    config = [
        {"source": "FromClaim", "requests": ["gpu"],
         "opaque": {"driver": "gpu.cgpu.io", "parameters": parameters}}
    ]  # fmt: skip
    return {
        "metadata": {"name": "pod-gpu-claim-0", "namespace": "default", "uid": "u-1"},
        "status": {"allocation": {"devices": {"results": results, "config": config}}},
    }


def _serve(claim: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    allocation = parse_claim(claim, "u-1", POOL, INVENTORY)
    gpus = [g for g in INVENTORY.gpus if g.uuid in allocation.memory]
    served, env = apply_contract(claim, allocation, gpus)
    return served.memory, env


def test_gpushare_gib_units_get_exactly_the_gibs_and_the_plugins_variables() -> None:
    params = DevicePluginContract(GPUSHARE, 4, 1024).parameters()
    memory, env = _serve(_claim(params, [("gpu-0", "4Gi")]))
    assert memory == {V100.uuid: 4 * GiB}
    assert env == {
        "NVIDIA_VISIBLE_DEVICES": V100.uuid,
        "ALIYUN_COM_GPU_MEM_IDX": "0",
        "ALIYUN_COM_GPU_MEM_CONTAINER": "4",
        "ALIYUN_COM_GPU_MEM_DEV": "15",  # floor(16130 MiB / 1 GiB), as gpushare counts it
    }


def test_consumed_capacity_rounded_up_to_the_step_still_gives_what_was_asked() -> None:
    params = DevicePluginContract(GPUSHARE, 1000, 1).parameters()  # --memory-unit MiB
    memory, env = _serve(_claim(params, [("gpu-0", "1Gi")]))  # 1000 MiB -> the 256 MiB step
    assert memory == {V100.uuid: 1000 * MiB}
    assert (env["ALIYUN_COM_GPU_MEM_CONTAINER"], env["ALIYUN_COM_GPU_MEM_DEV"]) == ("1000", "16130")


def test_a_device_held_whole_gives_what_was_asked_not_the_card() -> None:
    claim = _claim(DevicePluginContract(GPUSHARE, 2, 1024).parameters(), [("gpu-1", "1Gi")])
    del claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]
    memory, _ = _serve(claim)
    assert memory == {A100.uuid: 2 * GiB}


def test_less_consumed_than_asked_gives_what_was_consumed() -> None:
    memory, _ = _serve(_claim(DevicePluginContract(GPUSHARE, 4, 1024).parameters(),
                              [("gpu-0", "3Gi")]))  # fmt: skip
    assert memory == {V100.uuid: 3 * GiB}  # never more than the scheduler accounted


def test_gpu_count_spreads_the_variables_over_each_gpu() -> None:
    params = DevicePluginContract(GPUSHARE, 2, 1024).parameters()
    memory, env = _serve(_claim(params, [("gpu-0", "2Gi"), ("gpu-1", "2Gi")]))
    assert memory == {V100.uuid: 2 * GiB, A100.uuid: 2 * GiB}
    assert env["NVIDIA_VISIBLE_DEVICES"] == f"{V100.uuid},{A100.uuid}"
    assert env["ALIYUN_COM_GPU_MEM_IDX"] == "0,1"
    assert (env["ALIYUN_COM_GPU_MEM_CONTAINER"], env["ALIYUN_COM_GPU_MEM_DEV"]) == ("2", "15")


def test_a_compute_share_sets_the_plugins_compute_variable() -> None:
    params = DevicePluginContract(GPUSHARE, 2, 1024).parameters()
    _, env = _serve(_claim(params, [("gpu-1", "2Gi")], compute="30"))
    assert env["CGPU_COMPUTE_LIMIT"] == "30"


def test_volcano_gets_volcanos_variables_with_the_gpu_index() -> None:
    params = DevicePluginContract(VOLCANO, 3000, 1).parameters()
    memory, env = _serve(_claim(params, [("gpu-1", "3072Mi")]))
    assert memory == {A100.uuid: 3000 * MiB}
    assert env == {
        "NVIDIA_VISIBLE_DEVICES": "1",
        "VOLCANO_GPU_ALLOCATED": "3000",
        "VOLCANO_GPU_MEMORY_TOTAL": "40960",
    }


def test_a_claim_without_a_contract_is_served_as_before() -> None:
    claim = _claim({"apiVersion": "gpu.cgpu.io/v1alpha1", "kind": "SomethingElse"},
                   [("gpu-0", "4Gi")])  # fmt: skip
    assert _serve(claim) == ({V100.uuid: 4 * GiB}, {})  # another reader's kind
    del claim["status"]["allocation"]["devices"]["config"]
    assert _serve(claim) == ({V100.uuid: 4 * GiB}, {})


def test_another_drivers_config_is_not_read() -> None:
    claim = _claim({"kind": "DevicePluginContract", "units": "garbage"}, [("gpu-0", "4Gi")])
    claim["status"]["allocation"]["devices"]["config"][0]["opaque"]["driver"] = "gpu.nvidia.com"
    assert claim_contract(claim, ["gpu"]) is None


GOOD = DevicePluginContract(GPUSHARE, 4, 1024).parameters()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"units": "4"}, "units '4' is not an integer"),
        ({"units": 0}, "is not positive"),
        ({"unitMiB": True}, "unitMiB True is not an integer"),
        ({"contract": "hami"}, "contract 'hami' is not one of"),
        ({"memory": "4Gb"}, "memory"),
        ({"memory": "5Gi"}, "is not units x unitMiB"),
        ({"apiVersion": "gpu.cgpu.io/v2"}, "are not gpu.cgpu.io/v1alpha1 DevicePluginContract"),
        ({"colour": "green"}, "unknown field(s) colour"),
    ],
)
def test_malformed_parameters_fail_the_claim_naming_the_field(
    change: dict[str, Any], message: str
) -> None:
    claim = _claim({**GOOD, **change}, [("gpu-0", "4Gi")])
    with pytest.raises(ClaimError, match="claim default/pod-gpu-claim-0: opaque parameters") as err:
        _serve(claim)
    assert message in str(err.value)


def test_malformed_config_lists_fail_the_claim() -> None:
    claim = _claim(GOOD, [("gpu-0", "4Gi")])
    broken = copy.deepcopy(claim)
    broken["status"]["allocation"]["devices"]["config"] = {"opaque": {}}
    with pytest.raises(ClaimError, match="config is not a list"):
        _serve(broken)
    broken = copy.deepcopy(claim)
    broken["status"]["allocation"]["devices"]["config"][0]["requests"] = "gpu"
    with pytest.raises(ClaimError, match="requests is not a list"):
        _serve(broken)


def test_a_contract_must_cover_every_request_of_the_claim() -> None:
    claim = _claim(GOOD, [("gpu-0", "4Gi"), ("gpu-1", "4Gi")])
    claim["status"]["allocation"]["devices"]["results"][1]["request"] = "other"
    with pytest.raises(ClaimError, match=r"cover requests \['gpu'\] but not \['other'\]"):
        _serve(claim)


def test_two_devices_on_one_gpu_are_refused_under_a_contract() -> None:
    claim = _claim(GOOD, [("gpu-1", "4Gi"), ("gpu-1", "4Gi")])
    with pytest.raises(ClaimError, match="2 devices on GPU GPU-1111"):
        _serve(claim)
