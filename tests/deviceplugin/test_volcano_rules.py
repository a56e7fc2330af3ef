"""Volcano's matching rules on pod JSON, and the slice a grant writes (pure functions)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from cgpu.core.gpus import GPU
from cgpu.core.layout import (
    VOLCANO_GPU_ASSIGNED,
    VOLCANO_GPU_INDEX,
    VOLCANO_GPU_MEMORY,
    VOLCANO_PREDICATE_TIME,
)
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.kube.pods import parse_pod
from cgpu.deviceplugin.rm import volcano
from cgpu.deviceplugin.rm.inventory import Inventory
from cgpu.deviceplugin.rm.units import MIB, Unit

RES = VOLCANO_GPU_MEMORY


def pod_json(
    name: str,
    containers: list[tuple[str, int]],
    annotations: dict[str, str] | None = None,
    created: str = "2024-11-20T09:00:00Z",
    status: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "creationTimestamp": created,
        "annotations": annotations or {},
    }
    if deleting:
        meta["deletionTimestamp"] = "2024-11-20T10:00:00Z"
    return {
        "metadata": meta,
        "spec": {
            "containers": [
                {"name": c, "resources": {"limits": {RES: str(mib)}} if mib else {}}
                for c, mib in containers
            ]
        },
        "status": {"phase": "Pending", **(status or {})},
    }


def pods(*raw: dict[str, Any]):
    return [parse_pod(p, RES) for p in raw]


def names(found) -> list[str]:
    return [p.name for p in found]


def test_predicate_time_orders_and_unreadable_times_go_last() -> None:
    found = volcano.candidates(
        pods(
            pod_json("none", [("c", 1)], created="2024-11-20T08:00:00Z"),
            pod_json("garbled", [("c", 1)], {VOLCANO_PREDICATE_TIME: "soon"}),
            pod_json("superscript", [("c", 1)], {VOLCANO_PREDICATE_TIME: "²"}),
            pod_json("late", [("c", 1)], {VOLCANO_PREDICATE_TIME: "1732093800000000002"}),
            pod_json("early", [("c", 1)], {VOLCANO_PREDICATE_TIME: "1732093800000000001"}),
            pod_json("tie-b", [("c", 1)], {VOLCANO_PREDICATE_TIME: "5"}, "2024-11-20T09:01:00Z"),
            pod_json("tie-a", [("c", 1)], {VOLCANO_PREDICATE_TIME: "5"}, "2024-11-20T09:02:00Z"),
        )
    )
    # Equal times: the older pod first; no time at all: last, older first.
    assert names(found) == ["tie-b", "tie-a", "early", "late", "none", "garbled", "superscript"]


@pytest.mark.parametrize(
    ("value", "assigned"), [(None, False), ("false", False), ("true", True), ("yes", True)]
)
def test_assigned_follows_volcanos_rule(value: str | None, assigned: bool) -> None:
    notes = {} if value is None else {VOLCANO_GPU_ASSIGNED: value}
    (pod,) = pods(pod_json("p", [("c", 1)], notes))
    assert volcano.assigned(pod) is assigned
    assert names(volcano.candidates([pod])) == ([] if assigned else ["p"])


def test_deleted_refused_and_cpu_only_pods_are_not_candidates() -> None:
    found = volcano.candidates(
        pods(
            pod_json("deleting", [("c", 1)], deleting=True),
            pod_json("admission", [("c", 1)], status={"reason": "UnexpectedAdmissionError"}),
            pod_json(
                "prestart",
                [("c", 1)],
                status={
                    "containerStatuses": [
                        {
                            "name": "c",
                            "state": {"waiting": {"message": "PreStartContainer check failed: x"}},
                        }
                    ]
                },
            ),
            pod_json("cpu", [("c", 0)]),
            pod_json("running", [("c", 1)], status={"phase": "Running"}),
            pod_json("ok", [("c", 1)]),
        )
    )
    assert names(found) == ["ok"]


def test_containers_of_one_pod_are_matched_in_turn() -> None:
    found = pods(
        pod_json("two", [("a", 100), ("side", 0), ("b", 100)], {VOLCANO_PREDICATE_TIME: "1"}),
        pod_json("next", [("c", 100)], {VOLCANO_PREDICATE_TIME: "2"}),
    )
    served: set[tuple[str, str]] = set()
    order = []
    for _ in range(3):
        match = volcano.match(found, 100, served)
        assert match is not None
        served.add((match[0].uid, match[1].name))
        order.append(f"{match[0].name}/{match[1].name}")
    assert order == ["two/a", "two/b", "next/c"]
    assert volcano.match(found, 100, served) is None
    assert volcano.match(found, 99, set()) is None  # no container asks for 99


def test_grant_slice_follows_the_shims_variable_rule() -> None:
    # A card whose NVML total is not a whole number of MiB.
    total = 16130 * MIB + 123456
    inventory = Inventory([GPU(0, "GPU-a", "sim", total)], Unit("MiB"))
    (pod,) = pods(pod_json("p", [("c", 1024)], {VOLCANO_GPU_INDEX: " 0 "}))
    grant = volcano.grant(inventory, pod, 1024)
    assert grant.environment() == {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "VOLCANO_GPU_ALLOCATED": "1024",
        "VOLCANO_GPU_MEMORY_TOTAL": "16130",
    }
    # The config file and the two variables give the same slice.
    assert grant.limit_bytes == total * 1024 // 16130

    with pytest.raises(AllocationError) as err:
        volcano.grant(inventory, pod, 16131)
    assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_coarsened_unit_counts_its_factor_in_mib() -> None:
    inventory = Inventory([GPU(0, "GPU-a", "sim", 16384 * MIB)], Unit("MiB", 4))
    (pod,) = pods(pod_json("p", [("c", 256)], {VOLCANO_GPU_INDEX: "0"}))
    grant = volcano.grant(inventory, pod, 256)
    assert grant.environment()["VOLCANO_GPU_ALLOCATED"] == "1024"
    assert grant.limit_bytes == 1024 * MIB


def test_unhealthy_ids_list_indexes() -> None:
    gpus = [GPU(i, f"GPU-{i}", "sim", 1024 * MIB) for i in range(3)]
    inventory = Inventory(gpus, Unit("MiB"))
    assert volcano.unhealthy_ids(inventory) is None
    inventory.set_health("GPU-2", False)
    inventory.set_health("GPU-0", False)
    assert volcano.unhealthy_ids(inventory) == "0,2"


@pytest.mark.parametrize("raw", ["", "-1", "1.0", "²", "0x1", "1 2"])
def test_a_garbled_gpu_index_is_invalid_argument(raw: str) -> None:
    (pod,) = pods(pod_json("p", [("c", 1)], {VOLCANO_GPU_INDEX: raw}))
    with pytest.raises(AllocationError) as err:
        volcano.gpu_index(pod)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"volcano.sh/gpu-index={raw!r}" in err.value.message
