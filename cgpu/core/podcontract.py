"""The one reader of the pod contract: what a pod asks of the GPUs, and what was written on it.

A pod's JSON (as the API server, the scheduler extender's ExtenderArgs or an admission review
gives it: a mapping with camelCase keys) becomes one frozen `PodContract`:

- each container's GPU resources (`aliyun.com/gpu-mem`, `volcano.sh/gpu-memory`,
  `aliyun.com/gpu-core.percentage`), init containers included: its limit, else its request,
  read by Kubernetes' rules for an extended resource (`parse_extended_quantity`);
- the label `aliyun.com/gpu-count` (the GPUs each container spreads over, default 1);
- gpushare's annotations (GPU indexes, the pod's and one GPU's units, the assigned flag, the
  assume time), Volcano's (GPU index, predicate time, assigned flag) and cgpu's policies and
  compute priority (`cgpu.io/compute-priority`: high, normal or low).

Units: `aliyun.com/gpu-mem` counts the device plugin's unit (`--memory-unit`: GiB by default,
or MiB; `MEMORY_UNIT_MIB`); `volcano.sh/gpu-memory` counts MiB. The contract holds the counts;
the unit is the node's.

Reading never fails on a malformed field: each one is recorded as a problem (a message that
names the field and its value) and its value is None (annotations, labels) or absent
(resources), never 0. Each part decides what a problem means for it: the scheduler extender
refuses the pod, the device plugin skips it, `kubectl inspect cgpu` leaves it out and says so.
`check()` and the amount accessors raise `PodContractError` with the message.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cgpu.core.layout import (
    COMPUTE_PRIORITY_ANNOTATION,
    GPU_CORE,
    GPU_COUNT,
    GPU_MEM,
    GPU_MEM_ASSIGNED,
    GPU_MEM_ASSUME_TIME,
    GPU_MEM_DEV,
    GPU_MEM_IDX,
    GPU_MEM_POD,
    GPU_POLICY_ANNOTATION,
    NODE_POLICY_ANNOTATION,
    VOLCANO_GPU_ASSIGNED,
    VOLCANO_GPU_INDEX,
    VOLCANO_GPU_MEMORY,
    VOLCANO_PREDICATE_TIME,
)
from cgpu.core.quantity import INT64_MAX, QuantityError, parse_quantity

RESOURCES = (GPU_MEM, VOLCANO_GPU_MEMORY, GPU_CORE)  # the resources a container may ask for
MEMORY_UNIT_MIB = {"GiB": 1024, "MiB": 1}  # aliyun.com/gpu-mem's unit, per --memory-unit
VOLCANO_UNIT = "MiB"  # volcano.sh/gpu-memory's unit
POLICIES = ("binpack", "spread")  # cgpu.io/node-policy and cgpu.io/gpu-policy
PRIORITIES = ("high", "normal", "low")  # cgpu.io/compute-priority
UINT64_MAX = (1 << 64) - 1  # Volcano's predicate time is a Go uint64


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


class PodContractError(ValueError):
    """A field of the pod contract that cannot be read: the message names it and its value."""


def parse_extended_quantity(raw: object, what: str = "quantity") -> int:
    """An extended resource's quantity as Kubernetes reads it: a whole number from 0 to
    2**63-1, in any quantity notation ("2", "2Ki" = 2048, "1.5k" = 1500, "1e3", "2000m");
    PodContractError (naming `what`) for negatives, fractions ("0.5"), values past an int64
    and anything that is not a quantity."""
    try:
        value = parse_quantity(raw)
    except QuantityError as err:
        raise PodContractError(f"{what}={raw!r} {err.reason}") from None
    if value < 0:
        raise PodContractError(f"{what}={raw!r} is negative")
    return value


def _digits(raw: str, strip: bool = True) -> int | None:
    """A plain non-negative decimal integer (ASCII digits; spaces around trimmed unless not
    `strip`), else None."""
    text = raw.strip() if strip else raw
    return int(text) if text.isascii() and text.isdigit() else None


@dataclass(frozen=True)
class ContainerContract:
    """One container and the GPU resources it asks for (its limit, else its request)."""

    name: str
    init: bool
    amounts: Mapping[str, int] = field(default_factory=_empty)  # resource -> whole units
    problems: Mapping[str, str] = field(default_factory=_empty)  # resource -> why unreadable

    def amount(self, resource: str) -> int:
        """Units of `resource` (0 when not asked for); PodContractError when unreadable."""
        if resource in self.problems:
            raise PodContractError(self.problems[resource])
        return self.amounts.get(resource, 0)


@dataclass(frozen=True)
class PodContract:
    """What one pod asks of the GPUs and what the schedulers and the plugin wrote on it.

    Parsed values are None when absent or unreadable; `problems` holds why, per label or
    annotation name (container resources keep theirs on each container)."""

    uid: str = ""
    namespace: str = ""
    name: str = ""
    node_name: str = ""
    phase: str = ""
    created: float = 0.0  # creationTimestamp, Unix seconds (0 when absent)
    deleting: bool = False
    labels: Mapping[str, str] = field(default_factory=_empty)
    annotations: Mapping[str, str] = field(default_factory=_empty)
    containers: tuple[ContainerContract, ...] = ()  # init containers first, as the kubelet runs
    gpu_count: int | None = 1  # aliyun.com/gpu-count (1 when absent; None when unreadable)
    gpu_indexes: tuple[int, ...] | None = None  # ALIYUN_COM_GPU_MEM_IDX
    pod_units: int | None = None  # ALIYUN_COM_GPU_MEM_POD
    dev_units: int | None = None  # ALIYUN_COM_GPU_MEM_DEV
    assigned: bool = False  # ALIYUN_COM_GPU_MEM_ASSIGNED is "true" (any case)
    assume_time: int | None = None  # ALIYUN_COM_GPU_MEM_ASSUME_TIME, Unix nanoseconds
    volcano_index: int | None = None  # volcano.sh/gpu-index (one GPU)
    volcano_predicate_time: int | None = None  # volcano.sh/predicate-time, nanoseconds
    volcano_assigned: bool = False  # volcano.sh/gpu-assigned present and not "false"
    node_policy: str | None = None  # cgpu.io/node-policy
    gpu_policy: str | None = None  # cgpu.io/gpu-policy
    compute_priority: str | None = None  # cgpu.io/compute-priority (None: absent, so normal)
    problems: Mapping[str, str] = field(default_factory=_empty)  # label/annotation -> why

    @property
    def where(self) -> str:
        return f"pod {self.namespace}/{self.name}"

    def check(self, *keys: str) -> None:
        """PodContractError for the first problem among `keys` (labels, annotations)."""
        for key in keys:
            if key in self.problems:
                raise PodContractError(self.problems[key])

    def amounts(self, resource: str, init: bool = False) -> list[int]:
        """`resource` of each regular container (with `init`, of each init container), in
        order; PodContractError when one is unreadable."""
        return [c.amount(resource) for c in self.containers if c.init == init]

    def total(self, resource: str) -> int:
        """The sum of `resource` over the regular containers; PodContractError if unreadable."""
        return sum(self.amounts(resource))

    def resource_problems(self, resource: str | None = None) -> list[str]:
        """Why containers' resources (only `resource`, when given) cannot be read."""
        return [
            message
            for c in self.containers
            for name, message in c.problems.items()
            if resource is None or name == resource
        ]


