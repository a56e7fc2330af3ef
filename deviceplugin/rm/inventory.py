"""The advertised devices: units of each GPU, their IDs and their health."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from cgpu.core.gpus import GPU
from cgpu.deviceplugin.rm.units import Unit, device_id

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


class UnknownDevices(ValueError):
    """Device IDs this plugin never advertised."""

    def __init__(self, ids: list[str]) -> None:
        super().__init__(", ".join(ids))
        self.ids = ids


def id_prefix(gpu: GPU, index_ids: bool) -> str:
    """What a GPU's device IDs start with: its UUID, or its NVML index (Volcano mode)."""
    return str(gpu.index) if index_ids else gpu.uuid


@dataclass(frozen=True)
class GpuUnits:
    """A GPU, how many units it offers, and what its device IDs start with."""

    gpu: GPU
    units: int
    prefix: str = ""

    def ids(self) -> list[str]:
        """Every device ID of this GPU, unit 0 first."""
        return [device_id(self.prefix or self.gpu.uuid, n) for n in range(self.units)]


class Health:
    """Per-GPU health, shared by every resource of the plugin (memory and compute units).

    A GPU is Healthy when no source (XID events, the MPS daemon) holds it Unhealthy.
    Watchers wait on `changed` for a new `version`.
    """

    def __init__(self, uuids: Iterable[str]) -> None:
        self._bad: dict[str, set[str]] = {uuid: set() for uuid in uuids}
        self.version = 0
        self.changed = threading.Condition()

    def healthy(self, uuid: str) -> bool:
        """Whether no source holds the GPU Unhealthy (False for an unknown GPU)."""
        with self.changed:
            return uuid in self._bad and not self._bad[uuid]

    def set(self, uuid: str, healthy: bool, source: str) -> bool:
        """Record one source's view; returns whether the GPU's health changed."""
        with self.changed:
            if uuid not in self._bad:
                return False
            before = not self._bad[uuid]
            if healthy:
                self._bad[uuid].discard(source)
            else:
                self._bad[uuid].add(source)
            if before == (not self._bad[uuid]):
                return False
            self.version += 1
            self.changed.notify_all()
            return True

    def states(self) -> tuple[int, dict[str, bool]]:
        """(version, {uuid: healthy})."""
        with self.changed:
            return self.version, {uuid: not bad for uuid, bad in self._bad.items()}

    def bump(self) -> None:
        """Wake every watcher."""
        with self.changed:
            self.version += 1
            self.changed.notify_all()


XID = "xid"


class Inventory:
    """GPUs, their units and health; watchers wait on `changed` for a new `version`.

    `per_gpu` fixes the units of every GPU (the compute resource's 100) instead of counting
    memory units, and `tag` goes between the GPU and the unit number in the IDs
    (`<uuid>-<tag>-<n>`). Inventories built with the same `health` share it.
    """

    def __init__(
        self,
        gpus: Iterable[GPU],
        unit: Unit,
        index_ids: bool = False,
        *,
        per_gpu: int | None = None,
        tag: str = "",
        health: Health | None = None,
    ) -> None:
        self.unit = unit
        self.index_ids = index_ids
        self.gpus = [
            GpuUnits(
                gpu,
                unit.units_of(gpu.total_bytes) if per_gpu is None else per_gpu,
                id_prefix(gpu, index_ids) + (f"-{tag}" if tag else ""),
            )
            for gpu in gpus
        ]
        self._by_uuid = {g.gpu.uuid: g for g in self.gpus}
        self._by_id = {ident: (g, n) for g in self.gpus for n, ident in enumerate(g.ids())}
        self.health = health or Health(g.gpu.uuid for g in self.gpus)

    @property
    def version(self) -> int:
        """Bumped on every health change (of any inventory sharing the health)."""
        return self.health.version

    @property
    def changed(self) -> threading.Condition:
        """Notified on every health change."""
        return self.health.changed

    def by_uuid(self, uuid: str) -> GpuUnits | None:
        """The GPU with this UUID, if advertised."""
        return self._by_uuid.get(uuid)

    def by_index(self, index: int) -> GpuUnits | None:
        """The GPU with this NVML index, if advertised."""
        return next((g for g in self.gpus if g.gpu.index == index), None)

    def parse(self, ident: str) -> tuple[GpuUnits, int] | None:
        """(GPU, unit number) for a device ID, or None when it is not one of ours."""
        return self._by_id.get(ident)

    def group(self, ids: Iterable[str]) -> dict[str, list[str]]:
        """Device IDs grouped by GPU UUID (in GPU index order); raises UnknownDevices."""
        groups: dict[str, list[str]] = {}
        unknown = []
        for ident in ids:
            parsed = self.parse(ident)
            if parsed is None:
                unknown.append(ident)
            else:
                groups.setdefault(parsed[0].gpu.uuid, []).append(ident)
        if unknown:
            raise UnknownDevices(unknown)
        order = {g.gpu.uuid: i for i, g in enumerate(self.gpus)}
        return dict(sorted(groups.items(), key=lambda item: order[item[0]]))

    def healthy(self, uuid: str) -> bool:
        """Whether the GPU is advertised Healthy."""
        return self.health.healthy(uuid)

    def set_health(self, uuid: str, healthy: bool, source: str = XID) -> bool:
        """Mark a GPU for one source; returns whether its health changed (and wakes the
        watchers)."""
        return self.health.set(uuid, healthy, source)

    def snapshot(self) -> tuple[int, list[tuple[str, str]]]:
        """(version, [(device ID, health)]) for every advertised device."""
        version, health = self.health.states()
        devices = [
            (ident, HEALTHY if health[g.gpu.uuid] else UNHEALTHY)
            for g in self.gpus
            for ident in g.ids()
        ]
        return version, devices

    def wait_for_change(self, seen: int, timeout: float) -> int:
        """Block until `version` differs from `seen` or `timeout` passes; returns the version."""
        with self.changed:
            self.changed.wait_for(lambda: self.version != seen, timeout)
            return self.version

    def bump(self) -> None:
        """Wake every watcher (used on shutdown)."""
        self.health.bump()
