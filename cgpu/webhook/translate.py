"""A pod's gpushare/Volcano requests as DRA claims: which claim each container uses, and the
shape (memory and compute on each of N GPUs) of each claim.

As the device plugin serves them:
- `aliyun.com/gpu-mem` counts units of `--memory-unit` (GiB by default, MiB where the cluster's
  device plugin runs with `--memory-unit MiB`); `volcano.sh/gpu-memory` counts MiB;
- the pod label `aliyun.com/gpu-count: N` spreads each container's memory over N distinct
  GPUs, the same share on each (8 over 4 GPUs: 2 each), and must divide it;
- `aliyun.com/gpu-core.percentage` is a percent of one GPU, beside memory on that GPU;
- every regular container (and sidecar) gets a claim of its own, so a slice of its own, as it
  got a ledger of its own; an init container runs before them and reuses a claim of the same
  shape when there is one (the kubelet reuses an init container's devices the same way).

Whatever cannot be served that way is a `Refusal` naming the field, never a silent change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cgpu.core.claimconfig import GPUSHARE, VOLCANO, DevicePluginContract
from cgpu.core.layout import (
    COMPUTE_PRIORITY_ANNOTATION,
    GPU_CORE,
    GPU_COUNT,
    GPU_MEM,
    VOLCANO_GPU_MEMORY,
    WEBHOOK_CLAIM_PREFIX,
    WEBHOOK_TEMPLATE_PREFIX,
)
from cgpu.core.podcontract import read_pod
from cgpu.webhook.podread import ContainerAsk, PodReadError, read_containers

MAX_COUNT = 32  # the most devices one claim may be allocated (the API's limit)
MAX_GPU_MEMORY = 1 << 42  # 4 TiB on one GPU: anything more is a typo, not a GPU
MIB = 1 << 20


class Refusal(PodReadError):
    """A pod the webhook cannot translate; `field` is the path that says why."""


@dataclass(frozen=True)
class Shape:
    """What one claim asks for: `count` distinct GPUs, each with this memory and compute."""

    contract: DevicePluginContract
    compute: int  # percent of each GPU; 0: no compute cap
    count: int
    priority: str | None = None  # the pod's cgpu.io/compute-priority, beside a compute share

    @property
    def memory(self) -> int:
        """Bytes on each GPU."""
        return self.contract.memory


@dataclass(frozen=True)
class ClaimUse:
    """A container and the pod claim it is given."""

    ask: ContainerAsk
    claim: str


@dataclass(frozen=True)
class Plan:
    """The claims a pod gets (name -> shape, in the order they are added) and who uses them."""

    claims: dict[str, Shape]
    uses: tuple[ClaimUse, ...]

    def requested(self) -> dict[str, dict[str, int]]:
        """What each translated container asked for, by container name (the annotation)."""
        return {u.ask.name: dict(sorted(u.ask.amounts.items())) for u in self.uses}


def plan_pod(pod: dict[str, Any], unit_mib: int) -> Plan | None:
    """The claims that replace `pod`'s requests (None: it asks for none); Refusal if it cannot
    be translated. `unit_mib` is the size of one `aliyun.com/gpu-mem` unit."""
    asks = [a for a in read_containers(pod) if a.amounts]
    if not asks:
        return None
    existing = _existing_claims(pod)
    foreign = [name for name, ours in existing.items() if not ours]
    if foreign:
        raise Refusal(
            "spec.resourceClaims",
            f"the pod asks for DRA claims ({', '.join(foreign)}) and for gpushare/Volcano "
            f"resources ({', '.join(sorted({r for a in asks for r in a.amounts}))}); ask for "
            "one or the other",
        )
    count = _gpu_count(pod)
    priority = _priority(pod)
    shapes = {id(a): _with_priority(_shape(a, count, unit_mib), priority) for a in asks}
    taken = set(existing)
    claims: dict[str, Shape] = {}
    uses: list[ClaimUse] = []

    def new_claim(shape: Shape) -> str:
        index = 0
        while f"{WEBHOOK_CLAIM_PREFIX}{index}" in taken:
            index += 1
        name = f"{WEBHOOK_CLAIM_PREFIX}{index}"
        taken.add(name)
        claims[name] = shape
        return name

    sequential: dict[str, Shape] = {}  # claims an init container may reuse (no sidecar's)
    for ask in asks:  # regular containers and sidecars run side by side: one claim each
        if not ask.init:
            name = new_claim(shapes[id(ask)])
            uses.append(ClaimUse(ask, name))
            if not ask.sidecar:
                sequential[name] = shapes[id(ask)]
    for ask in asks:  # init containers run one at a time, before the regular ones
        if ask.init:
            shape = shapes[id(ask)]
            same = next((n for n, s in sequential.items() if s == shape), None)
            if same is None:
                same = new_claim(shape)
                sequential[same] = shape
            uses.append(ClaimUse(ask, same))
    order = {id(a): i for i, a in enumerate(asks)}
    uses.sort(key=lambda u: order[id(u.ask)])
    return Plan(claims, tuple(uses))


def _existing_claims(pod: dict[str, Any]) -> dict[str, bool]:
    """The pod's resourceClaims by name: True for those this webhook added."""
    found: dict[str, bool] = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, dict):
            raise Refusal("spec.resourceClaims", "an entry is not an object")
        name = str(entry.get("name", ""))
        template = str(entry.get("resourceClaimTemplateName") or "")
        found[name] = name.startswith(WEBHOOK_CLAIM_PREFIX) and template.startswith(
            WEBHOOK_TEMPLATE_PREFIX
        )
    return found


