"""A claim's compute priority: opaque ComputeConfig parameters of this driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cgpu.core.config import ComputeLine, load_compute_lines, write_config
from cgpu.dra.claims import ClaimError
from cgpu.dra.computeconfig import claim_priority, compute_lines

UUID = "GPU-5eed0000-0000-4000-8000-000000000000"
API = "gpu.cgpu.io/v1alpha1"


def claim(*parameters: Any, driver: str = "gpu.cgpu.io") -> dict[str, Any]:
    config = [
        {"source": "FromClaim", "opaque": {"driver": driver, "parameters": p}} for p in parameters
    ]
    return {
        "metadata": {"namespace": "default", "name": "infer"},
        "status": {"allocation": {"devices": {"results": [], "config": config}}},
    }


def test_without_a_compute_config_the_priority_is_normal() -> None:
    assert claim_priority(claim()) == "normal"
    assert claim_priority({"metadata": {}}) == "normal"
    other = {"apiVersion": API, "kind": "DevicePluginContract", "contract": "gpushare"}
    assert claim_priority(claim(other)) == "normal"  # another kind: its own reader's
    assert claim_priority(claim({"kind": "ComputeConfig", "x": 1}, driver="other.io")) == "normal"


@pytest.mark.parametrize("priority", ["high", "normal", "low"])
def test_the_priority_reaches_the_compute_line(tmp_path: Path, priority: str) -> None:
    got = claim_priority(claim({"apiVersion": API, "kind": "ComputeConfig", "priority": priority}))
    assert got == priority
    path = write_config(tmp_path, {UUID: 1 << 30}, compute_lines({UUID: 30}, got))
    assert load_compute_lines(path) == {UUID: ComputeLine(30, "fixed", priority)}


@pytest.mark.parametrize(
    ("parameters", "why"),
    [
        ({"apiVersion": API, "kind": "ComputeConfig", "priority": "urgent"}, "not one of"),
        ({"apiVersion": API, "kind": "ComputeConfig", "priority": 1}, "not one of"),
        ({"apiVersion": API, "kind": "ComputeConfig", "policy": "share"}, "unknown field"),
        ({"apiVersion": "v2", "kind": "ComputeConfig", "priority": "high"}, "apiVersion"),
    ],
)
def test_a_malformed_compute_config_fails_the_claim(parameters: dict, why: str) -> None:
    with pytest.raises(ClaimError, match=why) as err:
        claim_priority(claim(parameters))
    assert "claim default/infer" in str(err.value)


def test_two_compute_configs_that_disagree_fail_the_claim() -> None:
    high = {"apiVersion": API, "kind": "ComputeConfig", "priority": "high"}
    low = {**high, "priority": "low"}
    with pytest.raises(ClaimError, match="disagree"):
        claim_priority(claim(high, low))
    assert claim_priority(claim(high, dict(high))) == "high"


def test_a_claim_without_a_compute_share_gets_no_compute_line() -> None:
    assert compute_lines({}, "high") is None
    assert compute_lines({UUID: 40}, "normal") == {UUID: 40}  # the old line
