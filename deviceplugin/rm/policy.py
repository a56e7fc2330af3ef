"""The one interface of the allocation policies, and what they share.

A policy (memory in `memory`, compute in `compute`, Volcano's in `volcano_policy`) chooses the
devices of one container and makes its container directory; it answers with an `Allocation`,
which the plugin server renders as the kubelet's response (`cgpu.deviceplugin.plugin.response`).
The memory and compute policies of one plugin share an `Assignments` (which container has
what), never each other's state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cgpu.core.injection import Mount
from cgpu.core.layout import ENV_COMPUTE_LIMIT
from cgpu.deviceplugin.rm.mps import MpsInjection
from cgpu.deviceplugin.rm.pairing import Entry


@dataclass(frozen=True)
class Host:
    """This node's side of allocation: the state dir, the resources served, MPS, context costs."""

    state_dir: Path
    resource: str
    compute_resource: str | None = None  # also served: containers may ask for both
    mps: MpsInjection | None = None  # --isolation mps
    contexts: Mapping[str, int] = field(default_factory=dict)  # {uuid: a context's bytes}


@dataclass(frozen=True)
class Allocation:
    """What a policy gave one container: its directory (by key), its variables and the mounts
    beyond the shim, ld.so.preload and the directory itself (which every container gets)."""

    key: str
    directory: Path
    env: dict[str, str]
    mounts: list[Mount] = field(default_factory=list)


class AllocationPolicy(Protocol):
    """GetPreferredAllocation and Allocate for one resource; safe across gRPC threads."""

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """IDs to suggest to the kubelet for one container."""
        ...

    def allocate(self, ids: Sequence[str]) -> Allocation:
        """Allocate one container; AllocationError says why not."""
        ...

    def rollback(self, key: str) -> None:
        """Undo this policy's part of a container directory (a failed Allocate)."""
        ...


def entry_environment(host: Host, entry: Entry) -> dict[str, str]:
    """The variables both halves of a container answer with (the kubelet merges them)."""
    uuid = entry.gpus[0].uuid
    envs: dict[str, str] = {}
    if host.mps is not None:
        memory = entry.limits.get(uuid) if entry.limits else None
        envs.update(host.mps.environment(uuid, memory, entry.compute))
    elif entry.compute is not None:
        envs[ENV_COMPUTE_LIMIT] = str(entry.compute)
    return envs


def entry_mounts(host: Host, entry: Entry) -> list[Mount]:
    """The MPS mounts of the container's GPU, in MPS mode."""
    return host.mps.mounts(entry.gpus[0].uuid) if host.mps is not None else []
