"""The scheduler stand-in follows KEP-5075, so the chain tests rest on honest allocations."""

from __future__ import annotations

import random

import pytest
from dra_helpers import claim_body
from dra_scheduler import PolicyViolation, Unschedulable, consume, quantity

GiB = 1 << 30
MEMORY = {
    "value": "16Gi",
    "requestPolicy": {
        "default": "1Gi",
        "validRange": {"min": "256Mi", "max": "16Gi", "step": "256Mi"},
    },
}
COMPUTE = {
    "value": "100",
    "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
}


def _slice(node: str, generation: int = 1, devices: int = 1) -> dict:
    return {
        "metadata": {"name": f"{node}-gpu.cgpu.io"},
        "spec": {
            "driver": "gpu.cgpu.io",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "allowMultipleAllocations": True,
                    "capacity": {"memory": MEMORY, "compute": COMPUTE},
                }
                for i in range(devices)
            ],
        },
    }


def test_requests_follow_the_request_policy() -> None:
    assert consume(None, MEMORY) == GiB  # absent: the default
    assert consume(1, MEMORY) == 256 << 20  # below min: min
    assert consume(1000 << 20, MEMORY) == 1024 << 20  # rounded up to min + n * step
    assert consume(4 * GiB, MEMORY) == 4 * GiB
    with pytest.raises(PolicyViolation):
        consume(16 * GiB + 1, MEMORY)  # rounds up past max
    assert consume(None, COMPUTE) == 0
    with pytest.raises(PolicyViolation):
        consume(101, COMPUTE)


def test_sum_of_consumed_capacity_never_exceeds_the_device(kube_api, scheduler) -> None:
    kube_api.create("resourceslices", _slice("n1", devices=2))
    rng = random.Random(5075)
    placed = 0
    for number in range(40):
        memory = f"{rng.choice([256, 700, 1024, 3000, 4096, 9000])}Mi"
        kube_api.create("resourceclaims", claim_body(f"c{number}", memory=memory, compute="10"))
        try:
            scheduler.allocate("default", f"c{number}")
            placed += 1
        except Unschedulable:
            pass
        used, _ = scheduler.used()
        for device, sums in used.items():
            assert sums["memory"] <= 16 * GiB, device
            assert sums["compute"] <= 100, device
    assert 0 < placed < 40  # some fitted, and the devices did fill up


def test_newest_pool_generation_only_and_one_node_per_claim(kube_api, scheduler) -> None:
    kube_api.create("resourceslices", _slice("n1", generation=1, devices=2))
    old = _slice("n1", generation=2, devices=1)
    old["metadata"]["name"] = "n1-newer"
    kube_api.create("resourceslices", old)
    kube_api.create("resourceclaims", claim_body("a", memory="12Gi"))
    scheduler.allocate("default", "a")
    kube_api.create("resourceclaims", claim_body("b", memory="12Gi"))
    with pytest.raises(Unschedulable):  # gpu-1 exists only in the older generation
        scheduler.allocate("default", "b")
    kube_api.create("resourceclaims", claim_body("two", memory="1Gi", count=2))
    claim = scheduler.allocate("default", "two")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0", "gpu-0"]
    assert len({r["shareID"] for r in results}) == 2
    assert quantity(results[0]["consumedCapacity"]["memory"]) == GiB
