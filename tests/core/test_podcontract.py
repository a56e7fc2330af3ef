"""One pod contract, one answer: the same pod specs through every part's real entry point.

Each quantity of the table goes, as a container's `aliyun.com/gpu-mem` (or Volcano's
`volcano.sh/gpu-memory`), to the scheduler extender (its filter verb and its cluster state's
inspect JSON), the device plugin (its pod lookup and Allocate matching, gpushare's and
Volcano's), `kubectl inspect cgpu` (its node model) and, as a claim's consumed memory, to the
DRA driver (its claim reader). They must all read the one expected number, or all refuse it.
The annotations and the label go the same way to the parts that read them.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from cgpu.core.layout import (
    GPU_COUNT,
    GPU_MEM,
    GPU_MEM_ASSUME_TIME,
    GPU_MEM_IDX,
    VOLCANO_GPU_INDEX,
    VOLCANO_GPU_MEMORY,
    VOLCANO_PREDICATE_TIME,
)
from cgpu.core.podcontract import PodContractError, parse_extended_quantity, read_pod
from cgpu.deviceplugin.kube.lookup import PodLookup
from cgpu.deviceplugin.kube.pods import PodError, match_container
from cgpu.deviceplugin.rm import volcano
from cgpu.dra.claims import ClaimError, parse_claim
from cgpu.dra.inventory import GpuInfo, Inventory
from cgpu.inspect.model import PENDING, build_nodes
from cgpu.scheduler.binder import Binder
from cgpu.scheduler.handlers import Handlers
from cgpu.scheduler.metrics import Metrics
from cgpu.scheduler.state import ClusterState

REFUSED = None
INT64_MAX = (1 << 63) - 1

# (quantity as written in the pod, the number every part must read; REFUSED: every part refuses)
QUANTITIES: list[tuple[Any, int | None]] = [
    ("2", 2),
    (2, 2),  # a JSON number
    ("+3", 3),
    (" 3 ", 3),  # the API server's decoder trims spaces
    ("007", 7),
    ("2Ki", 2048),
    ("1Mi", 1 << 20),
    ("1k", 1000),
    ("1M", 10**6),
    ("1.5k", 1500),
    ("0.5Ki", 512),
    ("1e3", 1000),
    ("1E3", 1000),
    ("2000m", 2),
    ("1000000u", 1),
    ("5.", 5),
    ("0", 0),
    ("0Mi", 0),
    ("-0", 0),
    ("-1", REFUSED),
    ("-2Ki", REFUSED),
    ("0.5", REFUSED),
    ("1500m", REFUSED),
    ("1n", REFUSED),
    (str(INT64_MAX + 1), REFUSED),
    ("8Ei", REFUSED),
    ("1e30", REFUSED),
    ("1e999999999", REFUSED),
    ("junk", REFUSED),
    ("2KiB", REFUSED),
    ("2K", REFUSED),
    ("", REFUSED),
    (".", REFUSED),
    ("1e", REFUSED),
    ("0x10", REFUSED),
    ("1 k", REFUSED),
    ("٣", REFUSED),  # a digit, but not an ASCII one
    (True, REFUSED),
]
IDS = [repr(q) for q, _ in QUANTITIES]


def _pod(
    resource: str,
    quantity: Any,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node: str = "n1",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "uid-p",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": dict(annotations or {}),
            "labels": dict(labels or {}),
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {resource: quantity}}}],
        },
        "status": {"phase": "Pending"},
    }


def _node(units: int, count: int = 1) -> dict[str, Any]:
    capacity = {GPU_MEM: str(units), GPU_COUNT: str(count)}
    return {
        "metadata": {"name": "n1"},
        "status": {"allocatable": capacity, "capacity": capacity, "addresses": []},
    }


class _Client:
    """The device plugin's API server client, answering one listing."""

    node_name = "n1"

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def pending_pods(self) -> list[dict[str, Any]]:
        return self.pods


def _extender(node_units: int) -> Handlers:
    state = ClusterState()
    state.observe_node(_node(node_units))
    return Handlers(state, Binder(state, api=None), Metrics())  # type: ignore[arg-type]