def _container(raw: Any, init: bool, resources: Iterable[str]) -> ContainerContract:
    container = raw if isinstance(raw, Mapping) else {}
    name = str(container.get("name", ""))
    spec = container.get("resources")
    spec = spec if isinstance(spec, Mapping) else {}
    limits = spec.get("limits") if isinstance(spec.get("limits"), Mapping) else {}
    requests = spec.get("requests") if isinstance(spec.get("requests"), Mapping) else {}
    amounts: dict[str, int] = {}
    problems: dict[str, str] = {}
    kind = "init container" if init else "container"
    for resource in resources:
        value = limits.get(resource)
        if value is None:
            value = requests.get(resource)
        if value is None:
            continue
        try:
            amounts[resource] = parse_extended_quantity(value, f"{kind} {name or '?'} {resource}")
        except PodContractError as err:
            problems[resource] = str(err)
    return ContainerContract(name, init, MappingProxyType(amounts), MappingProxyType(problems))


def _created(text: Any) -> float:
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _strings(raw: Any) -> dict[str, str]:
    """Labels or annotations: a mapping of strings (anything else reads as none)."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, str)}


class _Reader:
    """Parses labels and annotations, collecting problems."""

    def __init__(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
        self.labels = labels
        self.annotations = annotations
        self.problems: dict[str, str] = {}

    def bad(self, key: str, kind: str, why: str) -> None:
        self.problems[key] = f"{kind} {key}={self._raw(key, kind)!r} {why}"

    def _raw(self, key: str, kind: str) -> str:
        return (self.labels if kind == "label" else self.annotations).get(key, "")

    def gpu_count(self) -> int | None:
        raw = self.labels.get(GPU_COUNT)
        if raw is None:
            return 1
        value = _digits(raw)
        if value is None or value < 1:
            self.bad(GPU_COUNT, "label", "is not a positive integer")
            return None
        return value

    def indexes(self) -> tuple[int, ...] | None:
        raw = self.annotations.get(GPU_MEM_IDX, "").strip()
        if not raw:
            return None
        parts = [_digits(part) for part in raw.split(",")]
        if any(p is None for p in parts):
            self.bad(GPU_MEM_IDX, "annotation", "is not a GPU index or a comma list of them")
            return None
        return tuple(p for p in parts if p is not None)

    def count(self, key: str, what: str, limit: int = INT64_MAX, strip: bool = True) -> int | None:
        raw = self.annotations.get(key)
        if raw is None or not raw.strip():
            return None
        value = _digits(raw, strip)
        if value is None or value > limit:
            self.bad(key, "annotation", f"is not {what}")
            return None
        return value

    def volcano_index(self) -> int | None:
        raw = self.annotations.get(VOLCANO_GPU_INDEX)
        if raw is None:
            return None
        value = _digits(raw)
        if value is None:
            detail = (
                "names several GPUs; a gpu-memory container gets exactly one"
                if "," in raw
                else "is not a GPU index"
            )
            self.bad(VOLCANO_GPU_INDEX, "annotation", detail)
        return value

    def policy(self, key: str, allowed: tuple[str, ...] = POLICIES) -> str | None:
        raw = self.annotations.get(key)
        if raw is None:
            return None
        if raw not in allowed:
            self.bad(key, "annotation", f"is not one of {', '.join(allowed)}")
            return None
        return raw


def read_pod(pod: Mapping[str, Any], resources: Iterable[str] = RESOURCES) -> PodContract:
    """The contract of one pod (API JSON: a mapping with camelCase keys). Never raises for a
    malformed field (see `PodContract.problems`); PodContractError only when `pod` is not a
    mapping. `resources`: the container resources to read (all of cgpu's by default)."""
    if not isinstance(pod, Mapping):
        raise PodContractError(f"a pod must be a JSON object, not {type(pod).__name__}")
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    wanted = tuple(resources)
    containers = tuple(
        _container(c, init, wanted)
        for key, init in (("initContainers", True), ("containers", False))
        for c in (spec.get(key) if isinstance(spec.get(key), list) else [])
    )
    reader = _Reader(labels, annotations)
    predicate = VOLCANO_PREDICATE_TIME
    return PodContract(
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or ""),
        created=_created(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        labels=MappingProxyType(labels),
        annotations=MappingProxyType(annotations),
        containers=containers,
        gpu_count=reader.gpu_count(),
        gpu_indexes=reader.indexes(),
        pod_units=reader.count(GPU_MEM_POD, "a whole number of units"),
        dev_units=reader.count(GPU_MEM_DEV, "a whole number of units"),
        assigned=annotations.get(GPU_MEM_ASSIGNED, "").lower() == "true",
        assume_time=reader.count(GPU_MEM_ASSUME_TIME, "a time in nanoseconds"),
        volcano_index=reader.volcano_index(),
        # Volcano reads it with Go's ParseUint: no spaces, at most 2**64-1.
        volcano_predicate_time=reader.count(predicate, "a time in nanoseconds", UINT64_MAX, False),
        volcano_assigned=annotations.get(VOLCANO_GPU_ASSIGNED, "false") != "false",
        node_policy=reader.policy(NODE_POLICY_ANNOTATION),
        gpu_policy=reader.policy(GPU_POLICY_ANNOTATION),
        compute_priority=reader.policy(COMPUTE_PRIORITY_ANNOTATION, PRIORITIES),
        problems=MappingProxyType(reader.problems),
    )


def read_annotations(annotations: Mapping[str, str]) -> PodContract:
    """The contract of a pod known only by its annotations (no containers, no labels)."""
    return read_pod({"metadata": {"annotations": dict(annotations)}}, ())


__all__ = [
    "MEMORY_UNIT_MIB",
    "POLICIES",
    "PRIORITIES",
    "RESOURCES",
    "VOLCANO_UNIT",
    "ContainerContract",
    "PodContract",
    "PodContractError",
    "parse_extended_quantity",
    "read_annotations",
    "read_pod",
]
