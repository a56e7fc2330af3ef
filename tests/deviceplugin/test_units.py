"""Units per GPU and the ListAndWatch size ceiling."""

from __future__ import annotations

import pytest

from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as api
from cgpu.deviceplugin.rm.units import (
    GIB,
    KUBELET_MESSAGE_LIMIT,
    MIB,
    Unit,
    choose_unit,
    device_id,
    list_size,
)

UUIDS = [f"GPU-5eed0000-0000-4000-8000-00000000000{i}" for i in range(8)]


def test_gib_units_floor_like_gpushare() -> None:
    assert Unit("GiB").units_of(16130 * MIB) == 15  # a V100 16 GB: 15 units
    assert Unit("GiB").units_of(143771 * MIB) == 140  # an H200
    assert Unit("MiB").units_of(16130 * MIB) == 16130
    assert Unit("MiB", 4).units_of(16130 * MIB) == 4032
    assert Unit("GiB", 2).bytes == 2 * GIB
    with pytest.raises(ValueError):
        Unit("KiB")


@pytest.mark.parametrize("health", ["Healthy", "Unhealthy"])
def test_list_size_is_exact(health: str) -> None:
    gpus = [(UUIDS[0], 16 * GIB), (UUIDS[1], 3 * GIB + 5 * MIB)]
    unit = Unit("MiB", 8)
    message = api.ListAndWatchResponse(
        devices=[
            api.Device(ID=device_id(uuid, n), health=health)
            for uuid, total in gpus
            for n in range(unit.units_of(total))
        ]
    )
    assert list_size(gpus, unit, health) == message.ByteSize()


def test_eight_h200_in_gib_fit() -> None:
    choice = choose_unit([(u, 141 * GIB) for u in UUIDS], "GiB")
    assert not choice.coarsened
    assert choice.unit == Unit("GiB")
    assert choice.message_bytes < 100_000


def test_eight_h200_in_mib_are_coarsened_and_say_why() -> None:
    choice = choose_unit([(u, 141 * GIB) for u in UUIDS], "MiB")
    assert choice.requested_bytes > 60 * MIB  # about 1.15 M devices
    assert choice.coarsened
    assert choice.unit == Unit("MiB", 32)
    assert choice.message_bytes <= KUBELET_MESSAGE_LIMIT
    assert list_size([(u, 141 * GIB) for u in UUIDS], Unit("MiB", 16)) > KUBELET_MESSAGE_LIMIT
    text = choice.explain()
    assert "4194304-byte ListAndWatch limit" in text and "32 MiB" in text


def test_one_small_gpu_in_mib_is_not_coarsened() -> None:
    choice = choose_unit([(UUIDS[0], 16 * GIB)], "MiB")
    assert choice.unit == Unit("MiB") and not choice.coarsened


def test_overlong_uuid_is_refused() -> None:
    with pytest.raises(ValueError, match="too long"):
        choose_unit([("GPU-" + "x" * 60, 16 * GIB)], "GiB")