def _filter(handlers: Handlers, pod: dict[str, Any]) -> dict[str, Any]:
    return handlers.filter({"Pod": pod, "NodeNames": ["n1"]})


# --- the reader itself -------------------------------------------------------------------------
@pytest.mark.parametrize(("quantity", "expected"), QUANTITIES, ids=IDS)
def test_the_reader(quantity: Any, expected: int | None) -> None:
    contract = read_pod(_pod(GPU_MEM, quantity))
    if expected is REFUSED:
        with pytest.raises(PodContractError, match=GPU_MEM):
            contract.total(GPU_MEM)
        assert contract.resource_problems(GPU_MEM)  # recorded, not read as 0
        with pytest.raises(PodContractError):
            parse_extended_quantity(quantity)
    else:
        assert contract.total(GPU_MEM) == expected
        assert parse_extended_quantity(quantity) == expected


# --- the scheduler extender: filter, and what a bound pod holds ------------------------------
@pytest.mark.parametrize(("quantity", "expected"), QUANTITIES, ids=IDS)
def test_the_scheduler_extender(quantity: Any, expected: int | None) -> None:
    pod = _pod(GPU_MEM, quantity, node="")
    if expected is REFUSED:
        result = _filter(_extender(8), pod)
        assert result["NodeNames"] == []
        assert GPU_MEM in result["FailedAndUnresolvableNodes"]["n1"]
        return
    if expected == 0:  # asks for nothing: passes everywhere
        assert _filter(_extender(8), pod)["NodeNames"] == ["n1"]
        return
    assert _filter(_extender(expected), pod)["NodeNames"] == ["n1"]  # exactly fits
    if expected > 1:
        assert _filter(_extender(expected - 1), pod)["NodeNames"] == []  # one unit short
    state = ClusterState()
    state.observe_node(_node(expected))
    state.observe_pod(_pod(GPU_MEM, quantity, {GPU_MEM_IDX: "0"}))
    (device,) = state.inspect()["nodes"][0]["devs"]
    assert device["usedGPU"] == expected


# --- the device plugin: which container an Allocate is for ----------------------------------
@pytest.mark.parametrize("resource", [GPU_MEM, VOLCANO_GPU_MEMORY])
@pytest.mark.parametrize(("quantity", "expected"), QUANTITIES, ids=IDS)
def test_the_device_plugin(
    quantity: Any, expected: int | None, resource: str, caplog: pytest.LogCaptureFixture
) -> None:
    annotations = {VOLCANO_GPU_INDEX: "0", VOLCANO_PREDICATE_TIME: "1"}
    lookup = PodLookup(_Client([_pod(resource, quantity, annotations)]))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        pods = lookup.pending(resource)
    match = volcano.match if resource == VOLCANO_GPU_MEMORY else match_container
    if expected is REFUSED or expected == 0:
        assert pods[0].requesting() == []
        assert all(match(pods, n, set()) is None for n in (0, 1, 2, 1000, 2048))
        if expected is REFUSED:
            assert f"pod ns/p skipped: container c {resource}=" in caplog.text
        return
    pod, container = match(pods, expected, set()) or (None, None)
    assert pod is pods[0] and container is not None and container.units == expected
    assert match(pods, expected + 1, set()) is None
    assert pods[0].total_units == expected
    assert not caplog.text


# --- kubectl inspect cgpu ------------------------------------------------------------------------
@pytest.mark.parametrize(("quantity", "expected"), QUANTITIES, ids=IDS)
def test_inspect(quantity: Any, expected: int | None) -> None:
    (node,) = build_nodes([_node(16)], [_pod(GPU_MEM, quantity, {GPU_MEM_IDX: "0"})])
    if expected is REFUSED:
        assert node.used == 0 and not node.pods
        (why,) = node.skipped
        assert why.startswith(f"pod ns/p not counted: container c {GPU_MEM}={quantity!r} ")
    else:
        assert node.devices[0].used == expected
        assert node.skipped == []


