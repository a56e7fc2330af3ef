"""The scheduler's part for DRA with consumable capacity (KEP-5075), played in the tests.

It reads DeviceClass-less `exactly` requests of class gpu.cgpu.io, picks a device from the
newest generation of each pool, and writes the claim's allocation and reservation through
the API server as kube-scheduler does. Consumable capacity follows the API's documented
rules (CapacityRequestPolicy / CapacityRequestPolicyRange):
- a request without an entry for a capacity consumes the policy's default;
- below `min` it is rounded up to `min`; between `min` and `max` it is rounded up to
  `min + n * step`; above `max` the device cannot be allocated;
- a device that allows multiple allocations takes claims while the sum of what they consume
  stays within its capacity; one that does not is allocated to one claim, whole;
- a request for a capacity the device does not have does not match the device.
Quantities are parsed independently of the driver's parser.
"""

from __future__ import annotations

import json
import re
import uuid
from decimal import Decimal
from typing import Any

Obj = dict[str, Any]
DRIVER = "gpu.cgpu.io"
_SUFFIX = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6,
           "G": 10**9, "T": 10**12}  # fmt: skip


class Unschedulable(Exception):
    """No device can hold the request."""


class PolicyViolation(Exception):
    """The request does not satisfy a device's request policy."""


def quantity(text: Any) -> int:
    """A quantity ("4Gi", "30", 4096) as an integer."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T|)", str(text).strip())
    if not match:
        raise ValueError(f"not a quantity: {text!r}")
    value = Decimal(match[1]) * _SUFFIX[match[2]]
    if value != int(value):
        raise ValueError(f"not a whole quantity: {text!r}")
    return int(value)


def consume(requested: int | None, capacity: Obj) -> int:
    """What one request consumes of one capacity entry ({value, requestPolicy})."""
    total = quantity(capacity["value"])
    policy = capacity.get("requestPolicy")
    if policy is None:
        if requested is None:
            return total  # no policy, no request: the whole capacity
        return requested
    value = quantity(policy["default"]) if requested is None else requested
    valid = policy.get("validRange")
    if valid is not None:
        low = quantity(valid["min"])
        step = quantity(valid["step"]) if valid.get("step") else 0
        if value < low:
            value = low
        elif step:
            value = low + -(-(value - low) // step) * step
        high = quantity(valid["max"]) if valid.get("max") else total
        if value > high:
            raise PolicyViolation(f"{value} is over the policy's maximum {high}")
    return value


class Scheduler:
    """Allocates claims on the devices the API server's ResourceSlices publish."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api = client.ResourceV1Api(api_client)

    def _raw(self, fn: Any, *args: Any, **kwargs: Any) -> Obj:
        return json.loads(fn(*args, _preload_content=False, **kwargs).data)

    def devices(self) -> list[tuple[str, str, Obj]]:
        """(node, pool, device) of this driver, newest pool generation only."""
        slices = self._raw(self.api.list_resource_slice)["items"]
        newest: dict[str, int] = {}
        for s in slices:
            if s["spec"]["driver"] == DRIVER:
                pool = s["spec"]["pool"]
                newest[pool["name"]] = max(newest.get(pool["name"], 0), pool["generation"])
        return [
            (s["spec"].get("nodeName", ""), s["spec"]["pool"]["name"], d)
            for s in slices
            if s["spec"]["driver"] == DRIVER
            and s["spec"]["pool"]["generation"] == newest[s["spec"]["pool"]["name"]]
            for d in s["spec"].get("devices") or []
        ]

    def used(self) -> tuple[dict[tuple[str, str], dict[str, int]], set[tuple[str, str]]]:
        """Capacity consumed per (pool, device) by allocated claims; devices held whole."""
        claims = self._raw(self.api.list_resource_claim_for_all_namespaces)["items"]
        used: dict[tuple[str, str], dict[str, int]] = {}
        whole: set[tuple[str, str]] = set()
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                key = (result["pool"], result["device"])
                consumed = result.get("consumedCapacity")
                if consumed is None:
                    whole.add(key)
                    continue
                sums = used.setdefault(key, {})
                for name, amount in consumed.items():
                    sums[name] = sums.get(name, 0) + quantity(amount)
        return used, whole

    def allocate(self, namespace: str, name: str, pod: tuple[str, str] | None = None) -> Obj:
        """Allocate a pending claim (and reserve it for `pod`: (name, uid)); Unschedulable."""
        claim = self._raw(self.api.read_namespaced_resource_claim, name, namespace)
        used, whole = self.used()
        results, node = [], None
        for request in claim["spec"]["devices"]["requests"]:
            exactly = request["exactly"]
            if exactly["deviceClassName"] != DRIVER:
                raise Unschedulable(f"class {exactly['deviceClassName']} is not {DRIVER}")
            wanted = {
                k: quantity(v)
                for k, v in ((exactly.get("capacity") or {}).get("requests") or {}).items()
            }
            for _ in range(int(exactly.get("count", 1))):
                result, node = self._place(request["name"], wanted, used, whole, node)
                results.append(result)
        devices: Obj = {"results": results}
        configs = claim["spec"]["devices"].get("config") or []
        if configs:  # the claim's configuration goes with its allocation, as kube-scheduler's
            devices["config"] = [{"source": "FromClaim", **c} for c in configs]
        claim["status"] = {
            "allocation": {
                "devices": devices,
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": pod[0], "uid": pod[1]}] if pod else [],
        }
        return self._raw(self.api.replace_namespaced_resource_claim_status, name, namespace, claim)

    def _place(
        self,
        request: str,
        wanted: dict[str, int],
        used: dict[tuple[str, str], dict[str, int]],
        whole: set[tuple[str, str]],
        node: str | None,
    ) -> tuple[Obj, str]:
        reasons = []
        for dev_node, pool, device in self.devices():
            key = (pool, device["name"])
            if node is not None and dev_node != node:
                continue
            capacity = device.get("capacity") or {}
            if set(wanted) - set(capacity):
                reasons.append(f"{key}: no capacity {sorted(set(wanted) - set(capacity))}")
                continue
            if key in whole:
                reasons.append(f"{key}: held whole")
                continue
            if not device.get("allowMultipleAllocations"):
                if key in used:
                    reasons.append(f"{key}: in use and not shareable")
                    continue
                whole.add(key)
                return {
                    "request": request,
                    "driver": DRIVER,
                    "pool": pool,
                    "device": device["name"],
                }, dev_node
            try:
                consumed = {n: consume(wanted.get(n), c) for n, c in capacity.items()}
            except PolicyViolation as err:
                reasons.append(f"{key}: {err}")
                continue
            sums = used.get(key, {})
            over = [
                n
                for n, v in consumed.items()
                if sums.get(n, 0) + v > quantity(capacity[n]["value"])
            ]
            if over:
                reasons.append(f"{key}: not enough {over}")
                continue
            for n, v in consumed.items():
                used.setdefault(key, {})[n] = sums.get(n, 0) + v
            result = {
                "request": request,
                "driver": DRIVER,
                "pool": pool,
                "device": device["name"],
                "consumedCapacity": {n: str(v) for n, v in consumed.items()},
                "shareID": str(uuid.uuid4()),
            }
            return result, dev_node
        raise Unschedulable(f"request {request} {wanted}: " + "; ".join(reasons or ["no devices"]))