def _gpu_count(pod: dict[str, Any]) -> int | None:
    """The pod label aliyun.com/gpu-count (None when absent), read by the pod contract."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, dict) or GPU_COUNT not in labels:
        return None
    contract = read_pod(pod, ())
    where = f"metadata.labels[{GPU_COUNT}]"
    if contract.gpu_count is None:
        raise Refusal(where, contract.problems.get(GPU_COUNT, "unreadable"))
    if contract.gpu_count > MAX_COUNT:
        raise Refusal(where, f"{contract.gpu_count} GPUs: a claim gets at most {MAX_COUNT}")
    return contract.gpu_count


def _priority(pod: dict[str, Any]) -> str | None:
    """The pod annotation cgpu.io/compute-priority (None when absent), read by the pod
    contract; a malformed one is refused, as the device plugin refuses its Allocate."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, dict) or COMPUTE_PRIORITY_ANNOTATION not in annotations:
        return None
    contract = read_pod(pod, ())
    if contract.compute_priority is None:
        where = f"metadata.annotations[{COMPUTE_PRIORITY_ANNOTATION}]"
        raise Refusal(where, contract.problems.get(COMPUTE_PRIORITY_ANNOTATION, "unreadable"))
    return contract.compute_priority


def _with_priority(shape: Shape, priority: str | None) -> Shape:
    """The shape with the pod's compute priority, where it has a compute share (a priority
    orders compute turns; without a share, as under the device plugin, it orders nothing)."""
    if priority is None or not shape.compute:
        return shape
    return Shape(shape.contract, shape.compute, shape.count, priority)


def _shape(ask: ContainerAsk, count: int | None, unit_mib: int) -> Shape:
    """The claim shape of one container's request."""
    where = f"{ask.where}.resources"
    mem, core, volcano = (ask.amounts.get(r, 0) for r in (GPU_MEM, GPU_CORE, VOLCANO_GPU_MEMORY))
    if mem and volcano:
        raise Refusal(where, f"asks for both {GPU_MEM} and {VOLCANO_GPU_MEMORY}; ask for one")
    if core and not mem:
        raise Refusal(
            where,
            f"{GPU_CORE} {core} without {GPU_MEM}: a claim on a DRA GPU holds memory, so "
            f"ask for {GPU_MEM} too",
        )
    if core > 100:
        raise Refusal(where, f"{GPU_CORE} {core}: a container gets at most 100 (one GPU)")
    if volcano:
        if count not in (None, 1):
            raise Refusal(where, f"{GPU_COUNT}={count} applies to {GPU_MEM}, not to Volcano")
        _check_size(where, VOLCANO_GPU_MEMORY, volcano, 1)
        return Shape(DevicePluginContract(VOLCANO, volcano, 1), 0, 1)
    gpus = count or 1
    if mem % gpus:
        raise Refusal(
            where,
            f"{GPU_MEM} {mem} over {GPU_COUNT}={gpus} GPUs: the memory must be a multiple of "
            "the GPU count (each GPU gets the same share)",
        )
    if core and gpus > 1:
        raise Refusal(where, f"{GPU_CORE} with {GPU_COUNT}={gpus}: a compute share is one GPU's")
    _check_size(where, GPU_MEM, mem // gpus, unit_mib)
    return Shape(DevicePluginContract(GPUSHARE, mem // gpus, unit_mib), core, gpus)


def _check_size(where: str, resource: str, units: int, unit_mib: int) -> None:
    """Refuse a share no GPU could hold (a typo such as `4Gi` units)."""
    if units * unit_mib * MIB > MAX_GPU_MEMORY:
        unit = "GiB" if unit_mib == 1024 else f"{unit_mib} MiB" if unit_mib != 1 else "MiB"
        raise Refusal(
            where,
            f"{resource} {units} is {units} x {unit} on one GPU, more than any GPU holds "
            f"(at most {MAX_GPU_MEMORY // (unit_mib * MIB)}): it counts units, not bytes",
        )