# --- the DRA driver: the same numbers as a claim's consumed memory (bytes) ---------------------
GPU = GpuInfo(0, "GPU-0000", "sim", 16 << 30, "Ampere", "550.54.03", "8.0", 3)


@pytest.mark.parametrize(("quantity", "expected"), QUANTITIES, ids=IDS)
def test_the_dra_driver(quantity: Any, expected: int | None) -> None:
    result = {"request": "gpu", "driver": "gpu.cgpu.io", "pool": "n1", "device": "gpu-0"}
    claim = {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "status": {
            "allocation": {
                "devices": {"results": [{**result, "consumedCapacity": {"memory": quantity}}]}
            }
        },
    }
    if expected is REFUSED:
        # Refused as it is read, or as negative: never as 0.
        with pytest.raises(
            ClaimError, match=r"consumedCapacity(: |\.memory must be positive, got -\d)"
        ):
            parse_claim(claim, "u", "n1", Inventory([GPU]))
    elif expected == 0:  # read as 0, which a claim may not consume
        with pytest.raises(ClaimError, match="must be positive, got 0"):
            parse_claim(claim, "u", "n1", Inventory([GPU]))
    else:
        allocation = parse_claim(claim, "u", "n1", Inventory([GPU]))
        assert allocation.memory == {"GPU-0000": expected}


# --- annotations and the label -------------------------------------------------------------------
# (ALIYUN_COM_GPU_MEM_IDX, the GPU indexes every part reads; REFUSED: malformed)
INDEXES: list[tuple[str, tuple[int, ...] | None]] = [
    ("1", (1,)),
    (" 1 ", (1,)),
    ("0,1", (0, 1)),
    ("0, 1", (0, 1)),
    ("x", REFUSED),
    ("-1", REFUSED),
    ("+1", REFUSED),
    ("1,", REFUSED),
    ("1.0", REFUSED),
    ("²", REFUSED),  # str.isdigit() says yes; int() says no
]


@pytest.mark.parametrize(("raw", "expected"), INDEXES, ids=[i for i, _ in INDEXES])
def test_gpu_indexes(raw: str, expected: tuple[int, ...] | None) -> None:
    pod = _pod(GPU_MEM, "4", {GPU_MEM_IDX: raw})
    # The reader.
    assert read_pod(pod).gpu_indexes == expected
    # The scheduler extender holds the units on those GPUs; unplaced when malformed.
    state = ClusterState()
    state.observe_node(_node(16, 2))
    state.observe_pod(pod)
    used = [d["usedGPU"] for d in state.inspect()["nodes"][0]["devs"]]
    # The device plugin places on them, or refuses the malformed annotation.
    (info,) = PodLookup(_Client([pod])).pending(GPU_MEM)  # type: ignore[arg-type]
    # inspect shows the pod on them, or as pending.
    (node,) = build_nodes([_node(16, 2)], [pod])
    if expected is REFUSED:
        assert used == [0, 0]
        with pytest.raises(PodError, match=GPU_MEM_IDX):
            _ = info.pinned
        assert set(node.devices[PENDING].pods[0].per_gpu) == {PENDING}
    else:
        assert used == [4 // len(expected) if i in expected else 0 for i in range(2)]
        assert info.pinned == list(expected)
        assert set(node.pods[0].per_gpu) == set(expected)


# (aliyun.com/gpu-count, the GPUs every part reads; REFUSED: the pod is refused)
COUNTS: list[tuple[str, int | None]] = [
    ("1", 1),
    ("2", 2),
    ("02", 2),
    ("0", REFUSED),
    ("-1", REFUSED),
    ("two", REFUSED),
    ("2Ki", REFUSED),  # a label, not a quantity
    ("", REFUSED),
]


@pytest.mark.parametrize(("raw", "expected"), COUNTS, ids=[c or "empty" for c, _ in COUNTS])
def test_gpu_count_label(raw: str, expected: int | None) -> None:
    pod = _pod(GPU_MEM, "4", labels={GPU_COUNT: raw}, node="")
    result = _filter(_extender(4), pod)
    (info,) = PodLookup(_Client([pod])).pending(GPU_MEM)  # type: ignore[arg-type]
    if expected is REFUSED:
        assert read_pod(pod).gpu_count is None
        assert GPU_COUNT in result["FailedAndUnresolvableNodes"]["n1"]
        with pytest.raises(PodError, match=GPU_COUNT):
            _ = info.gpu_count
    else:
        assert read_pod(pod).gpu_count == expected
        assert result["NodeNames"] == (["n1"] if expected == 1 else [])  # one GPU of 4 units
        assert info.gpu_count == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1732093800123456789", 1732093800.123456789), ("x", None), ("-1", None), ("", None)],
)
def test_assume_time_orders_the_device_plugin(raw: str, expected: float | None) -> None:
    pod = _pod(GPU_MEM, "4", {GPU_MEM_ASSUME_TIME: raw})
    (info,) = PodLookup(_Client([pod])).pending(GPU_MEM)  # type: ignore[arg-type]
    created = 1767225600.0  # the creation time: what a pod without a readable one sorts by
    assert info.order[0] == pytest.approx(created if expected is None else expected)
    assert (GPU_MEM_ASSUME_TIME in read_pod(pod).problems) == (expected is None and raw != "")


