"""One container directory for the memory and the compute Allocate of the same container.

The kubelet calls Allocate once per resource, so a container that asks for both
`aliyun.com/gpu-mem` and `aliyun.com/gpu-core.percentage` gets two calls, in no fixed order,
one right after the other (the kubelet allocates a container's resources back to back). Both
must land on the same GPU and answer with the same container directory, or the kubelet keeps
the first answer's mounts and logs a conflict for the second's.

The rule:
- with the API server, the two halves are joined by the container's identity, (pod UID,
  container name), which each allocator finds by matching the request to the pod spec;
- standalone (no pod information), a half joins the most recent directory on the same GPU
  that lacks the other half and was made less than `window` seconds ago. Its limit: a
  container asking for one resource only, followed within the window by another container
  asking for the other only, on the same GPU, is taken for one container. Run the plugin
  with the API server when pods mix them.

The first half makes the directory; the second rewrites it under the same key (the
container has not started yet), so the config holds both lines.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from cgpu.core.containers import (
    create_container_dir,
    list_container_dirs,
    read_meta,
    remove_container_dir,
)
from cgpu.core.gpus import GPU
from cgpu.core.layout import SOURCE_DEVICE_PLUGIN
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.rm.directory import new_key

log = logging.getLogger(__name__)

MEMORY = "memory"
COMPUTE = "compute"
DEFAULT_WINDOW = 10.0

Identity = tuple[str, str]  # (pod UID, container name)


@dataclass
class Slot:
    """What one container got so far: its directory and the halves served."""

    key: str
    gpus: list[GPU]
    identity: Identity | None
    created: float
    limits: dict[str, int] | None = None  # memory half: {uuid: bytes}
    compute: int | None = None  # compute half: percent of gpus[0]
    meta: dict[str, Any] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)  # half -> device IDs

    def has(self, half: str) -> bool:
        return (self.limits if half == MEMORY else self.compute) is not None


class Pairing:
    """The plugin's container directories, keyed by container; safe across threads."""

    def __init__(
        self,
        state_dir: Path,
        gpus: Iterable[GPU] = (),
        window: float = DEFAULT_WINDOW,
        mps: bool = False,
        contexts: Mapping[str, int] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.window = window
        self.mps = mps  # MPS enforces compute: no compute line for the shim
        self.contexts = dict(contexts or {})  # {uuid: a context's bytes}, for cgpu.conf
        self.lock = threading.RLock()
        self._slots: dict[str, Slot] = {}
        self._recover({g.uuid: g for g in gpus})

    def _recover(self, known: dict[str, GPU]) -> None:
        """Containers served before a restart, from meta.json (identity-matched ones only)."""
        for directory in list_container_dirs(self.state_dir):
            meta = read_meta(directory)
            if meta.get("source") != SOURCE_DEVICE_PLUGIN:
                continue
            if not (meta.get("pod_uid") and meta.get("container")) or "limits" not in meta:
                continue  # standalone, or made before compute shares existed
            indexes, uuids = meta.get("gpu_indexes") or [], meta.get("gpu_uuids") or []
            gpus = [
                known.get(str(u)) or GPU(index=int(i), uuid=str(u), name="", total_bytes=0)
                for i, u in zip(indexes, uuids, strict=False)
            ]
            if not gpus:
                continue
            slot = Slot(
                key=directory.name,
                gpus=gpus,
                identity=(str(meta["pod_uid"]), str(meta["container"])),
                created=0.0,
                limits=meta.get("limits"),
                compute=meta.get("compute_percent"),
                meta={k: v for k, v in meta.items() if k not in ("key", "created")},
            )
            self._slots[slot.key] = slot

    def served(self, identity: Identity, half: str) -> bool:
        """Whether that container's half has been allocated."""
        with self.lock:
            return any(s.identity == identity and s.has(half) for s in self._slots.values())

    def gpu_of(self, identity: Identity | None, half: str) -> GPU | None:
        """The GPU the other half of this container already has, if any."""
        with self.lock:
            slot = self._partner(identity, half, None)
            return slot.gpus[0] if slot is not None else None

    def forget(self, pending_uids: set[str]) -> None:
        """Drop identity slots of pods that are no longer pending (their directories stay)."""
        with self.lock:
            now = time.monotonic()
            for key, slot in list(self._slots.items()):
                gone = slot.identity is not None and slot.identity[0] not in pending_uids
                stale = slot.identity is None and now - slot.created > self.window
                if gone or stale:
                    del self._slots[key]

    def _partner(self, identity: Identity | None, half: str, gpu: str | None) -> Slot | None:
        """The slot the other half made for this container."""
        if identity is not None:
            found = [s for s in self._slots.values() if s.identity == identity]
            return found[0] if found else None
        now = time.monotonic()
        open_slots = [
            s
            for s in self._slots.values()
            if s.identity is None
            and not s.has(half)
            and now - s.created <= self.window
            and (gpu is None or s.gpus[0].uuid == gpu)
            and len(s.gpus) == 1
        ]
        return max(open_slots, key=lambda s: s.created) if open_slots else None

    def add_memory(
        self,
        identity: Identity | None,
        gpus: list[GPU],
        limits: dict[str, int],
        ids: list[str],
        meta: dict[str, Any],
    ) -> tuple[str, Path, Slot]:
        """Record the memory half; returns (key, directory, slot)."""
        with self.lock:
            slot = self._partner(identity, MEMORY, gpus[0].uuid if len(gpus) == 1 else None)
            if slot is not None:
                if slot.has(MEMORY):
                    raise AllocationError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        "this container's memory was already allocated "
                        f"(container directory {slot.key})",
                    )
                if [g.uuid for g in gpus] != [g.uuid for g in slot.gpus]:
                    raise AllocationError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"the container's memory is on GPU(s) "
                        f"{', '.join(_name(g) for g in gpus)} but its compute share is on GPU "
                        f"{_name(slot.gpus[0])}: both must be on the same GPU",
                    )
                slot.gpus = gpus  # the memory side knows the sizes
            else:
                slot = self._new(identity, gpus)
            slot.limits = dict(limits)
            slot.ids[MEMORY] = list(ids)
            slot.meta.update(meta)
            return self._write(slot)

    def add_compute(
        self,
        identity: Identity | None,
        gpu: GPU,
        percent: int,
        ids: list[str],
        meta: dict[str, Any],
    ) -> tuple[str, Path, Slot]:
        """Record the compute half; returns (key, directory, slot)."""
        with self.lock:
            slot = self._partner(identity, COMPUTE, gpu.uuid)
            if slot is not None:
                if slot.has(COMPUTE):
                    raise AllocationError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        "this container's compute share was already allocated "
                        f"(container directory {slot.key})",
                    )
                if len(slot.gpus) != 1:
                    raise AllocationError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"the container's memory spans {len(slot.gpus)} GPUs; a compute share "
                        "applies to a one-GPU container",
                    )
                if slot.gpus[0].uuid != gpu.uuid:
                    raise AllocationError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"the kubelet offered compute units on GPU {_name(gpu)} but the "
                        f"container's memory is on GPU {_name(slot.gpus[0])}: both must be on "
                        "the same GPU",
                    )
            else:
                slot = self._new(identity, [gpu])
            slot.compute = percent
            slot.ids[COMPUTE] = list(ids)
            for key, value in meta.items():
                slot.meta.setdefault(key, value)
            return self._write(slot)

    def release(self, key: str, half: str) -> None:
        """Undo one half (an Allocate that failed as a whole); removes a directory left empty."""
        with self.lock:
            slot = self._slots.get(key)
            if slot is None:
                remove_container_dir(self.state_dir, key)
                return
            if half == MEMORY:
                slot.limits = None
            else:
                slot.compute = None
            slot.ids.pop(half, None)
            if slot.limits is None and slot.compute is None:
                del self._slots[key]
                remove_container_dir(self.state_dir, key)
            else:
                self._write(slot)

    def _new(self, identity: Identity | None, gpus: list[GPU]) -> Slot:
        now = time.monotonic()
        for key, old in list(self._slots.items()):  # standalone slots past pairing
            if old.identity is None and now - old.created > self.window:
                del self._slots[key]
        key = new_key()
        slot = Slot(key=key, gpus=list(gpus), identity=identity, created=now)
        self._slots[key] = slot
        return slot

    def _write(self, slot: Slot) -> tuple[str, Path, Slot]:
        """(Re)make the slot's directory with both halves."""
        uuid = slot.gpus[0].uuid
        limits = slot.limits or {uuid: slot.gpus[0].total_bytes}
        compute = {uuid: slot.compute} if slot.compute is not None and not self.mps else None
        meta = dict(slot.meta)
        meta["device_ids"] = [i for half in (MEMORY, COMPUTE) for i in slot.ids.get(half, [])]
        meta["gpu_uuids"] = [g.uuid for g in slot.gpus]
        meta["gpu_indexes"] = [g.index for g in slot.gpus]
        meta["limits"] = slot.limits
        if slot.compute is not None:
            meta["compute_percent"] = slot.compute
        try:
            directory = create_container_dir(
                self.state_dir, slot.key, limits, meta, compute, self.contexts
            )
        except Exception as err:
            raise AllocationError(
                grpc.StatusCode.INTERNAL, f"cannot create the container directory: {err}"
            ) from err
        return slot.key, directory, slot


def _name(gpu: GPU) -> str:
    return f"{gpu.index} ({gpu.uuid})"
