"""Removing the directories of containers that are gone, judged by the kubelet's pod-resources.

A directory the plugin made is removed when:
- none of its device IDs is held by any container in pod-resources, its pod (when known) is
  no longer listed, and it is older than the grace period (the kubelet lists a container's
  devices right after Allocate; the grace covers that gap and init containers, which
  pod-resources does not list); or
- a newer directory of a different pod holds some of the same device IDs: the kubelet only
  hands out IDs that are free, so the older pod has let them go.

A directory whose pod is not yet known learns it ("adoption") once pod-resources shows a
single pod holding its IDs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cgpu.core.containers import list_container_dirs, read_meta, remove_container_dir, write_meta
from cgpu.core.podresources import Owner

log = logging.getLogger(__name__)

SOURCE = "device-plugin"


@dataclass
class _Entry:
    path: Path
    meta: dict[str, Any]
    ids: set[str]

    @property
    def pod(self) -> tuple[str, str] | None:
        ns, name = self.meta.get("namespace"), self.meta.get("pod")
        return (str(ns), str(name)) if ns and name else None

    @property
    def created(self) -> float:
        return float(self.meta.get("created") or 0.0)


def _adopt(entry: _Entry, devices: dict[Owner, set[str]]) -> None:
    """Record the pod (and container) holding the entry's IDs when that is unambiguous."""
    owners = [owner for owner, ids in devices.items() if ids & entry.ids]
    pods = {(ns, pod) for ns, pod, _ in owners}
    if entry.pod is not None or len(pods) != 1:
        return
    namespace, pod = next(iter(pods))
    update = {"namespace": namespace, "pod": pod}
    exact = [c for ns, p, c in owners if devices[(ns, p, c)] == entry.ids]
    if len(owners) == 1 and exact and "container" not in entry.meta:
        update["container"] = exact[0]
    entry.meta.update(update)
    write_meta(entry.path, entry.meta)
    log.info("container directory %s belongs to %s/%s", entry.path.name, namespace, pod)


def sweep(
    state_dir: Path,
    devices: dict[Owner, set[str]],
    pods: set[tuple[str, str]],
    grace: float,
    now: float | None = None,
) -> list[str]:
    """One cleanup pass over the plugin's directories; returns the keys removed."""
    now = time.time() if now is None else now
    entries = []
    for path in list_container_dirs(state_dir):
        meta = read_meta(path)
        if meta.get("source") != SOURCE:
            continue
        entries.append(_Entry(path, meta, set(meta.get("device_ids") or [])))
    held = set().union(*devices.values()) if devices else set()
    removed = []
    for entry in entries:
        try:
            _adopt(entry, devices)
        except OSError as err:
            log.warning("cannot update %s: %s", entry.path, err)
    for entry in entries:
        reason = None
        if not entry.ids & held and entry.pod not in pods and now - entry.created > grace:
            reason = "its devices are no longer held by any container"
        elif entry.pod is not None:
            newer = [
                other
                for other in entries
                if other is not entry
                and other.created > entry.created
                and other.pod is not None
                and other.pod != entry.pod
                and other.ids & entry.ids
            ]
            if newer:
                reason = f"its devices now belong to {'/'.join(newer[0].pod or ())}"
        if reason and remove_container_dir(state_dir, entry.path.name):
            log.info("removed container directory %s: %s", entry.path.name, reason)
            removed.append(entry.path.name)
    return removed
