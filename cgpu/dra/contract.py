"""The device-plugin contract a claim carries, served as the device plugin serves it.

`cgpu webhook` turns a gpushare or Volcano request into a claim whose opaque parameters are a
`DevicePluginContract` (cgpu.core.claimconfig). The kubelet hands them to the driver in
`status.allocation.devices.config` (copied there from the claim, `source: FromClaim`, or from
its DeviceClass). For such a claim prepare gives the container what the device plugin gave:

- a slice of exactly the memory asked for on each GPU: min(consumed capacity, asked), as the
  scheduler rounds consumed capacity up to the ResourceSlice's step;
- the contract's variables with the device plugin's values: gpushare's
  `ALIYUN_COM_GPU_MEM_IDX`, `_CONTAINER` (units on each GPU) and `_DEV` (the first GPU's
  units, floor(MiB / unit MiB)), or Volcano's `VOLCANO_GPU_ALLOCATED` and
  `VOLCANO_GPU_MEMORY_TOTAL` with the GPU's index in `NVIDIA_VISIBLE_DEVICES`; and
  `CGPU_COMPUTE_LIMIT` beside a compute share, as the device plugin sets it.

`ALIYUN_COM_GPU_MEM_POD` is left out: the driver does not read pods (the device plugin, too,
sets it only when it finds the pod). Opaque parameters of this driver that call themselves a
DevicePluginContract and are not a valid one are a ClaimError: the claim fails at prepare,
never runs with a default. Parameters of another kind are left to their own readers.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from cgpu.core.claimconfig import (
    GPUSHARE,
    ClaimConfigError,
    DevicePluginContract,
    parse_contract,
)
from cgpu.core.layout import (
    CLAIM_CONFIG_KIND,
    DRA_DRIVER,
    ENV_COMPUTE_LIMIT,
    ENV_GPU_MEM_CONTAINER,
    ENV_GPU_MEM_DEV,
    ENV_GPU_MEM_IDX,
    ENV_VISIBLE_DEVICES,
    ENV_VOLCANO_ALLOCATED,
    ENV_VOLCANO_TOTAL,
)
from cgpu.dra.claims import Allocation, ClaimError
from cgpu.dra.inventory import GpuInfo

MIB = 1 << 20
Obj = dict[str, Any]


def _claim_name(claim: Obj) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _opaque_configs(claim: Obj) -> list[tuple[list[str] | None, object]]:
    """(requests it applies to, None for all; parameters) of each opaque config of this
    driver in the claim's allocation; ClaimError when the list itself is malformed."""
    name = _claim_name(claim)
    allocation = (claim.get("status") or {}).get("allocation") or {}
    raw = (allocation.get("devices") or {}).get("config") or []
    if not isinstance(raw, list):
        raise ClaimError(f"claim {name}: status.allocation.devices.config is not a list")
    found: list[tuple[list[str] | None, object]] = []
    for index, entry in enumerate(raw):
        where = f"claim {name}: status.allocation.devices.config[{index}]"
        if not isinstance(entry, dict):
            raise ClaimError(f"{where} is not an object")
        opaque = entry.get("opaque")
        if not isinstance(opaque, dict) or opaque.get("driver") != DRA_DRIVER:
            continue  # another driver's, or no opaque part
        requests = entry.get("requests")
        if requests is not None and (
            not isinstance(requests, list) or not all(isinstance(r, str) for r in requests)
        ):
            raise ClaimError(f"{where}.requests is not a list of request names")
        found.append((requests or None, opaque.get("parameters")))
    return found


def claim_contract(claim: Obj, requests: Sequence[str]) -> DevicePluginContract | None:
    """The DevicePluginContract that applies to this driver's `requests` of `claim` (None: no
    such parameters); ClaimError when one is malformed, or it covers only some requests, or
    two different ones apply."""
    name = _claim_name(claim)
    found: dict[str, DevicePluginContract] = {}
    for applies_to, parameters in _opaque_configs(claim):
        if not isinstance(parameters, dict) or parameters.get("kind") != CLAIM_CONFIG_KIND:
            continue  # another kind of parameters: not this reader's
        try:
            contract = parse_contract(parameters)
        except ClaimConfigError as err:
            raise ClaimError(f"claim {name}: opaque parameters: {err}") from None
        for request in applies_to or requests:
            if request in found and found[request] != contract:
                raise ClaimError(
                    f"claim {name}: request {request!r} has two different "
                    f"{CLAIM_CONFIG_KIND} parameters"
                )
            found[request] = contract
    if not found:
        return None
    missing = sorted(set(requests) - set(found))
    if missing:
        raise ClaimError(
            f"claim {name}: {CLAIM_CONFIG_KIND} parameters cover requests "
            f"{sorted(found)} but not {missing}: the container's variables describe one request"
        )
    contracts = {found[r] for r in requests}
    if len(contracts) > 1:
        raise ClaimError(f"claim {name}: its requests carry different {CLAIM_CONFIG_KIND}s")
    return contracts.pop()


def contract_slices(
    name: str, contract: DevicePluginContract, allocation: Allocation, gpus: Sequence[GpuInfo]
) -> dict[str, int]:
    """{uuid: bytes}: on each GPU, min(what the claim consumes there, the memory asked)."""
    uuids = {g.device_name: g.uuid for g in gpus}
    shared = Counter(uuids[r.device] for r in allocation.results)
    for uuid, results in shared.items():
        if results > 1:
            raise ClaimError(
                f"claim {name}: {results} devices on GPU {uuid}, but a {CLAIM_CONFIG_KIND} "
                f"gives {contract.units} units on each GPU, once"
            )
    return {uuid: min(consumed, contract.memory) for uuid, consumed in allocation.memory.items()}


def contract_environment(
    contract: DevicePluginContract, gpus: Sequence[GpuInfo], allocation: Allocation
) -> dict[str, str]:
    """The variables the device plugin sets for this contract on `gpus` (in the spec's order)."""
    if contract.contract == GPUSHARE:
        env = {
            ENV_VISIBLE_DEVICES: ",".join(g.uuid for g in gpus),
            ENV_GPU_MEM_IDX: ",".join(str(g.index) for g in gpus),
            ENV_GPU_MEM_CONTAINER: str(contract.units),
            ENV_GPU_MEM_DEV: str((gpus[0].total_bytes // MIB) // contract.unit_mib),
        }
    else:
        env = {
            ENV_VISIBLE_DEVICES: ",".join(str(g.index) for g in gpus),
            ENV_VOLCANO_ALLOCATED: str(contract.units * contract.unit_mib),
            ENV_VOLCANO_TOTAL: str(gpus[0].total_bytes // MIB),
        }
    if len(gpus) == 1 and allocation.compute.get(gpus[0].uuid):
        env[ENV_COMPUTE_LIMIT] = str(allocation.compute[gpus[0].uuid])
    return env


def apply_contract(
    claim: Obj, allocation: Allocation, gpus: Sequence[GpuInfo]
) -> tuple[Allocation, dict[str, str]]:
    """The allocation with the contract's slices, and the contract's variables (both as they
    were when the claim carries no contract)."""
    contract = claim_contract(claim, sorted({r.request for r in allocation.results}))
    if contract is None:
        return allocation, {}
    name = _claim_name(claim)
    if contract.contract != GPUSHARE and len(gpus) > 1:
        raise ClaimError(f"claim {name}: a Volcano {CLAIM_CONFIG_KIND} is for one GPU")
    slices = contract_slices(name, contract, allocation, gpus)
    return dataclasses.replace(allocation, memory=slices), contract_environment(
        contract, gpus, allocation
    )
