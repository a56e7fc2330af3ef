"""The advertised devices: units of each GPU, their IDs and their health."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from cgpu.core.gpus import GPU
from cgpu.deviceplugin.units import Unit, device_id

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


class Inventory:
    """GPUs, their units and health; watchers wait on `changed` for a new `version`."""

    def __init__(self, gpus: Iterable[GPU], unit: Unit, index_ids: bool = False) -> None:
        self.unit = unit
        self.index_ids = index_ids
        self.gpus = [
            GpuUnits(gpu, unit.units_of(gpu.total_bytes), id_prefix(gpu, index_ids)) for gpu in gpus
        ]
        self._by_uuid = {g.gpu.uuid: g for g in self.gpus}
        self._by_id = {ident: (g, n) for g in self.gpus for n, ident in enumerate(g.ids())}
        self._healthy = {g.gpu.uuid: True for g in self.gpus}
        self.version = 0
        self.changed = threading.Condition()

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
        with self.changed:
            return self._healthy.get(uuid, False)

    def set_health(self, uuid: str, healthy: bool) -> bool:
        """Mark a GPU; returns whether that changed anything (and wakes the watchers)."""
        with self.changed:
            if uuid not in self._healthy or self._healthy[uuid] == healthy:
                return False
            self._healthy[uuid] = healthy
            self.version += 1
            self.changed.notify_all()
            return True

    def snapshot(self) -> tuple[int, list[tuple[str, str]]]:
        """(version, [(device ID, health)]) for every advertised device."""
        with self.changed:
            version = self.version
            health = dict(self._healthy)
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
        with self.changed:
            self.version += 1
            self.changed.notify_all()
