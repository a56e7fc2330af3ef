"""The ResourceSlice pool: valid against the official schema, kept current, and only ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dra_helpers import NODE, UUIDS, own_slices, wait_for
from dra_scheduler import quantity
from kubeschema import validate_for

# Releases whose resource.k8s.io/v1 has consumable capacity (allowMultipleAllocations,
# requestPolicy, consumedCapacity, shareID): 1.34 (alpha) to the newest kubernetes-validate ships.
K8S_VERSIONS = ("1.34.0", "1.37.0")


def _validate(obj: dict[str, Any]) -> None:
    validate_for(obj, K8S_VERSIONS)


def test_the_schema_check_catches_a_wrong_field() -> None:
    bad = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "x"},
        "spec": {
            "driver": "gpu.cgpu.io",
            "nodeName": "n",
            "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "allowMultipleAllocation": True}],
        },
    }
    with pytest.raises(AssertionError, match="allowMultipleAllocation"):
        _validate(bad)


def test_published_slice_is_valid_for_releases_with_consumable_capacity(
    start_driver, kube_api
) -> None:
    start_driver(memory="16GiB,80GiB")
    (slice_,) = own_slices(kube_api)
    stored = {k: v for k, v in slice_.items() if k != "metadata"}
    stored["metadata"] = {"name": slice_["metadata"]["name"]}
    _validate(stored)


def test_request_policies_follow_the_api_rules(start_driver, kube_api) -> None:
    """CapacityRequestPolicyRange: min >= 0, min + step <= value, max <= value, max and the
    default multiples of step, min <= default <= max."""
    start_driver(memory="16GiB,1000MiB")
    for device in own_slices(kube_api)[0]["spec"]["devices"]:
        for name, capacity in device["capacity"].items():
            value = quantity(capacity["value"])
            policy = capacity["requestPolicy"]
            low, high, step = (quantity(policy["validRange"][k]) for k in ("min", "max", "step"))
            default = quantity(policy["default"])
            where = f"{device['name']} {name}"
            assert low >= 0 and low + step <= value and high <= value, where
            assert high % step == 0 and default % step == 0, where
            assert low <= default <= high, where


def test_a_critical_xid_withdraws_the_gpu_and_bumps_the_generation(
    start_driver, kube_api, tmp_path: Path
) -> None:
    faults = tmp_path / "faults"
    faults.write_text("")
    start_driver("--health-recovery", "0", faults=faults)
    (before,) = own_slices(kube_api)
    faults.write_text(f"{UUIDS[1]} 13\n")  # an application error: still published
    faults.write_text(f"{UUIDS[1]} 13\n{UUIDS[1]} 79\n")  # fallen off the bus
    after = wait_for(
        lambda: [s for s in own_slices(kube_api) if len(s["spec"]["devices"]) == 1],
        "the slice without gpu-1",
    )[0]
    assert [d["name"] for d in after["spec"]["devices"]] == ["gpu-0"]
    assert after["spec"]["pool"]["generation"] == before["spec"]["pool"]["generation"] + 1


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_the_kubelet_sees_device_health_change_on_xid(
    start_driver, peer, tmp_path: Path, version: str
) -> None:
    faults = tmp_path / "faults"
    faults.write_text("")
    start_driver("--health-recovery", "0", faults=faults)
    peer.register()
    stream = peer.watch_health(version)
    first = next(stream)
    assert {k: v["health"] for k, v in first.items()} == {
        (NODE, "gpu-0"): "HEALTHY",
        (NODE, "gpu-1"): "HEALTHY",
    }
    assert all(v["timeout"] > 10 for v in first.values())  # beyond the heartbeat
    faults.write_text(f"{UUIDS[0]} 48\n")  # a double-bit ECC error
    changed = next(stream)
    assert changed[(NODE, "gpu-0")]["health"] == "UNHEALTHY"
    assert changed[(NODE, "gpu-0")]["message"] == "critical XID 48"
    assert changed[(NODE, "gpu-1")]["health"] == "HEALTHY"


def test_restart_keeps_an_unchanged_pool_and_republishes_a_changed_one(
    start_driver, kube_api
) -> None:
    first = start_driver(devices=2)
    generation = own_slices(kube_api)[0]["spec"]["pool"]["generation"]
    first.stop()
    second = start_driver(devices=2)
    (same,) = own_slices(kube_api)
    assert same["spec"]["pool"]["generation"] == generation
    second.stop()  # one driver at a time owns the node's GPUs
    start_driver(devices=1).proc  # noqa: B018 - a third run with one GPU fewer
    changed = wait_for(
        lambda: [s for s in own_slices(kube_api) if len(s["spec"]["devices"]) == 1],
        "the slice with one GPU",
    )[0]
    assert changed["spec"]["pool"]["generation"] > generation


def test_only_its_own_slices_are_changed(start_driver, kube_api) -> None:
    def foreign(name: str, driver: str, node: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 7, "resourceSliceCount": 1},
                "devices": [{"name": "other-0"}],
            },
        }

    kube_api.create("resourceslices", foreign("nvidia-here", "gpu.nvidia.com", NODE))
    kube_api.create("resourceslices", foreign("ours-elsewhere", "gpu.cgpu.io", "node-2"))
    kube_api.create("resourceslices", foreign("ours-stale", "gpu.cgpu.io", NODE))
    driver = start_driver()

    def names() -> set[str]:
        return {s["metadata"]["name"] for s in kube_api.objects("resourceslices")}

    wait_for(lambda: "ours-stale" not in names(), "the stale slice deleted")
    assert names() == {"nvidia-here", "ours-elsewhere", f"{NODE}-gpu.cgpu.io"}
    (ours,) = own_slices(kube_api)
    assert ours["spec"]["pool"]["generation"] == 8  # above the stale slice of the same pool
    driver.stop()
    assert kube_api.get("resourceslices", "nvidia-here")["spec"]["pool"]["generation"] == 7
