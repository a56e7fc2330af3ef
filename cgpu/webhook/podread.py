"""The one place the webhook reads a pod's gpushare/Volcano requests.

Each container (init containers first, as the kubelet starts them) is read into a
`ContainerAsk`: the quantities of `aliyun.com/gpu-mem`, `aliyun.com/gpu-core.percentage` and
`volcano.sh/gpu-memory` from its limits, else its requests, as the device plugin reads them;
each value through the project's one reader of the pod contract
(`cgpu.core.podcontract.parse_extended_quantity`). What this module adds is where each value
sits (the container's index, limits or requests), which the patch needs. A value that is not
a whole, non-negative quantity, or limits and requests that disagree, is a `PodReadError`
naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cgpu.core.podcontract import RESOURCES, PodContractError, parse_extended_quantity

SECTIONS = ("limits", "requests")
KINDS = ("initContainers", "containers")


class PodReadError(ValueError):
    """A pod field the webhook cannot read; `field` is its path in the pod."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.field = where


@dataclass(frozen=True)
class ContainerAsk:
    """One container and what it asks for of the resources the webhook translates."""

    kind: str  # "initContainers" or "containers"
    index: int  # its position in that list
    name: str
    sidecar: bool  # an init container with restartPolicy Always (runs beside the others)
    amounts: dict[str, int] = field(default_factory=dict)  # resource -> quantity, when > 0
    found: tuple[tuple[str, str], ...] = ()  # (section, resource) present in the spec
    claims: tuple[str, ...] = ()  # names in resources.claims already

    @property
    def where(self) -> str:
        """The container's path in the pod."""
        return f"spec.{self.kind}[{self.index}]"

    @property
    def init(self) -> bool:
        """An init container that runs before the regular ones (not a sidecar)."""
        return self.kind == KINDS[0] and not self.sidecar


def read_containers(pod: dict[str, Any]) -> list[ContainerAsk]:
    """Every container of `pod`, with what it asks for; PodReadError if a field is unreadable."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise PodReadError("spec", "missing or not an object")
    asks = []
    for kind in KINDS:
        containers = spec.get(kind)
        containers = [] if containers is None else containers
        if not isinstance(containers, list):
            raise PodReadError(f"spec.{kind}", "not a list")
        for index, container in enumerate(containers):
            if not isinstance(container, dict):
                raise PodReadError(f"spec.{kind}[{index}]", "not an object")
            asks.append(_read_container(kind, index, container))
    return asks


def _read_container(kind: str, index: int, container: dict[str, Any]) -> ContainerAsk:
    where = f"spec.{kind}[{index}]"
    resources = container.get("resources")
    resources = {} if resources is None else resources
    if not isinstance(resources, dict):
        raise PodReadError(f"{where}.resources", "not an object")
    values: dict[str, dict[str, int]] = {}
    found = []
    for section in SECTIONS:
        entries = resources.get(section)
        entries = {} if entries is None else entries
        if not isinstance(entries, dict):
            raise PodReadError(f"{where}.resources.{section}", "not an object")
        for resource in RESOURCES:
            if resource in entries:
                path = f"{where}.resources.{section}[{resource}]"
                values.setdefault(resource, {})[section] = _amount(path, entries[resource])
                found.append((section, resource))
    amounts = {}
    for resource, by_section in values.items():
        if len(set(by_section.values())) > 1:
            raise PodReadError(
                f"{where}.resources",
                f"{resource}: limits {by_section['limits']} and requests "
                f"{by_section['requests']} differ (an extended resource must ask for one amount)",
            )
        amount = next(iter(by_section.values()))
        if amount:
            amounts[resource] = amount
    claims = tuple(
        str(c.get("name", "")) for c in resources.get("claims") or [] if isinstance(c, dict)
    )
    return ContainerAsk(
        kind=kind,
        index=index,
        name=str(container.get("name", "")),
        sidecar=kind == KINDS[0] and container.get("restartPolicy") == "Always",
        amounts=amounts,
        found=tuple(found),
        claims=claims,
    )


def _amount(path: str, raw: object) -> int:
    """A resource quantity as a whole, non-negative number of the resource's units."""
    try:
        return parse_extended_quantity(raw, path)
    except PodContractError as err:
        raise PodReadError(path, f"{err}: write a whole number of the resource's units") from None
