"""One container directory for the memory and the compute Allocate of the same container.

The kubelet calls Allocate once per resource, so a container that asks for both
`aliyun.com/gpu-mem` and `aliyun.com/gpu-core.percentage` gets two calls, in no fixed order,
one right after the other (the kubelet allocates a container's resources back to back). Both
must land on the same GPU and answer with the same container directory, or the kubelet keeps
the first answer's mounts and logs a conflict for the second's.

The rule:
- with the API server, the two halves are joined by the container's pod and name, (pod UID,
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

PodContainer = tuple[str, str]  # (pod UID, container name)


@dataclass
class Entry:
    """What one container got so far: its directory and the halves served."""

    key: str
    gpus: list[GPU]
    pod_container: PodContainer | None
    created: float
    limits: dict[str, int] | None = None  # memory half: {uuid: bytes}
    compute: int | None = None  # compute half: percent of gpus[0]
    priority: str = "normal"  # of the compute half's turns (cgpu.io/compute-priority)
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
        self._entries: dict[str, Entry] = {}
        self._recover({g.uuid: g for g in gpus})

    def _recover(self, known: dict[str, GPU]) -> None:
        """Containers served before a restart, from meta.json (those naming a pod and container)."""
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
            entry = Entry(
                key=directory.name,
                gpus=gpus,
                pod_container=(str(meta["pod_uid"]), str(meta["container"])),
                created=0.0,
                limits=meta.get("limits"),
                compute=meta.get("compute_percent"),
                priority=str(meta.get("compute_priority") or "normal"),
                meta={k: v for k, v in meta.items() if k not in ("key", "created")},
            )
            self._entries[entry.key] = entry

    def served(self, pod_container: PodContainer, half: str) -> bool:
        """Whether that container's half has been allocated."""
        with self.lock:
            return any(
                s.pod_container == pod_container and s.has(half) for s in self._entries.values()
            )

    def gpu_of(self, pod_container: PodContainer | None, half: str) -> GPU | None:
        """The GPU the other half of this container already has, if any."""
        with self.lock:
            entry = self._partner(pod_container, half, None)
            return entry.gpus[0] if entry is not None else None

    def forget(self, pending_uids: set[str]) -> None:
        """Drop the entries of pods that are no longer pending (their directories stay)."""
        with self.lock:
            now = time.monotonic()
            for key, entry in list(self._entries.items()):
                gone = (
                    entry.pod_container is not None and entry.pod_container[0] not in pending_uids
                )
                stale = entry.pod_container is None and now - entry.created > self.window
                if gone or stale:
                    del self._entries[key]

    def _partner(
        self, pod_container: PodContainer | None, half: str, gpu: str | None
    ) -> Entry | None:
        """The entry the other half made for this container."""
        if pod_container is not None:
            found = [s for s in self._entries.values() if s.pod_container == pod_container]
            return found[0] if found else None
        now = time.monotonic()
        open_entries = [
            s
            for s in self._entries.values()
            if s.pod_container is None
            and not s.has(half)
            and now - s.created <= self.window
            and (gpu is None or s.gpus[0].uuid == gpu)
            and len(s.gpus) == 1
        ]
        return max(open_entries, key=lambda s: s.created) if open_entries else None

    def add_memory(
        self,
        pod_container: PodContainer | None,
        gpus: list[GPU],
        limits: dict[str, int],
        ids: list[str],
        meta: dict[str, Any],
    ) -> tuple[str, Path, Entry]:
        """Record the memory half; returns (key, directory, entry)."""
        with self.lock:
            entry = self._partner(pod_container, MEMORY, gpus[0].uuid if len(gpus) == 1 else None)
            if entry is not None:
                if entry.has(MEMORY):
                    raise AllocationError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        "this container's memory was already allocated "
                        f"(container directory {entry.key})",
                    )
                if [g.uuid for g in gpus] != [g.uuid for g in entry.gpus]:
                    raise AllocationError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"the container's memory is on GPU(s) "
                        f"{', '.join(_name(g) for g in gpus)} but its compute share is on GPU "
                        f"{_name(entry.gpus[0])}: both must be on the same GPU",
                    )
                entry.gpus = gpus  # the memory side knows the sizes
            else:
                entry = self._new(pod_container, gpus)
            entry.limits = dict(limits)
            entry.ids[MEMORY] = list(ids)
            entry.meta.update(meta)
            return self._write(entry)

    def add_compute(
        self,
        pod_container: PodContainer | None,
        gpu: GPU,
        percent: int,
        ids: list[str],
        meta: dict[str, Any],
        priority: str = "normal",
    ) -> tuple[str, Path, Entry]:
        """Record the compute half (`priority`: of its turns); returns (key, directory, entry)."""
        with self.lock:
            entry = self._partner(pod_container, COMPUTE, gpu.uuid)
            if entry is not None:
                if entry.has(COMPUTE):
                    raise AllocationError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        "this container's compute share was already allocated "
                        f"(container directory {entry.key})",
                    )
                if len(entry.gpus) != 1:
                    raise AllocationError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"the container's memory spans {len(entry.gpus)} GPUs; a compute share "
                        "applies to a one-GPU container",
                    )
                if entry.gpus[0].uuid != gpu.uuid:
                    raise AllocationError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"the kubelet offered compute units on GPU {_name(gpu)} but the "
                        f"container's memory is on GPU {_name(entry.gpus[0])}: both must be on "
                        "the same GPU",
                    )
            else:
                entry = self._new(pod_container, [gpu])
            entry.compute = percent
            entry.priority = priority
            entry.ids[COMPUTE] = list(ids)
            for key, value in meta.items():
                entry.meta.setdefault(key, value)
            return self._write(entry)

    def release(self, key: str, half: str) -> None:
        """Undo one half (an Allocate that failed as a whole); removes a directory left empty."""
        with self.lock:
            entry = self._entries.get(key)
            if entry is None:
                remove_container_dir(self.state_dir, key)
                return
            if half == MEMORY:
                entry.limits = None
            else:
                entry.compute = None
            entry.ids.pop(half, None)
            if entry.limits is None and entry.compute is None:
                del self._entries[key]
                remove_container_dir(self.state_dir, key)
            else:
                self._write(entry)

    def _new(self, pod_container: PodContainer | None, gpus: list[GPU]) -> Entry:
        now = time.monotonic()
        for key, old in list(self._entries.items()):  # standalone entries past pairing
            if old.pod_container is None and now - old.created > self.window:
                del self._entries[key]
        key = new_key()
        entry = Entry(key=key, gpus=list(gpus), pod_container=pod_container, created=now)
        self._entries[key] = entry
        return entry

    def _write(self, entry: Entry) -> tuple[str, Path, Entry]:
        """(Re)make the entry's directory with both halves."""
        uuid = entry.gpus[0].uuid
        limits = entry.limits or {uuid: entry.gpus[0].total_bytes}
        share: int | tuple[int, str, str] | None = entry.compute
        if entry.compute is not None and entry.priority != "normal":
            share = (entry.compute, "fixed", entry.priority)  # the policy is the default's
        compute = {uuid: share} if share is not None and not self.mps else None
        meta = dict(entry.meta)
        meta["device_ids"] = [i for half in (MEMORY, COMPUTE) for i in entry.ids.get(half, [])]
        meta["gpu_uuids"] = [g.uuid for g in entry.gpus]
        meta["gpu_indexes"] = [g.index for g in entry.gpus]
        meta["limits"] = entry.limits
        if entry.compute is not None:
            meta["compute_percent"] = entry.compute
            meta["compute_priority"] = entry.priority
        try:
            directory = create_container_dir(
                self.state_dir, entry.key, limits, meta, compute, self.contexts
            )
        except Exception as err:
            raise AllocationError(
                grpc.StatusCode.INTERNAL, f"cannot create the container directory: {err}"
            ) from err
        return entry.key, directory, entry


def _name(gpu: GPU) -> str:
    return f"{gpu.index} ({gpu.uuid})"
