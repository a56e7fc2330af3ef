"""The prepared claims, on disk, so that a restarted driver still knows them.

`<state>/dra/checkpoint.json` maps each prepared claim's UID to what prepare made for it: the
container directory's key, the CDI device id and the devices returned. It is written
atomically after every change; one that cannot be read is set aside (renamed `.corrupt`),
logged, and the driver starts from an empty one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cgpu.core.files import atomic_write

log = logging.getLogger(__name__)

VERSION = 1


@dataclass(frozen=True)
class PreparedDevice:
    """One device returned to the kubelet."""

    requests: list[str]
    pool: str
    device: str
    share_id: str = ""  # the allocation's shareID, when the device is shared


@dataclass(frozen=True)
class Prepared:
    """One prepared claim."""

    namespace: str
    name: str
    key: str  # container directory
    cdi_id: str
    devices: list[PreparedDevice]


class Checkpoint:
    """The claims prepared on this node, kept in memory and on disk."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "dra" / "checkpoint.json"
        self.lock = threading.RLock()
        self.corrupt = 0
        self.claims: dict[str, Prepared] = self._load()

    def _load(self) -> dict[str, Prepared]:
        try:
            data = json.loads(self.path.read_bytes())
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
            return {uid: _prepared(entry) for uid, entry in data["claims"].items()}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            self.corrupt += 1
            aside = self.path.with_suffix(".corrupt")
            os.replace(self.path, aside)
            log.error("checkpoint %s unreadable (%s); moved to %s", self.path, err, aside)
            return {}

    def get(self, uid: str) -> Prepared | None:
        """The prepared claim, or None."""
        with self.lock:
            return self.claims.get(uid)

    def put(self, uid: str, prepared: Prepared) -> None:
        """Record a prepared claim (on disk before returning)."""
        with self.lock:
            self.claims[uid] = prepared
            self._save()

    def drop(self, uid: str) -> None:
        """Forget a claim (on disk before returning)."""
        with self.lock:
            if self.claims.pop(uid, None) is not None:
                self._save()

    def _save(self) -> None:
        body = {"version": VERSION, "claims": {u: asdict(p) for u, p in self.claims.items()}}
        atomic_write(self.path, json.dumps(body, indent=1, sort_keys=True) + "\n", 0o600)


def _prepared(entry: dict[str, Any]) -> Prepared:
    devices = [
        PreparedDevice(list(d["requests"]), d["pool"], d["device"], str(d.get("share_id", "")))
        for d in entry["devices"]
    ]
    return Prepared(
        str(entry["namespace"]),
        str(entry["name"]),
        str(entry["key"]),
        str(entry["cdi_id"]),
        devices,
    )