@pytest.mark.parametrize(
    ("raw", "expected", "why"),
    [
        ("0", 0, ""),
        ("3", 3, ""),
        ("0,1", None, "names several GPUs"),
        ("x", None, "is not a GPU index"),
        ("", None, "is not a GPU index"),
    ],
)
def test_volcano_gpu_index(raw: str, expected: int | None, why: str) -> None:
    pod = _pod(VOLCANO_GPU_MEMORY, "1024", {VOLCANO_GPU_INDEX: raw})
    (info,) = PodLookup(_Client([pod])).pending(VOLCANO_GPU_MEMORY)  # type: ignore[arg-type]
    if expected is None:
        with pytest.raises(volcano.AllocationError, match=why):
            volcano.gpu_index(info)
    else:
        assert volcano.gpu_index(info) == expected
    assert read_pod(pod).volcano_index == expected


def test_init_containers_are_read_and_kept_apart() -> None:
    pod = _pod(GPU_MEM, "2Ki")
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {GPU_MEM: "1k"}}}]
    contract = read_pod(pod)
    assert [(c.name, c.init) for c in contract.containers] == [("i", True), ("c", False)]
    assert contract.amounts(GPU_MEM, init=True) == [1000]
    assert contract.total(GPU_MEM) == 2048
    (info,) = PodLookup(_Client([pod])).pending(GPU_MEM)  # type: ignore[arg-type]
    assert [(c.name, c.units) for c in info.requesting()] == [("i", 1000), ("c", 2048)]


def test_the_contract_is_frozen_and_a_non_mapping_is_an_error() -> None:
    contract = read_pod(_pod(GPU_MEM, "2"))
    with pytest.raises(AttributeError):
        contract.gpu_count = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        contract.annotations["x"] = "y"  # type: ignore[index]
    with pytest.raises(PodContractError, match="JSON object"):
        read_pod(["not", "a", "pod"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, None), ("high", "high"), ("normal", "normal"), ("low", "low")]
)
def test_the_compute_priority_annotation(raw: str | None, expected: str | None) -> None:
    notes = {} if raw is None else {"cgpu.io/compute-priority": raw}
    contract = read_pod({"metadata": {"annotations": notes}})
    assert contract.compute_priority == expected
    assert not contract.problems


@pytest.mark.parametrize("raw", ["High", "urgent", "", " low"])
def test_a_malformed_compute_priority_is_a_problem_naming_it(raw: str) -> None:
    contract = read_pod({"metadata": {"annotations": {"cgpu.io/compute-priority": raw}}})
    assert contract.compute_priority is None
    with pytest.raises(PodContractError, match=r"cgpu\.io/compute-priority="):
        contract.check("cgpu.io/compute-priority")
