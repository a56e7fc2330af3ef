"""Best-fit preferred allocation and the checks Allocate makes (no gRPC, no GPUs)."""

from __future__ import annotations

import grpc
import pytest

from cgpu.core.gpus import GPU
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.rm.inventory import Inventory
from cgpu.deviceplugin.rm.placement import check, preferred
from cgpu.deviceplugin.rm.units import GIB, Unit

UUID = [f"GPU-5eed0000-0000-4000-8000-00000000000{i}" for i in range(4)]
RES = "aliyun.com/gpu-mem"


def inventory(*sizes_gib: int) -> Inventory:
    gpus = [GPU(i, UUID[i], "sim", s * GIB) for i, s in enumerate(sizes_gib)]
    return Inventory(gpus, Unit("GiB"))


def ids(gpu: int, *units: int) -> list[str]:
    return [f"{UUID[gpu]}-{n}" for n in units]


def test_best_fit_picks_the_fullest_gpu_that_holds_the_request() -> None:
    inv = inventory(16, 16, 16)
    # GPU 0 has 10 free units, GPU 1 has 3, GPU 2 has 16.
    available = ids(0, *range(6, 16)) + ids(1, 13, 14, 15) + ids(2, *range(16))
    assert preferred(inv, available, [], 3) == ids(1, 13, 14, 15)
    assert preferred(inv, available, [], 4) == ids(0, 6, 7, 8, 9)
    assert preferred(inv, available, [], 12) == ids(2, *range(12))


def test_preferred_honours_must_include_and_pinned() -> None:
    inv = inventory(16, 16)
    available = ids(0, *range(16)) + ids(1, *range(16))
    assert preferred(inv, available, ids(1, 5), 2) == ids(1, 5, 0)
    assert preferred(inv, available, [], 2, pinned=[1]) == ids(1, 0, 1)


def test_preferred_spreads_over_gpu_count() -> None:
    inv = inventory(16, 16, 16, 16)
    available = ids(0, *range(16)) + ids(1, *range(14, 16)) + ids(2, *range(16)) + ids(3, 0)
    got = preferred(inv, available, [], 4, gpu_count=2)
    assert got == ids(1, 14, 15) + ids(0, 0, 1)


def test_preferred_without_room_on_one_gpu_returns_a_best_effort_pick() -> None:
    inv = inventory(4, 4)
    available = ids(0, 2, 3) + ids(1, 1, 2, 3)
    got = preferred(inv, available, [], 4)
    assert len(got) == 4 and set(got) <= set(available)


def test_unknown_ids_in_available_are_ignored() -> None:
    inv = inventory(4)
    assert preferred(inv, ["bogus-1", *ids(0, 0, 1)], [], 2) == ids(0, 0, 1)


def test_check_one_gpu() -> None:
    inv = inventory(16, 16)
    placed = check(inv, ids(1, 3, 4), RES)
    assert [g.gpu.uuid for g in placed.gpus] == [UUID[1]]
    assert placed.units_per_gpu == 2


def test_check_refuses_cross_gpu_for_a_one_gpu_request() -> None:
    inv = inventory(16, 16)
    with pytest.raises(AllocationError) as err:
        check(inv, ids(0, 1) + ids(1, 1), RES)
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "span 2 GPUs" in err.value.message and "aliyun.com/gpu-count" in err.value.message


def test_check_refuses_unknown_and_repeated_ids() -> None:
    inv = inventory(16)
    with pytest.raises(AllocationError) as err:
        check(inv, ["GPU-nope-1", *ids(0, 0)], RES)
    assert err.value.code == grpc.StatusCode.NOT_FOUND and "GPU-nope-1" in err.value.message
    with pytest.raises(AllocationError, match="unknown"):
        check(inv, ids(0, 16), RES)  # beyond the GPU's 16 units
    with pytest.raises(AllocationError, match="repeated"):
        check(inv, ids(0, 1, 1), RES)


def test_check_gpu_count_split() -> None:
    inv = inventory(16, 16, 16, 16)
    placed = check(inv, ids(0, 0, 1) + ids(2, 0, 1), RES, gpu_count=2)
    assert placed.units_per_gpu == 2 and len(placed.gpus) == 2
    with pytest.raises(AllocationError, match="multiple of the GPU count"):
        check(inv, ids(0, 0, 1, 2), RES, gpu_count=2)
    with pytest.raises(AllocationError, match="kubelet offered"):
        check(inv, ids(0, 0, 1, 2) + ids(1, 0), RES, gpu_count=2)
    with pytest.raises(AllocationError, match="has 4 GPUs"):
        check(inv, ids(0, *range(5)), RES, gpu_count=5)


def test_check_pinned_gpu_wins() -> None:
    inv = inventory(16, 16)
    placed = check(inv, ids(0, 0, 1), RES, pinned=[1])
    assert [g.gpu.index for g in placed.gpus] == [1]
    with pytest.raises(AllocationError, match="does not have"):
        check(inv, ids(0, 0), RES, pinned=[7])
