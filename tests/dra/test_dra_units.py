"""The driver's pure parts: quantities, claim parsing rules, the checkpoint and the CDI spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cgpu.core.quantity import QuantityError, format_bytes, parse_quantity
from cgpu.dra.cdi import build_spec, device_nodes
from cgpu.dra.checkpoint import Checkpoint, Prepared, PreparedDevice
from cgpu.dra.claims import ClaimError, parse_claim
from cgpu.dra.devices import semver
from cgpu.dra.inventory import GpuInfo, Inventory

GiB = 1 << 30
GPU = GpuInfo(0, "GPU-0000", "sim", 16 * GiB, "Ampere", "550.54.03", "8.0", 3)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4Gi", 4 * GiB), ("512Mi", 512 << 20), ("1.5Gi", 3 << 29), ("30", 30), ("1e3", 1000),
     ("2k", 2000), ("1500m", None), ("4Gx", None), ("", None), ("-", None), (True, None)],
)  # fmt: skip
def test_quantities_are_exact_or_refused(text: object, value: int | None) -> None:
    if value is None:
        with pytest.raises(QuantityError):
            parse_quantity(text)
    else:
        assert parse_quantity(text) == value


def test_bytes_are_written_in_the_largest_exact_binary_unit() -> None:
    assert [format_bytes(v) for v in (16 * GiB, 768 << 20, 1000)] == ["16Gi", "768Mi", "1000"]


def test_versions_become_semver() -> None:
    assert semver("550.54.03") == "550.54.3"  # no leading zeros in semver
    assert semver("8.0") == "8.0.0"
    assert semver("13000") == "13000.0.0"


def _claim(uid: str, **result: object) -> dict:
    base = {"request": "gpu", "driver": "gpu.cgpu.io", "pool": "n1", "device": "gpu-0"}
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": uid},
        "status": {"allocation": {"devices": {"results": [{**base, **result}]}}},
    }


def test_two_results_on_one_gpu_add_up_and_must_fit() -> None:
    inventory = Inventory([GPU])
    claim = _claim("u", consumedCapacity={"memory": "6Gi", "compute": "20"})
    results = claim["status"]["allocation"]["devices"]["results"]
    results.append({**results[0], "request": "more"})
    allocation = parse_claim(claim, "u", "n1", inventory)
    assert allocation.memory == {"GPU-0000": 12 * GiB}
    assert allocation.compute == {"GPU-0000": 40}
    results.append({**results[0], "request": "too-much"})
    with pytest.raises(ClaimError, match="which has 17179869184"):
        parse_claim(claim, "u", "n1", inventory)


def test_a_device_allocated_whole_gives_the_whole_gpu() -> None:
    """A scheduler without consumable capacity allocates the device to one claim alone."""
    allocation = parse_claim(_claim("u"), "u", "n1", Inventory([GPU]))
    assert (allocation.memory, allocation.compute) == ({"GPU-0000": 16 * GiB}, {})


def test_zero_memory_is_refused() -> None:
    with pytest.raises(ClaimError, match="must be positive"):
        parse_claim(_claim("u", consumedCapacity={"memory": "0"}), "u", "n1", Inventory([GPU]))


def test_a_corrupt_checkpoint_is_set_aside_and_counted(tmp_path: Path) -> None:
    good = Checkpoint(tmp_path)
    good.put(
        "u1",
        Prepared(
            "ns", "c", "dra-u1", "gpu.cgpu.io/claim=u1", [PreparedDevice(["gpu"], "n1", "gpu-0")]
        ),
    )
    assert Checkpoint(tmp_path).get("u1") == good.get("u1")
    good.path.write_text("{not json")
    fresh = Checkpoint(tmp_path)
    assert fresh.claims == {} and fresh.corrupt == 1
    assert good.path.with_suffix(".corrupt").read_text() == "{not json"


def test_cdi_spec_names_only_device_nodes_the_host_has(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").touch()
    (dev / "nvidia3").touch()
    assert [n["path"] for n in device_nodes([GPU], dev)] == ["/dev/nvidiactl", "/dev/nvidia3"]
    spec = build_spec("0b9e", [GPU], tmp_path / "ctr", tmp_path / "shim", tmp_path / "pre", dev)
    assert spec["cdiVersion"] == "0.5.0"  # the device name starts with a digit
    assert json.loads(json.dumps(spec))["devices"][0]["name"] == "0b9e"


class CanonicalApi:
    """A ResourceApi stand-in that stores slices in another canonical form, as an API server
    may: every quantity written as a plain number of bytes."""

    node = "n1"

    def __init__(self) -> None:
        self.stored: dict[str, dict] = {}
        self.writes = 0

    def own_slices(self) -> list[dict]:
        return list(self.stored.values())

    def _store(self, body: dict) -> dict:
        self.writes += 1
        text = json.dumps(body).replace('"16Gi"', '"17179869184"')
        stored = json.loads(text)
        stored["metadata"]["resourceVersion"] = str(self.writes)
        self.stored[stored["metadata"]["name"]] = stored
        return stored

    create_slice = _store
    replace_slice = _store

    def delete_slice(self, name: str) -> None:
        self.stored.pop(name, None)


def test_a_slice_stored_in_canonical_form_is_not_republished() -> None:
    from cgpu.dra.slices import Publisher

    api = CanonicalApi()
    inventory = Inventory([GPU])
    publisher = Publisher(api, inventory)  # type: ignore[arg-type]
    publisher.publish()
    publisher.publish()
    assert api.writes == 1
    inventory.set_health(GPU.uuid, False, "critical XID 79")
    publisher.publish()
    (stored,) = api.stored.values()
    assert api.writes == 2 and stored["spec"]["pool"]["generation"] == 2
    assert stored["spec"]["devices"] == []
