"""The node's ResourceSlice pool: one slice, named after the node, kept current.

The pool is named after the node. Every change of its content (a GPU turning unhealthy or
healthy again, a restart with other GPUs) publishes it under a higher `pool.generation`, so
the scheduler drops what an older generation said. Only this driver's slices on this node
are read, changed or deleted.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from cgpu.core.layout import DRA_DRIVER
from cgpu.dra.devices import device
from cgpu.dra.inventory import Inventory
from cgpu.dra.kubeapi import KubeError, ResourceApi

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ATTEMPTS = 5


def slice_name(node: str) -> str:
    """The name of the node's one slice."""
    return f"{node}-{DRA_DRIVER}"[:253]


def build_slice(node: str, inventory: Inventory, generation: int) -> Obj:
    """The ResourceSlice for the node's healthy GPUs at `generation`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node)},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [device(g) for g in inventory.healthy()],
        },
    }


class Publisher:
    """Publishes the pool; `publish()` is safe to call from any thread, at any time."""

    def __init__(self, api: ResourceApi, inventory: Inventory) -> None:
        self.api = api
        self.inventory = inventory
        self.node = api.node
        self._lock = threading.Lock()
        # (resourceVersion, spec without the generation) of the slice as last written: the
        # API server may store it in its own canonical form, which must not read as a change.
        self._written: tuple[str, Obj] | None = None

    def publish(self) -> Obj:
        """Make the API server hold exactly the current slice; returns it as stored."""
        with self._lock:
            for attempt in range(ATTEMPTS):
                try:
                    return self._publish_once()
                except KubeError as err:
                    if err.status != 409 or attempt == ATTEMPTS - 1:
                        raise
                    log.info("resourceslice changed under us (%s); retrying", err)
        raise AssertionError("unreachable")

    def _publish_once(self) -> Obj:
        existing = self.api.own_slices()
        name = slice_name(self.node)
        generation = max((_generation(s) for s in existing), default=0)
        stale = [s["metadata"]["name"] for s in existing if s["metadata"]["name"] != name]
        for other in stale:  # the pool changes: published again below, at a new generation
            log.info("deleting stale resourceslice %s", other)
            self.api.delete_slice(other)
        current = next((s for s in existing if s["metadata"]["name"] == name), None)
        wanted = build_slice(self.node, self.inventory, generation + 1)
        if current is not None and not stale and self._unchanged(current, wanted):
            return current
        if current is None:
            stored = self.api.create_slice(wanted)
        else:
            wanted["metadata"] = {**current["metadata"]}
            stored = self.api.replace_slice(wanted)
        self._written = (stored["metadata"].get("resourceVersion", ""), _content(wanted))
        log.info(
            "published resourceslice %s: generation %d, %d devices",
            name,
            generation + 1,
            len(wanted["spec"]["devices"]),
        )
        return stored

    def _unchanged(self, current: Obj, wanted: Obj) -> bool:
        """Whether the stored slice already says what `wanted` says: it is the one this driver
        last wrote, for the same content, or it is equal to it field by field."""
        rv = current["metadata"].get("resourceVersion", "")
        if self._written is not None and self._written[0] == rv:
            return self._written[1] == _content(wanted)
        return _content(current) == _content(wanted)


def _generation(obj: Obj) -> int:
    value = ((obj.get("spec") or {}).get("pool") or {}).get("generation", 0)
    return value if isinstance(value, int) else 0


def _content(slice_: Obj) -> Obj:
    """A slice's spec without its pool generation."""
    spec = dict(slice_.get("spec") or {})
    spec["pool"] = {k: v for k, v in (spec.get("pool") or {}).items() if k != "generation"}
    return spec
