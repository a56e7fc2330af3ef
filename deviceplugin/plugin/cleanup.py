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
from pathlib import Path
from typing import Any

from cgpu.core import cleanup
from cgpu.core.cleanup import Entry
from cgpu.core.containers import write_meta
from cgpu.core.layout import SOURCE_DEVICE_PLUGIN
from cgpu.core.podresources import Owner

log = logging.getLogger(__name__)


def _ids(entry: Entry) -> set[str]:
    return set(entry.meta.get("device_ids") or [])


def _pod(meta: dict[str, Any]) -> tuple[str, str] | None:
    ns, name = meta.get("namespace"), meta.get("pod")
    return (str(ns), str(name)) if ns and name else None


def _created(entry: Entry) -> float:
    return float(entry.meta.get("created") or 0.0)


def _adopt(entry: Entry, devices: dict[Owner, set[str]]) -> None:
    """Record the pod (and container) holding the entry's IDs when that is unambiguous."""
    ids = _ids(entry)
    owners = [owner for owner, held in devices.items() if held & ids]
    pods = {(ns, pod) for ns, pod, _ in owners}
    if _pod(entry.meta) is not None or len(pods) != 1:
        return
    namespace, pod = next(iter(pods))
    update = {"namespace": namespace, "pod": pod}
    exact = [c for ns, p, c in owners if devices[(ns, p, c)] == ids]
    if len(owners) == 1 and exact and "container" not in entry.meta:
        update["container"] = exact[0]
    entry.meta.update(update)
    write_meta(entry.path, entry.meta)
    log.info("container directory %s belongs to %s/%s", entry.key, namespace, pod)


def sweep(
    state_dir: Path,
    devices: dict[Owner, set[str]],
    pods: set[tuple[str, str]],
    grace: float,
    now: float | None = None,
) -> list[str]:
    """One cleanup pass over the plugin's directories; returns the keys removed."""
    now = time.time() if now is None else now
    found = cleanup.entries(state_dir, SOURCE_DEVICE_PLUGIN)
    held = set().union(*devices.values()) if devices else set()
    for entry in found:
        try:
            _adopt(entry, devices)
        except OSError as err:
            log.warning("cannot update %s: %s", entry.path, err)

    def stale(entry: Entry) -> str | None:
        ids, pod = _ids(entry), _pod(entry.meta)
        if not ids & held and pod not in pods and now - _created(entry) > grace:
            return "its devices are no longer held by any container"
        if pod is None:
            return None
        newer = [
            other_pod
            for other in found
            if other is not entry
            and _created(other) > _created(entry)
            and (other_pod := _pod(other.meta)) is not None
            and other_pod != pod
            and _ids(other) & ids
        ]
        return f"its devices now belong to {'/'.join(newer[0])}" if newer else None

    return cleanup.sweep(state_dir, {SOURCE_DEVICE_PLUGIN: stale}, found)
